"""Fixtures for every test. Area-specific fixtures live in the conftest.py of their own directory.

Tests that need a service say so with a marker (`redis`, `postgres`, `e2e`; a test using a fixture whose name
contains "redis" counts as `redis`). Where the service is missing they are skipped and the run ends with one
line saying which and how to enable them; under CI (`CI=true`) nothing is skipped, so a missing service fails.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest

POLL_SECONDS = 0.05
REDIS_URL = os.environ.get("TC_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
CHROMIUM = os.environ.get("TC_CHROMIUM", "/usr/bin/chromium")
# The Redis keys of the brokers this test process's workers use (`TC_BROKER_KEYPREFIX`). pytest-xdist runs tests
# in several processes at once: a worker one of them starts must not take, or empty, another's tasks.
BROKER_KEYPREFIX = f"tc-test-{os.getpid()}-"
_NEEDS = "needs "  # how a skip reason for a missing service starts: the summary counts them by it


def _redis_answers() -> bool:
    parts = urlsplit(REDIS_URL)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout=1) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def empty_broker(url: str) -> None:
    """Drop what an earlier test of this process left in its queues at `url` (other processes' keys are theirs)."""
    import redis

    client = redis.Redis.from_url(url)
    for key in client.scan_iter(f"{BROKER_KEYPREFIX}*"):
        client.delete(key)


def _missing_services() -> dict[str, str]:
    """Marker -> how to enable it, for each service this machine lacks."""
    missing = {}
    if not _redis_answers():
        missing["redis"] = f"start Redis or point TC_TEST_REDIS_URL at one (tried {REDIS_URL})"
    if not os.environ.get("TC_DATABASE", "sqlite").startswith(("postgres://", "postgresql://")):
        missing["postgres"] = "set TC_DATABASE=postgres://postgres@127.0.0.1:5432/annotate"
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        missing["e2e"] = "install Debian's chromium (apt-get install chromium)"
    return missing


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (pyproject's addopts): one test process more than the cores, at most 4 (`--maxprocesses`); for
    named tests (`file.py::test`) none, whose start costs more than one test takes.

    Many tests wait on a browser, a Celery worker or a subprocess: with one process per core the 2-core
    development machine ran the suite at 1.4 cores busy in 9 min 41 s and 9 min 59 s; with three processes it
    took 8 min 5 s and 9 min 23 s, and with four 9 min 17 s (2026-12-03, the same 2,229 tests).
    """
    args = config.args
    if args and all("::" in arg for arg in args):
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores + 1


def pytest_collection_modifyitems(config, items) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the order the scheduler hands them out in
        items.sort(key=_slow_first)
    if os.environ.get("CI", "").lower() == "true":
        return
    missing = _missing_services()
    if not missing:
        return
    for item in items:
        needs = {mark.name for mark in item.iter_markers() if mark.name in missing}
        if "redis" in missing and any("redis" in name for name in getattr(item, "fixturenames", ())):
            needs.add("redis")
        for need in sorted(needs):
            item.add_marker(pytest.mark.skip(reason=f"{_NEEDS}{need}: {missing[need]}"))


# -- how the test processes share the work ----------------------------------------------------------------------
# Modules whose tests share a module-scoped fixture worth making once (a browser, the served demo, a trained tool)
# run whole in one test process. tests/test_suite_summary.py checks that this names every such module.
SHARED_SETUP = ("tests/e2e/", "tests/test_readme.py", "tests/tensorcode/test_cli.py", "tests/tensorcode/test_run.py",
                "tests/tensorcode/test_experience_fuzz.py", "tests/tensorcode/test_checkpoint_fuzz.py",
                "tests/tensorcode/tools/test_chatbot.py")
SLOW_MARKS = {"e2e", "integration", "scale"}


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Slow tests first, and a process is given more only as it runs out.

    xdist's default (`load`) sends each process long runs of tests in file order, which it alone will run: a run
    of browser and worker tests near the end kept one process busy 130 s after the other two had finished
    (2026-12-04). Here a process is sent its next test (or `SHARED_SETUP` module) when it has two left, and the
    tests that start browsers, workers or subprocesses (`SLOW_MARKS`) come first, so the processes all end on
    quick tests at about the same time.
    """
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SlowFirst(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if path.startswith(SHARED_SETUP) else nodeid

    config.option.loadscopereorder = False  # keep the collection's order (`_slow_first`)
    return SlowFirst(config, log)


def _slow_first(item) -> int:
    path = item.nodeid.split("::", 1)[0]
    slow = path.startswith("tests/e2e/") or any(mark.name in SLOW_MARKS for mark in item.iter_markers())
    return 0 if slow else 1


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """One line for the tests skipped for a missing service, counted from the skip reports: under pytest-xdist
    the test processes collect and skip, and only their reports reach this one."""
    counts: dict[str, int] = {}
    how: dict[str, str] = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        reason = reason.removeprefix("Skipped: ")
        need, _, enable = reason.removeprefix(_NEEDS).partition(": ")
        if reason.startswith(_NEEDS) and need in ("redis", "postgres", "e2e"):
            counts[need] = counts.get(need, 0) + 1
            how[need] = enable
    if counts:
        parts = "; ".join(f"{count} {need} tests ({how[need]})" for need, count in sorted(counts.items()))
        terminalreporter.write_line(f"Skipped for missing services: {parts}.")


@pytest.fixture(autouse=True)
def _quick_password_hashing(settings):
    """Tests make and sign in dozens of users: PBKDF2's million rounds cost half a second each here, and a test
    needs a hash, not its strength. Hashes made by the site's own processes (PBKDF2) still verify."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher", *settings.PASSWORD_HASHERS]


@pytest.fixture(autouse=True)
def _empty_local_cache():
    """Each test starts with this process's cache empty. Pages cache figures under a project's id (progress,
    agreement, the item page's glance), and on SQLite a rolled-back test's ids come again in the next test: an
    earlier test's figures showed in a later one's pages. Ids are never reused outside tests (AUTOINCREMENT, and
    PostgreSQL's sequences). A shared cache (TC_CACHE_URL) is left alone: other test processes use it too."""
    yield
    from django.core.cache import caches
    from django.core.cache.backends.locmem import LocMemCache

    if isinstance(caches["default"], LocMemCache):
        caches["default"].clear()


@pytest.fixture(autouse=True)
def _artifact_dir(settings, tmp_path):
    """Keep each test's checkpoints and experience files in its own temporary directory."""
    settings.TC_ARTIFACT_DIR = tmp_path / "artifacts"
    settings.TC_ARTIFACT_DIR.mkdir()


@pytest.fixture(scope="session")
def seeded_demo(tmp_path_factory) -> Path:
    """A data folder seeded by `manage.py demo --no-serve` (SQLite), made once per run, whichever test processes
    ask for it.

    Seeding trains a small model for each demo project, about 30 s here. Tests that serve the demo copy this
    folder (`copy_demo`) and run `manage.py demo` on the copy, which finds everything seeded and starts at once.
    This run is itself the newcomer's first one: an empty folder, the embedded defaults, the same command.

    Under pytest-xdist the first process to ask seeds it in the run's shared temporary folder while the others
    wait on a lock. Grouping the demo's tests onto one process (`--dist=loadgroup`) did this until pytest 9.2,
    whose structured node ids pytest-xdist 3.8 no longer marks with the group (pytest-xdist issue 1386): the demo
    was seeded in two processes.
    """
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's folder; each test process has its own folder inside it
    folder, lock_path = shared / "seeded-demo" / "var", shared / "seeded-demo.lock"
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if (folder / ".seeded").exists():
            return folder
        shutil.rmtree(folder, ignore_errors=True)  # a process that failed to seed left it half made
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TC_", "CELERY_", "DJANGO_", "PYTEST"))}
        env.update(TC_DATA_DIR=str(folder), OMP_NUM_THREADS="1")
        done = subprocess.run([sys.executable, "manage.py", "demo", "--no-serve"], cwd=Path(__file__).parent.parent,
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        (folder / ".seeded").touch()
    return folder


def copy_demo(seeded: Path, data_dir: Path) -> Path:
    """A copy of the seeded demo's data folder at `data_dir` (its database and model artifacts; no queue)."""
    shutil.copytree(seeded, data_dir, ignore=shutil.ignore_patterns("broker", ".seeded"))
    return data_dir


def wait_for(condition: Callable[[], object], *, timeout: float, what: str) -> object:
    """Poll `condition()` until it returns something truthy and return that; fail after `timeout` seconds.

    Tests wait on a condition with a deadline, never for a fixed time. A plain function, so module-scoped
    fixtures can wait too; tests take it as the `wait_until` fixture.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(POLL_SECONDS)


@pytest.fixture
def wait_until() -> Callable[..., object]:
    return wait_for


def start_in_thread(outcome: dict, name: str, work: Callable[[], object]) -> threading.Thread:
    """Start `work()` in a thread with database connections of its own (closed when it ends); what it returns,
    or the exception it raises, lands in `outcome[name]`. For tests of two transactions meeting on a lock."""
    from django.db import connections

    def run() -> None:
        try:
            outcome[name] = work()
        except Exception as exc:  # noqa: BLE001 - the test's assertions say what was expected
            outcome[name] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def wait_for_a_lock_wait(thread: threading.Thread, *, timeout: float = 60) -> None:
    """Until a session of the test database (PostgreSQL) waits on a lock, or `thread` has ended (the test's
    next assertion then says what happened)."""
    from django.db import connection

    def waiting() -> bool:
        if not thread.is_alive():
            return True
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND wait_event_type = 'Lock'")
            return bool(cursor.fetchone()[0])

    wait_for(waiting, timeout=timeout, what=f"a lock wait while {thread.name} runs")


def close_loop_connections() -> None:
    """Close the database connections this thread opened while Playwright's event loop ran.

    With a loop running, Django keeps connections per async context rather than per thread, so the tests'
    queries used connections of their own; left open, they outlive the test database and its teardown warns
    that another session is still using it.
    """
    from django.db import connections

    connections.close_all()
