"""Jobs through real Celery worker processes over Redis and PostgreSQL, with the faults they must survive.

Each test starts its worker(s) with `celery -A annotate worker -Q gpu,celery` against this test run's
PostgreSQL database (so the rows the test writes are the rows the worker reads) and Redis database 13.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
from pathlib import Path

import pytest
from celery import Celery
from django.conf import settings
from django.db import connection

from annotate import celery_app
from annotate.management.commands.demo import worker_command
from tests.conftest import BROKER_KEYPREFIX, empty_broker
from tests.trainingjobs.conftest import review
from tests.trainingjobs.test_runner import assert_same_weights
from trainingjobs import runner, services
from trainingjobs import tasks as job_tasks
from trainingjobs.models import JobState, TrainingJob

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

REDIS_URL = os.environ.get("TC_JOBS_REDIS_URL", "redis://127.0.0.1:6379/13")
# Queues of their own, so that another test process's workers on the same Redis cannot take this one's jobs.
KEYPREFIX = BROKER_KEYPREFIX
# Long enough for a worker to be killed, cancelled or cut off mid-run; a step takes a few milliseconds.
LONG = {"epochs": 15, "minibatch_size": 2, "checkpoint_interval": 25, "lr": 0.05, "held_out_fraction": 0.1}


class Workers:
    """Celery worker processes for this test, each with its own log; all stopped at teardown."""

    def __init__(self, tmp_path: Path, database_url: str):
        self.tmp_path = tmp_path
        self.database_url = database_url
        self.processes: dict[str, subprocess.Popen] = {}
        # Not the current app: shared tasks would then resolve to this client's copies.
        self.client = Celery("client", broker=REDIS_URL, set_as_current=False)
        self.client.conf.task_routes = settings.CELERY_TASK_ROUTES
        self.client.conf.broker_transport_options = {"global_keyprefix": KEYPREFIX}

    def start(self, name: str, *, lease_seconds: float = 3.0) -> subprocess.Popen:
        env = {key: value for key, value in os.environ.items() if not key.startswith(("CELERY_", "TC_"))}
        env.update(
            CELERY_BROKER_URL=REDIS_URL,
            TC_BROKER_KEYPREFIX=KEYPREFIX,
            TC_DATABASE=self.database_url,
            TC_DATA_DIR=str(self.tmp_path / "data"),
            TC_ARTIFACT_DIR=str(settings.TC_ARTIFACT_DIR),
            TC_JOB_LEASE_SECONDS=str(lease_seconds),
            TC_JOB_PROGRESS_SECONDS="0.1",
            OMP_NUM_THREADS="1",
            PYTHONUNBUFFERED="1",
        )
        command = [*worker_command(), "-Q", "gpu,celery", "-n", f"{name}@%h"]
        with self.log(name).open("ab") as out:
            process = subprocess.Popen(command, cwd=settings.BASE_DIR, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.processes[name] = process
        return process

    def log(self, name: str) -> Path:
        return self.tmp_path / f"{name}.log"

    def ready(self, name: str) -> bool:
        return self.log(name).exists() and " ready." in self.log(name).read_text()

    def send(self, job_id: int) -> None:
        """What `train_job.delay_on_commit` of the web process does, through Redis."""
        self.client.send_task("trainingjobs.tasks.train_job", args=[job_id], queue="gpu")

    def send_repredict(self, project_id: int, version_id: int) -> None:
        self.client.send_task("trainingjobs.tasks.repredict_pending", args=[project_id, version_id])

    def kill(self, name: str) -> None:
        process = self.processes.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait()

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(self.tmp_path.glob("*.log")))


def _empty_queues() -> None:
    empty_broker(REDIS_URL)


def _database_url(port: int | None = None) -> str:
    params = connection.settings_dict
    return (
        f"postgres://{params['USER']}@{params['HOST'] or '127.0.0.1'}:{port or params['PORT'] or 5432}"
        f"/{params['NAME']}"
    )


@pytest.fixture
def redis_workers(tmp_path, monkeypatch):
    _empty_queues()
    workers = Workers(tmp_path, _database_url())
    # The task objects of the project's app itself, not the `shared_task` proxies: a proxy resolves to the current
    # app of the thread that reads it, and a live server's thread may see another app than this one.
    monkeypatch.setattr(celery_app.tasks[job_tasks.train_job.name], "delay", workers.send)
    monkeypatch.setattr(celery_app.tasks[job_tasks.repredict_pending.name], "delay", workers.send_repredict)
    try:
        yield workers
    finally:
        workers.stop_all()
        print(workers.logs())  # shown by pytest only when the test failed


@pytest.fixture
def data(project, reviewer):
    return review(project, reviewer, 40)


def state(job: TrainingJob) -> TrainingJob:
    job.refresh_from_db()
    return job


def test_killed_worker_resumes_from_its_checkpoint_bit_identical(project, data, redis_workers, wait_until) -> None:
    job = services.launch(project, base_version=project.current_version, **LONG)
    redis_workers.start("w1")
    past_checkpoint = LONG["checkpoint_interval"] + 5
    wait_until(lambda: state(job).step > past_checkpoint, timeout=120, what="training past a checkpoint")

    redis_workers.kill("w1")
    killed_at = state(job).step
    assert job.state == JobState.RUNNING and killed_at < job.total_steps
    redis_workers.start("w2")
    wait_until(lambda: services.sweep() == [job.pk], timeout=30, what="the dead worker's lease to expire")
    wait_until(lambda: state(job).is_final, timeout=120, what="the resumed job to finish")

    assert job.state == JobState.SUCCEEDED, job.error
    assert job.attempts == 2 and "resuming from the checkpoint" in job.log
    straight = services.launch(project, base_version=project.current_version, enqueue=False, **LONG)
    runner.train(straight.pk, "in-process")
    assert_same_weights(state(straight).result_version, job.result_version)
    assert list(job.loss_points.values_list("step", flat=True)) == list(range(1, job.total_steps + 1))


def test_a_job_whose_message_was_lost_is_trained_once_the_workers_sweep_finds_it_missing(
        project, data, redis_workers, wait_until) -> None:
    from datetime import timedelta

    from django.utils import timezone

    redis_workers.start("w1", lease_seconds=30)
    job = services.launch(project, base_version=project.current_version, enqueue=False, epochs=1)  # message lost
    TrainingJob.objects.filter(pk=job.pk).update(queued_at=timezone.now() - timedelta(minutes=11))

    redis_workers.client.send_task("trainingjobs.tasks.sweep_jobs")  # as beat sends it: the worker counts its queue

    wait_until(lambda: state(job).is_final, timeout=120, what="the job its sweep sent again to finish")
    assert job.state == JobState.SUCCEEDED, job.error
    assert job.attempts == 1 and "its message to the GPU workers was lost; re-queued" in job.log


def test_two_workers_given_the_same_job_train_it_once(project, data, redis_workers, wait_until) -> None:
    redis_workers.start("w1", lease_seconds=30)
    redis_workers.start("w2", lease_seconds=30)
    wait_until(lambda: redis_workers.ready("w1") and redis_workers.ready("w2"), timeout=60, what="two workers")
    job = services.launch(project, base_version=project.current_version, enqueue=False, **LONG)

    redis_workers.send(job.pk)
    redis_workers.send(job.pk)  # a duplicate, as a Redis redelivery after the visibility timeout would make
    wait_until(lambda: state(job).is_final, timeout=120, what="the job to finish")

    assert job.state == JobState.SUCCEEDED and job.attempts == 1
    assert "backed off: the job is leased by" in job.log or "skipped" in redis_workers.logs()
    steps = list(job.loss_points.values_list("step", flat=True))
    assert steps == list(range(1, job.total_steps + 1))


def test_cancel_then_resume_through_a_worker(project, data, redis_workers, wait_until) -> None:
    redis_workers.start("w1", lease_seconds=30)
    job = services.launch(project, base_version=project.current_version, **LONG)
    wait_until(lambda: state(job).step > 0, timeout=120, what="the first step")

    services.cancel(job.pk)
    wait_until(lambda: state(job).is_final, timeout=60, what="the cancelled job to stop")
    assert job.state == JobState.CANCELLED and job.step < job.total_steps
    assert (job.checkpoint_dir / "training.json").is_file()

    services.resume(job.pk)
    wait_until(lambda: state(job).is_final, timeout=120, what="the resumed job to finish")
    assert job.state == JobState.SUCCEEDED, job.error
    assert job.result_version.is_materialized


def test_a_script_trains_and_promotes_through_the_api_with_a_real_worker(client, project, data, admin,
                                                                          redis_workers, wait_until) -> None:
    """The JSON API's training loop end to end: launch, follow, fetch the result's files, promote."""
    import io
    import zipfile

    from annotate.models import ApiToken

    redis_workers.start("w1", lease_seconds=30)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.objects.issue(admin, name='pipeline')[1]}"}
    launched = client.post("/api/projects/outages/jobs", data={"epochs": 3, "minibatch_size": 4},
                           content_type="application/json", **auth)
    assert launched.status_code == 202, launched.content

    def followed() -> dict:
        return client.get(launched["Location"], **auth).json()

    wait_until(lambda: followed()["state"] in ("SUCCEEDED", "FAILED"), timeout=120, what="the job to finish")
    job = followed()
    assert job["state"] == "SUCCEEDED", redis_workers.logs()
    assert job["step"] == job["total_steps"] and job["worker"] and job["device"] == "cpu"
    assert set(job["held_out"]) == {"base", "new"}

    versions = client.get("/api/projects/outages/versions", **auth).json()["versions"]
    made = next(v for v in versions if v["id"] == job["result_version"])
    archive = zipfile.ZipFile(io.BytesIO(b"".join(client.get(made["download"], **auth).streaming_content)))
    assert archive.namelist() == ["tool.json", "model.safetensors"]

    promoted = client.post(f"/api/versions/{made['id']}/promote", **auth)
    assert promoted.status_code == 200
    project.refresh_from_db()
    assert project.current_version_id == made["id"]


def test_base_version_deleted_while_queued_fails_the_job(project, data, redis_workers, wait_until) -> None:
    job = services.launch(project, base_version=project.current_version, enqueue=False, **LONG)
    base = project.current_version
    project.current_version = None
    project.save()
    base.delete()

    redis_workers.start("w1", lease_seconds=30)
    redis_workers.send(job.pk)
    wait_until(lambda: state(job).is_final, timeout=120, what="the job to fail")

    assert job.state == JobState.FAILED
    assert "base model version (untrained) was deleted after the job was launched" in job.error


def test_database_unreachable_during_a_heartbeat_is_retried(project, data, tmp_path, wait_until, monkeypatch) -> None:
    proxy = _Proxy(int(connection.settings_dict["PORT"] or 5432))
    _empty_queues()
    workers = Workers(tmp_path, _database_url(proxy.port))
    try:
        workers.start("w1", lease_seconds=30)
        job = services.launch(project, base_version=project.current_version, enqueue=False, **LONG)
        workers.send(job.pk)
        wait_until(lambda: state(job).step > 0, timeout=120, what="the first step")

        proxy.cut()  # connections dropped, new ones refused: the database is unreachable from the worker
        wait_until(lambda: "heartbeat failed" in workers.log("w1").read_text(), timeout=60, what="a failed beat")
        proxy.restore()

        wait_until(lambda: state(job).is_final, timeout=120, what="the job to finish")
        assert job.state == JobState.SUCCEEDED, job.error
        assert job.attempts == 1
        assert list(job.loss_points.values_list("step", flat=True)) == list(range(1, job.total_steps + 1))
    finally:
        proxy.restore()
        workers.stop_all()
        proxy.close()
        print(workers.logs())


class _Proxy:
    """A TCP forwarder to PostgreSQL that can be cut (every connection dropped, new ones refused) and restored."""

    def __init__(self, target_port: int):
        self.target = ("127.0.0.1", target_port)
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.listener: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        if self.listener is not None:
            return
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        listener, self.listener = self.listener, None
        if listener is not None:
            listener.close()
        with self.lock:
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self.sockets.clear()

    def close(self) -> None:
        self.cut()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
