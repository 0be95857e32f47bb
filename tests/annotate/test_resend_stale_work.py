"""Uploads and exports whose message to the workers was lost, or whose worker died: the scheduler sends their
task again, pages say they wait, and a run of an export taken over by another writes nothing over it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from annotate import celery_app, tasks
from annotate.models import (
    STALE_WAIT,
    ExperienceUpload,
    Export,
    ExportState,
    ItemImport,
    ModelUpload,
    UploadState,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(monkeypatch) -> list[tuple[str, int]]:
    """What the sweep sends, by model: nothing reaches a worker here."""
    sent: list[tuple[str, int]] = []
    for model, _, task in tasks._resendable(timezone.now()):
        monkeypatch.setattr(task, "delay", lambda pk, _name=model.__name__: sent.append((_name, pk)))
    return sent


def _upload(model, project, *, minutes: float, state: str = UploadState.PENDING):
    made = timezone.now() - timedelta(minutes=minutes)
    return model.objects.create(project=project, state=state, created_at=made, sent_at=made)


def test_every_kind_of_upload_pending_past_the_wait_is_sent_again_once(project, sent) -> None:
    stale = [_upload(model, project, minutes=11) for model in (ItemImport, ModelUpload, ExperienceUpload)]

    assert tasks.resend_stale_work() == 3

    assert sent == [(type(row).__name__, row.pk) for row in stale]
    for row in stale:
        row.refresh_from_db()
        assert timezone.now() - row.sent_at < timedelta(minutes=1) and row.state == UploadState.PENDING
    assert tasks.resend_stale_work() == 0  # sent again at most once per wait
    assert len(sent) == 3


def test_uploads_sent_a_short_while_ago_or_already_checked_are_left_alone(project, sent) -> None:
    _upload(ItemImport, project, minutes=9)
    _upload(ItemImport, project, minutes=30, state=UploadState.ACCEPTED)
    _upload(ModelUpload, project, minutes=30, state=UploadState.REFUSED)
    resent_recently = _upload(ExperienceUpload, project, minutes=30)
    ExperienceUpload.objects.filter(pk=resent_recently.pk).update(sent_at=timezone.now() - timedelta(minutes=2))

    assert tasks.resend_stale_work() == 0 and sent == []


def _export(project, *, minutes: float, state: str = ExportState.PENDING, beat_minutes: float | None = None):
    made = timezone.now() - timedelta(minutes=minutes)
    beat = None if beat_minutes is None else timezone.now() - timedelta(minutes=beat_minutes)
    return Export.objects.create(project=project, state=state, created_at=made, sent_at=made, heartbeat_at=beat,
                                 total=5)


def test_exports_waiting_or_stalled_are_sent_again_and_live_or_finished_ones_are_not(project, sent) -> None:
    lease = Export.LEASE.total_seconds() / 60
    lost = _export(project, minutes=11)
    stalled = _export(project, minutes=60, state=ExportState.RUNNING, beat_minutes=lease + 1)
    _export(project, minutes=60, state=ExportState.RUNNING, beat_minutes=lease - 1)  # alive, only slow
    _export(project, minutes=5)
    _export(project, minutes=60, state=ExportState.SUCCEEDED)
    _export(project, minutes=60, state=ExportState.FAILED)

    assert tasks.resend_stale_work() == 2

    assert sent == [("Export", lost.pk), ("Export", stalled.pk)]
    assert tasks.resend_stale_work() == 0


def test_an_export_that_waits_long_or_whose_run_stalled_says_so(client, project, project_admin) -> None:
    waiting = _export(project, minutes=11)
    stalled = _export(project, minutes=60, state=ExportState.RUNNING,
                      beat_minutes=Export.LEASE.total_seconds() / 60 + 2)
    running = _export(project, minutes=60, state=ExportState.RUNNING, beat_minutes=0.1)
    client.force_login(project_admin)

    def row(export) -> str:
        return client.get(reverse("export_status", args=[project.slug, export.pk])).content.decode()

    assert "Not done after more than 10 minutes" in row(waiting) and 'hx-trigger="every 5s"' in row(waiting)
    beat = timezone.localtime(stalled.heartbeat_at).strftime("%H:%M")
    assert f"Its worker has written no progress since {beat}: it was stopped, or is stuck." in row(stalled)
    assert "Not done after" not in row(running) and "no progress since" not in row(running)


def test_the_scheduler_runs_the_sweep_by_its_registered_name() -> None:
    entries = {entry["task"]: entry["schedule"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}

    assert tasks.resend_stale_work.name in entries
    assert entries[tasks.resend_stale_work.name] < STALE_WAIT.total_seconds()
    celery_app.loader.import_default_modules()  # what a worker does first: finds every app's tasks
    assert all(name in celery_app.tasks for name in entries)


def test_a_pending_import_that_waits_long_says_so_and_when_it_was_sent_again(client, project, project_admin) -> None:
    fresh = _upload(ItemImport, project, minutes=2)
    stale = _upload(ItemImport, project, minutes=25)
    ItemImport.objects.filter(pk=stale.pk).update(sent_at=stale.created_at + timedelta(minutes=12))
    client.force_login(project_admin)

    waiting = client.get(reverse("import_status", args=[project.slug, stale.pk])).content.decode()
    sent_at = timezone.localtime(stale.created_at + timedelta(minutes=12)).strftime("%H:%M")
    assert "Not done after more than 10 minutes. Is a worker running" in waiting
    assert f"sends this to the workers again every 10 minutes until one has done it, last at {sent_at}." in waiting
    assert 'hx-trigger="every 5s"' in waiting  # no need to ask every second for what may take a while
    fresh_row = client.get(reverse("import_status", args=[project.slug, fresh.pk])).content.decode()
    assert "Not done after" not in fresh_row and 'hx-trigger="every 1s"' in fresh_row


def test_pending_model_and_experience_uploads_that_wait_long_say_so(client, project, project_admin) -> None:
    model_upload = _upload(ModelUpload, project, minutes=11)
    experience = _upload(ExperienceUpload, project, minutes=11)
    client.force_login(project_admin)

    pages = [client.get(reverse("trainingjobs:version_upload_status", args=[project.slug, model_upload.pk])),
             client.get(reverse("upload_status", args=[project.slug, experience.pk]))]

    for page in pages:
        text = page.content.decode()
        assert "Not done after more than 10 minutes" in text and "last at" not in text


def test_an_experience_file_checked_twice_is_checked_once(project, monkeypatch) -> None:
    """The check locks its row, so a sweep's second message (or a slow first one) finds it checked."""
    upload = _upload(ExperienceUpload, project, minutes=11)
    checks = []
    monkeypatch.setattr(tasks.tooling, "check_experience_file",
                        lambda version, path: checks.append(path) or {"calls": 1, "supervisions": 1})

    assert tasks.check_experience_upload(upload.pk) == UploadState.ACCEPTED
    assert tasks.check_experience_upload(upload.pk) == UploadState.ACCEPTED

    assert len(checks) == 1
    upload.refresh_from_db()
    assert upload.summary == {"calls": 1, "supervisions": 1} and upload.checked_at is not None


