"""Integration: PostgreSQL and a real Celery worker over Redis run predictions and exports; concurrent claims.

The worker is a separate process sharing the test database and artifact directory, so these tests commit
their rows (`transaction=True`). Tasks reach it through Redis at `TC_TEST_REDIS_URL` (app-backend uses db 11).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest
from celery import Celery
from django.conf import settings
from django.db import connection, connections
from django.utils import timezone

from annotate import celery_app, imports, queue, tooling, versions
from annotate import export as exports
from annotate import tasks as annotate_tasks
from annotate.management.commands.demo import worker_command
from annotate.models import Claim, ExportState, Item, ItemStatus, ModelUpload, UploadState
from tensorcode import training
from tests.conftest import BROKER_KEYPREFIX, empty_broker

REDIS_URL = os.environ.get("TC_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _database_url() -> str:
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture
def backend_redis_worker(tmp_path: Path, monkeypatch, request):
    """A worker on the test database and artifact dir; `annotate.tasks` sends its tasks to it through Redis.

    The demo's worker (`--pool=solo`), or with `indirect` parametrization another pool (`"prefork"`)."""
    empty_broker(REDIS_URL)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("CELERY_", "TC_"))}
    env.update(
        TC_DATABASE=_database_url(), TC_DATA_DIR=str(tmp_path / "data"), TC_ARTIFACT_DIR=str(settings.TC_ARTIFACT_DIR),
        CELERY_BROKER_URL=REDIS_URL, CELERY_RESULT_BACKEND=REDIS_URL, TC_BROKER_KEYPREFIX=BROKER_KEYPREFIX,
        OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
    )
    client = Celery("client", broker=REDIS_URL, backend=REDIS_URL, set_as_current=False)
    client.conf.broker_transport_options = {"global_keyprefix": BROKER_KEYPREFIX}
    for name in ("predict_items", "run_export", "check_model_upload", "import_item_file", "resend_stale_work",
                 "delete_matching_items"):
        # The task object of the project's app itself, not the `shared_task` proxy: a proxy resolves to the
        # current app of the thread that reads it, and the live server's thread may see another one.
        monkeypatch.setattr(celery_app.tasks[getattr(annotate_tasks, name).name], "delay",
                            lambda *args, _name=name: client.send_task(f"annotate.tasks.{_name}", args=list(args)))
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        pool = getattr(request, "param", "solo")
        command = [f"--pool={pool}" if part == "--pool=solo" else part for part in worker_command()]
        worker = subprocess.Popen(command, cwd=settings.BASE_DIR, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield worker
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        print(log.read_text())  # shown by pytest only when the test failed


@pytest.mark.redis
def test_imported_items_are_predicted_by_a_real_worker(project, backend_redis_worker, wait_until) -> None:
    inputs = {"question": "Why?", "evidence": [{"source_id": "log", "text": "refused"}],
              "hypotheses": [{"id": "db", "text": "database"}, {"id": "dns", "text": "dns"}]}
    lines = "\n".join(json.dumps({"inputs": {**inputs, "question": f"Why {n}?"}}) for n in range(70))

    result = imports.import_jsonl(project, io.BytesIO(lines.encode()))

    assert result.prediction_batches == 2
    wait_until(lambda: not Item.objects.filter(status=ItemStatus.PENDING).exists(), timeout=180,
               what="every imported item predicted")
    item = Item.objects.select_related("prediction").first()
    assert item.status == ItemStatus.READY
    assert item.prediction.trace["operations"][0]["type"] == "Decision"
    assert item.confidence == item.prediction.confidence


@pytest.mark.redis
def test_an_uploaded_items_file_is_imported_and_predicted_by_a_real_worker(project, project_admin,
                                                                         backend_redis_worker, wait_until) -> None:
    inputs = {"question": "Why?", "evidence": [{"source_id": "log", "text": "refused"}],
              "hypotheses": [{"id": "db", "text": "database"}, {"id": "dns", "text": "dns"}]}
    lines = "\n".join(json.dumps({"inputs": {**inputs, "question": f"Why {n}?"}}) for n in range(10))

    row = imports.queue_import(project, project_admin, io.BytesIO(lines.encode()), name="items.jsonl")

    wait_until(lambda: Item.objects.filter(project=project, status=ItemStatus.READY).count() == 10, timeout=180,
               what="the worker to import and predict every item")
    row.refresh_from_db()
    assert row.state == UploadState.ACCEPTED and row.count == 10 and not row.path.parent.exists()


@pytest.mark.redis
def test_items_an_admin_confirmed_are_deleted_by_a_real_worker(project, project_admin, ready_items,
                                                              backend_redis_worker, wait_until) -> None:
    from annotate import deletion, itemlist

    items = ready_items(project, [0.1, 0.2, 0.9])
    filters = itemlist.ItemFilters.parse(project, {"confidence_max": "0.5"})

    row = deletion.queue_matching(project, filters, through=items[-1].pk, expected=2, user=project_admin)

    wait_until(lambda: type(row).objects.get(pk=row.pk).is_final, timeout=180, what="the worker to delete the items")
    row.refresh_from_db()
    assert row.state == "SUCCEEDED" and row.deleted_items == 2 and row.deleted["annotate.prediction"] == 2
    assert list(project.items.values_list("pk", flat=True)) == [items[2].pk]


@pytest.mark.redis
def test_an_import_whose_message_was_lost_is_sent_again_by_the_sweep_on_a_real_worker(
        project, project_admin, backend_redis_worker, wait_until, monkeypatch, tmp_path) -> None:
    lines = "\n".join(json.dumps({"inputs": {"question": f"Why {n}?", "evidence": [{"source_id": "a", "text": "t"}],
                                            "hypotheses": [{"id": "x", "text": "one"}]}}) for n in range(3))
    with monkeypatch.context() as lost:
        lost.setattr(celery_app.tasks[annotate_tasks.import_item_file.name], "delay", lambda pk: None)
        row = imports.queue_import(project, project_admin, io.BytesIO(lines.encode()), name="items.jsonl")
    type(row).objects.filter(pk=row.pk).update(sent_at=row.sent_at - annotate_tasks.STALE_WAIT)

    annotate_tasks.resend_stale_work.delay()  # as beat sends it: the worker runs the sweep, then the import

    wait_until(lambda: type(row).objects.get(pk=row.pk).state != UploadState.PENDING, timeout=180,
               what="the worker to import the file its sweep sent again")
    row.refresh_from_db()
    assert row.state == UploadState.ACCEPTED and row.count == 3
    assert f"item import {row.pk} still waits for a worker: its task was sent again" in (
        tmp_path / "worker.log").read_text()


@pytest.mark.redis
def test_items_whose_prediction_messages_were_lost_are_predicted_once_the_sweep_sends_them_again(
        project, backend_redis_worker, wait_until, monkeypatch, tmp_path) -> None:
    lines = "\n".join(json.dumps({"inputs": {"question": f"Why {n}?", "evidence": [{"source_id": "a", "text": "t"}],
                                            "hypotheses": [{"id": "x", "text": "one"}]}}) for n in range(3))
    with monkeypatch.context() as lost:
        lost.setattr(celery_app.tasks[annotate_tasks.predict_items.name], "delay", lambda *args: None)
        imports.import_jsonl(project, io.BytesIO(lines.encode()))
    Item.objects.update(created_at=timezone.now() - annotate_tasks.STALE_WAIT)

    annotate_tasks.resend_stale_work.delay()  # the worker runs the sweep: its queue is empty, so it sends them

    wait_until(lambda: not Item.objects.filter(status=ItemStatus.PENDING).exists(), timeout=180,
               what="the worker to predict the items its sweep queued again")
    assert Item.objects.filter(status=ItemStatus.READY).count() == 3
    assert f"project {project.slug}: 3 items still wait for a prediction while the workers are idle" in (
        tmp_path / "worker.log").read_text()


@pytest.mark.redis
def test_an_export_whose_worker_was_killed_is_taken_over_once_the_sweep_sends_it_again(
        project, reviewer, ready_items, project_admin, backend_redis_worker, wait_until, tmp_path) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from annotate.models import Export

    for _ in ready_items(project, [0.3, 0.1]):
        queue.submit(queue.claim_next(project, reviewer), reviewer, "db")
    export = exports.create_export(project, project_admin, enqueue=False)
    dead = timezone.now() - Export.LEASE - timedelta(minutes=1)  # a run whose worker was killed long ago
    Export.objects.filter(pk=export.pk).update(state=ExportState.RUNNING, run_token="killed", heartbeat_at=dead,
                                               started_at=dead, sent_at=dead, done=1)

    annotate_tasks.resend_stale_work.delay()  # as beat sends it: the worker runs the sweep, then the export

    wait_until(lambda: Export.objects.get(pk=export.pk).state == ExportState.SUCCEEDED, timeout=180,
               what="the worker to take the export over and finish it")
    export.refresh_from_db()
    assert export.run_token != "killed" and export.done == 2 and exports.archive_path(export).exists()
    assert f"export {export.pk} still waits for a worker: its task was sent again" in (
        tmp_path / "worker.log").read_text()


@pytest.mark.redis
def test_an_uploaded_model_is_checked_and_registered_by_a_real_worker(project, project_admin, backend_redis_worker,
                                                                       wait_until, tmp_path) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    tooling.create_tool("decision", "rank", project.configuration).save_pretrained(tmp_path / "mine")
    files = [SimpleUploadedFile(name, (tmp_path / "mine" / name).read_bytes())
             for name in ("tool.json", "model.safetensors")]

    upload = versions.upload_model(project, project_admin, *files, label="trained offline")

    wait_until(lambda: ModelUpload.objects.get(pk=upload.pk).state != UploadState.PENDING, timeout=180,
               what="the worker to check the upload")
    upload.refresh_from_db()
    assert upload.state == UploadState.ACCEPTED, upload.reason
    assert upload.version.label == "trained offline" and upload.version.is_materialized
    assert not upload.directory.exists()


def _export_on_the_worker(project, reviewer, ready_items, project_admin, wait_until, minibatch_size: int):
    """Three items answered by rita, then an export run by the worker; returns the items and the finished export."""
    items = ready_items(project, [0.3, 0.1, 0.2])
    for _ in items:
        queue.submit(queue.claim_next(project, reviewer), reviewer, "db")

    export = exports.create_export(project, project_admin, minibatch_size=minibatch_size)

    wait_until(lambda: type(export).objects.get(pk=export.pk).state in (ExportState.SUCCEEDED, ExportState.FAILED),
               timeout=180, what="the export to finish")
    export.refresh_from_db()
    assert export.state == ExportState.SUCCEEDED, export.error
    return items, export


@pytest.mark.redis
def test_export_runs_on_a_real_worker_and_loads(project, reviewer, ready_items, project_admin,
                                                backend_redis_worker, wait_until) -> None:
    items, export = _export_on_the_worker(project, reviewer, ready_items, project_admin, wait_until, 2)

    assert (export.done, export.total) == (3, 3)
    trainer = tooling.trainer_for(project.current_version)
    sources = []
    for name in ("part-00001.json", "part-00002.json"):
        for record in training.load_experience(export.directory / name, operations=trainer.operations).supervisions:
            sources.extend(record.source)
    assert sources == [f"review:outages/{pk}/rita" for pk in (items[1].pk, items[2].pk, items[0].pk)]


@pytest.mark.redis
@pytest.mark.parametrize("backend_redis_worker", ["prefork"], indirect=True)
def test_a_prefork_worker_exports_with_capture_workers(project, reviewer, ready_items, project_admin,
                                                      backend_redis_worker, wait_until) -> None:
    """A prefork pool's child is daemonic, which `multiprocessing` refuses children to: the export forks its
    capture workers all the same (one minibatch each), and succeeds."""
    _, export = _export_on_the_worker(project, reviewer, ready_items, project_admin, wait_until, 1)

    assert export.done == 3
    assert sorted(n for n in export.files if n.startswith("part-")) == [f"part-0000{n}.json" for n in (1, 2, 3)]


def test_concurrent_claims_never_give_an_item_to_two_reviewers(project, ready_items, django_user_model) -> None:
    from annotate.models import Membership

    ready_items(project, [0.1 * n for n in range(6)])
    users = [django_user_model.objects.create_user(f"r{n}") for n in range(12)]
    for user in users:
        Membership.objects.create(project=project, user=user)
    start = threading.Barrier(len(users))
    claimed: dict[str, int | None] = {}
    errors: list[BaseException] = []

    def claim(user) -> None:
        try:
            start.wait()
            item = queue.claim_next(project, user)
            claimed[user.username] = item.pk if item else None
        except BaseException as exc:  # reported below; a thread cannot fail the test itself
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claim, args=(user,)) for user in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert not errors
    got = [pk for pk in claimed.values() if pk is not None]
    assert len(got) == len(set(got)) == 6
    assert Claim.objects.count() == 6
