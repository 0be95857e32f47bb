"""Celery wiring: a real worker process runs annotate's tasks; `manage.py demo` runs one beside the site."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from celery import Celery
from django.conf import settings

from annotate.management.commands.demo import worker_command
from tests.conftest import BROKER_KEYPREFIX, copy_demo, empty_broker

REDIS_URL = os.environ.get("TC_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def _site_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """Environment for a child process of the site: its own data dir and SQLite, whatever the tests use."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("CELERY_", "TC_"))}
    env.update(TC_DATA_DIR=str(data_dir), TC_DATABASE="sqlite", DEBUG="1", PYTHONUNBUFFERED="1", **extra)
    return env


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def redis_worker(tmp_path: Path):
    """A Celery worker for the annotate app, consuming from this test process's queues in Redis."""
    empty_broker(REDIS_URL)
    log = tmp_path / "worker.log"
    env = _site_env(tmp_path / "data", CELERY_BROKER_URL=REDIS_URL, CELERY_RESULT_BACKEND=REDIS_URL,
                    TC_BROKER_KEYPREFIX=BROKER_KEYPREFIX)
    with log.open("wb") as out:
        worker = subprocess.Popen(
            worker_command(), cwd=settings.BASE_DIR, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        yield worker
    finally:
        _stop(worker)
        print(log.read_text())  # shown by pytest only when the test failed


@pytest.mark.integration
def test_worker_runs_ping_through_redis(redis_worker) -> None:
    client = Celery("client", broker=REDIS_URL, backend=REDIS_URL, set_as_current=False)
    client.conf.broker_transport_options = {"global_keyprefix": BROKER_KEYPREFIX}

    result = client.send_task("annotate.tasks.ping")

    assert result.get(timeout=60) == "pong"


def test_demo_help_lists_address_argument() -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "demo", "--help"],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert "addrport" in done.stdout


@pytest.mark.integration
def test_demo_serves_site_runs_tasks_and_stops_worker(tmp_path: Path, wait_until, seeded_demo) -> None:
    data_dir = copy_demo(seeded_demo, tmp_path / "data")  # seeding is tests/conftest.py's `seeded_demo`
    log = tmp_path / "demo.log"
    port = _free_port()
    with log.open("wb") as out:
        demo = subprocess.Popen(
            [sys.executable, "manage.py", "demo", f"127.0.0.1:{port}"],
            cwd=settings.BASE_DIR,
            env=_site_env(data_dir),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        site = f"http://127.0.0.1:{port}"
        wait_until(lambda: _status(f"{site}/accounts/login/") == 200, timeout=90, what="the login page")
        assert _status(f"{site}/") == 302

        queue = data_dir / "broker" / "queue"
        client = Celery("client", broker="filesystem://", set_as_current=False)
        client.conf.broker_transport_options = {
            "data_folder_in": str(queue),
            "data_folder_out": str(queue),
            "control_folder": str(data_dir / "broker" / "control"),
        }
        task_id = client.send_task("annotate.tasks.ping").id
        wait_until(lambda: f"{task_id}] succeeded" in log.read_text(), timeout=60, what="the ping task")

        worker_pid = int(log.read_text().split("Celery worker started (pid ")[1].split(")")[0])
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=30) == 0
        assert "Celery worker stopped" in log.read_text()
        assert not _alive(worker_pid)
    finally:
        _stop(demo)
        print(log.read_text())  # shown by pytest only when the test failed


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _status(url: str) -> int | None:
    request = urllib.request.Request(url)
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        return opener.open(request, timeout=5).status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