CHECKS = [(ItemImport, "import_item_file", "annotate.imports.run_import"),
          (ModelUpload, "check_model_upload", "annotate.versions.check"),
          (ExperienceUpload, "check_experience_upload", "annotate.tasks._check_experience_upload")]


@pytest.mark.parametrize(("model", "task", "inner"), CHECKS, ids=[model.__name__ for model, _, _ in CHECKS])
def test_a_check_that_fails_unexpectedly_refuses_its_upload_instead_of_waiting_for_good(project, sent, monkeypatch,
                                                                                        model, task, inner) -> None:
    """Left pending, the sweep would send it again and again to fail the same way."""
    row = _upload(model, project, minutes=11)
    row.directory.mkdir(parents=True)
    (row.directory / "file").write_text("uploaded")

    def broken(pk):
        raise RuntimeError("a bug")

    monkeypatch.setattr(inner, broken)

    assert getattr(tasks, task)(row.pk) == UploadState.REFUSED

    row.refresh_from_db()
    assert row.state == UploadState.REFUSED and row.checked_at is not None
    assert row.reason.startswith("the check failed (RuntimeError) and kept nothing; upload the file again")
    assert not row.directory.exists()
    assert tasks.resend_stale_work() == 0 and sent == []
    if model is ItemImport:
        assert row.problems == [row.reason] and row.problem_total == 1  # what the import's row lists


def test_a_database_that_drops_during_a_check_is_retried_not_refused(project, monkeypatch) -> None:
    from django.db import OperationalError

    row = _upload(ItemImport, project, minutes=1)

    def dropped(pk):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr("annotate.imports.run_import", dropped)

    with pytest.raises(OperationalError):
        tasks.import_item_file.run(row.pk)  # the task's body; Celery retries it (RETRY)

    row.refresh_from_db()
    assert row.state == UploadState.PENDING


def test_an_import_refused_as_a_whole_says_why_once(client, project, project_admin, monkeypatch) -> None:
    row = _upload(ItemImport, project, minutes=1)

    def broken(pk):
        raise RuntimeError("a bug")

    monkeypatch.setattr("annotate.imports.run_import", broken)
    tasks.import_item_file(row.pk)
    client.force_login(project_admin)

    page = client.get(reverse("import_status", args=[project.slug, row.pk])).content.decode()

    assert ("Nothing imported</strong>: the check failed (RuntimeError) and kept nothing; upload the file again, "
            "and if it fails again, ask an administrator to look at the worker&#x27;s log.</span>") in page
    assert page.count("the check failed") == 1 and "Fix it" not in page
