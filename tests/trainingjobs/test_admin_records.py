"""Django's admin on the records of work the site did: shown, never changed there, and deleted as the site's own
deletions delete (the rows that hang off them and their files too), never while a worker still uses them."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from annotate import deletion, imports, storage
from annotate.models import (
    ApiToken,
    DeletionState,
    Export,
    ExportState,
    ItemDeletion,
    ItemImport,
    Membership,
    ModelUpload,
    ModelVersion,
    Prediction,
    Role,
    UploadState,
)
from tests.trainingjobs.conftest import decision_input
from trainingjobs import runner, services
from trainingjobs.models import JobState, LossPoint, TrainingJob


def url(model, action: str, pk: int | None = None) -> str:
    opts = model._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_{action}", args=[] if pk is None else [pk])


def delete(client, model, pk: int, capture):
    """The admin's Delete, confirmed: its response (the confirmation again when something protects the row)."""
    with capture(execute=True):
        return client.post(url(model, "delete", pk), {"post": "yes"})


@pytest.fixture
def job(project, reviewed) -> TrainingJob:
    return services.launch(project, base_version=project.current_version, epochs=2, minibatch_size=4,
                           enqueue=False)


@pytest.fixture
def finished(job) -> TrainingJob:
    runner.train(job.pk, "worker-a")
    job.refresh_from_db()
    return job


def test_an_old_model_version_is_deleted_with_its_folder(admin_client, project, finished,
                                                        django_capture_on_commit_callbacks) -> None:
    """What an admin deletes an old version for is the disk its folder holds; predictions it made stay."""
    old, new = finished.base_version, finished.result_version
    services.promote(new)
    project.items.first().predictions.create(model_version=old, receipt={}, confidence=0.5)
    assert old.path.is_dir()

    page = admin_client.get(url(ModelVersion, "delete", old.pk)).content.decode()
    assert "Are you sure" in page and "1 prediction" not in page  # kept: set to no version, not deleted
    assert delete(admin_client, ModelVersion, old.pk, django_capture_on_commit_callbacks).status_code == 302

    assert not ModelVersion.objects.filter(pk=old.pk).exists() and not old.path.exists()
    assert Prediction.objects.filter(model_version=None).count() == 1
    finished.refresh_from_db()
    assert (finished.base_version, finished.result_version) == (None, new)


def test_the_current_model_and_one_a_job_starts_from_are_not_deleted(admin_client, project, job,
                                                                    django_capture_on_commit_callbacks) -> None:
    version = project.current_version

    page = delete(admin_client, ModelVersion, version.pk, django_capture_on_commit_callbacks).content.decode()

    assert "it is the project&#x27;s current model (promote another version first)" in page
    assert f"training job {job.pk} is not over (cancel it on the training page)" in page
    assert ModelVersion.objects.filter(pk=version.pk).exists() and version.path.is_dir()


def test_a_training_job_is_deleted_with_its_checkpoints_and_loss_once_over(admin_client, job, finished,
                                                                          django_capture_on_commit_callbacks) -> None:
    assert finished.directory.is_dir() and LossPoint.objects.filter(job=finished).exists()
    made = finished.result_version

    assert delete(admin_client, TrainingJob, finished.pk, django_capture_on_commit_callbacks).status_code == 302

    assert not TrainingJob.objects.filter(pk=finished.pk).exists() and not finished.directory.exists()
    assert not LossPoint.objects.exists()
    assert ModelVersion.objects.filter(pk=made.pk).exists() and made.path.is_dir()  # the version it made stays


def test_a_job_not_over_is_not_deleted(admin_client, job, django_capture_on_commit_callbacks) -> None:
    page = delete(admin_client, TrainingJob, job.pk, django_capture_on_commit_callbacks).content.decode()

    assert "it is pending (cancel it first)" in page
    assert TrainingJob.objects.get(pk=job.pk).state == JobState.PENDING


def test_a_jobs_settings_and_state_are_shown_not_changed(admin_client, job) -> None:
    """A state set by hand would say a job ran that never did; the actions cancel and resume it."""
    page = admin_client.get(url(TrainingJob, "change", job.pk)).content.decode()
    assert str(job.lr) in page and not any(f'name="{name}"' in page for name in ("state", "lr", "epochs"))
    assert admin_client.post(url(TrainingJob, "change", job.pk), {"state": "SUCCEEDED"}).status_code == 403

    admin_client.post(url(TrainingJob, "changelist"), {"action": "cancel_jobs", "_selected_action": [job.pk]})

    assert TrainingJob.objects.get(pk=job.pk).state == JobState.CANCELLED


def test_loss_points_and_predictions_are_shown_only(admin_client, project, finished) -> None:
    """A loss point belongs to its job's curve; a prediction's confidence orders the queue and its item's status
    follows it: neither is changed or deleted by hand."""
    point = LossPoint.objects.filter(job=finished).first()
    prediction = project.items.first().predictions.create(model_version=project.current_version, receipt={},
                                                          confidence=0.5)
    for model, pk in ((LossPoint, point.pk), (Prediction, prediction.pk)):
        assert admin_client.get(url(model, "change", pk)).status_code == 200
        assert admin_client.post(url(model, "change", pk), {"confidence": "0.9", "loss": "0"}).status_code == 403
        assert admin_client.post(url(model, "delete", pk), {"post": "yes"}).status_code == 403
        assert admin_client.get(url(model, "add")).status_code == 403
    prediction.refresh_from_db()
    assert prediction.confidence == 0.5


def _export(project, state: str, **fields) -> Export:
    export = Export.objects.create(project=project, state=state, **fields)
    (storage.artifact_dir("exports", export.pk) / "records.jsonl").write_text("{}\n")
    return export


def test_an_export_is_deleted_with_its_files_but_not_while_it_is_written(admin_client, project,
                                                                        django_capture_on_commit_callbacks) -> None:
    done = _export(project, ExportState.SUCCEEDED)
    writing = _export(project, ExportState.RUNNING, heartbeat_at=timezone.now())
    stalled = _export(project, ExportState.RUNNING, heartbeat_at=timezone.now() - Export.LEASE)
    assert admin_client.post(url(Export, "change", done.pk), {"state": "PENDING"}).status_code == 403

    page = delete(admin_client, Export, writing.pk, django_capture_on_commit_callbacks).content.decode()
    assert f"export {writing.pk} of Outages: it is being written" in page
    for export in (done, stalled):  # a stalled run's worker is gone: nothing writes it
        assert delete(admin_client, Export, export.pk, django_capture_on_commit_callbacks).status_code == 302

    assert list(Export.objects.values_list("pk", flat=True)) == [writing.pk]
    assert writing.directory.is_dir() and not done.directory.exists() and not stalled.directory.exists()


def test_a_task_for_an_export_deleted_meanwhile_does_nothing(project, django_capture_on_commit_callbacks) -> None:
    from annotate import tasks

    export = _export(project, ExportState.PENDING)
    with django_capture_on_commit_callbacks(execute=True):
        deletion.delete_record(export)

    assert tasks.run_export(export.pk) == "missing"
    from annotate import export as exports

    assert exports.run(export).pk == export.pk  # a run that found it just before: nothing written, no error
    assert not export.directory.exists()


def test_an_items_import_record_goes_but_its_items_stay(admin_client, project,
                                                        django_capture_on_commit_callbacks) -> None:
    lines = io.BytesIO(b'{"inputs": %s}\n' % json.dumps(decision_input(1)).encode())
    row = imports.queue_import(project, None, lines, name="items.jsonl")
    page = delete(admin_client, ItemImport, row.pk, django_capture_on_commit_callbacks).content.decode()
    assert "a worker is checking it" in page and row.path.is_file()

    imports.run_import(row.pk)
    items = project.items.count()
    assert ItemImport.objects.get(pk=row.pk).state == UploadState.ACCEPTED
    assert delete(admin_client, ItemImport, row.pk, django_capture_on_commit_callbacks).status_code == 302

    assert not ItemImport.objects.filter(pk=row.pk).exists() and not row.directory.exists()
    assert project.items.count() == items


def test_an_item_deletion_under_way_is_stopped_on_its_page_not_deleted(admin_client, project, reviewed,
                                                                      django_capture_on_commit_callbacks) -> None:
    row = ItemDeletion.objects.create(project=project, state=DeletionState.RUNNING, total=3)

    page = delete(admin_client, ItemDeletion, row.pk, django_capture_on_commit_callbacks).content.decode()

    assert "it is still deleting items (stop it on its page first)" in page
    assert admin_client.post(url(ItemDeletion, "change", row.pk), {"state": "STOPPED"}).status_code == 403
    assert ItemDeletion.objects.get(pk=row.pk).state == DeletionState.RUNNING


def test_work_that_began_after_the_confirmation_page_keeps_the_row(admin_client, job, monkeypatch,
                                                                  django_capture_on_commit_callbacks) -> None:
    """Between the page that asked and the confirmation, a job was resumed: the deletion is refused with the
    reason, not reported as done."""
    from trainingjobs.admin import TrainingJobAdmin

    monkeypatch.setattr(TrainingJobAdmin, "blockers", lambda self, obj: [])  # the page saw it over

    response = delete(admin_client, TrainingJob, job.pk, django_capture_on_commit_callbacks)

    assert response.status_code == 302 and response.url == url(TrainingJob, "change", job.pk)
    messages = [str(message) for message in get_messages(response.wsgi_request)]
    assert messages == [f"Training job {job.pk} of Outages cannot be deleted yet: it is pending (cancel it first)."]
    assert TrainingJob.objects.filter(pk=job.pk).exists()


def test_a_membership_keeps_its_project_and_user(admin_client, project, reviewer, admin) -> None:
    """Moving it to another user would hand them the member's claims without releasing them; it is removed (its
    claims released) and another added instead."""
    membership = Membership.objects.get(project=project, user=reviewer)
    page = admin_client.get(url(Membership, "change", membership.pk)).content.decode()
    assert 'name="role"' in page
    assert re.search(r'<input [^>]*name="user"[^>]*disabled', page) and re.search(
        r'<input [^>]*name="project"[^>]*disabled', page)

    admin_client.post(url(Membership, "change", membership.pk),
                      {"project": project.pk, "user": admin.pk, "role": Role.ADMIN, "created_at_0": "2026-01-01",
                       "created_at_1": "00:00:00"})

    membership.refresh_from_db()
    assert (membership.user, membership.role) == (reviewer, Role.ADMIN)


def test_an_api_tokens_user_and_project_are_fixed(admin_client, project, reviewer) -> None:
    """The key was handed to that user for that project: moving it would let it act for another."""
    token, _key = ApiToken.objects.issue(reviewer, name="laptop", project=project)
    page = admin_client.get(url(ApiToken, "change", token.pk)).content.decode()

    assert 'name="name"' in page and 'name="revoked_at_0"' in page
    assert 'name="user"' not in page and 'name="project"' not in page



def test_a_model_upload_goes_as_the_training_pages_remove_does(admin_client, project,
                                                               django_capture_on_commit_callbacks) -> None:
    """Not while a worker checks its files; after, the record goes and the version it became stays."""
    row = ModelUpload.objects.create(project=project, label="offline")
    row.directory.mkdir(parents=True)
    (row.directory / "tool.json").write_text("{}")

    page = delete(admin_client, ModelUpload, row.pk, django_capture_on_commit_callbacks).content.decode()
    assert f"model upload {row.pk} (PENDING): a worker is checking it" in page and row.directory.is_dir()

    ModelUpload.objects.filter(pk=row.pk).update(state=UploadState.ACCEPTED, version=project.current_version)
    assert delete(admin_client, ModelUpload, row.pk, django_capture_on_commit_callbacks).status_code == 302

    assert not ModelUpload.objects.filter(pk=row.pk).exists() and not row.directory.exists()
    assert ModelVersion.objects.filter(pk=project.current_version_id).exists()


def test_deleting_several_says_how_many_went_when_some_were_refused_meanwhile(
        admin_client, project, monkeypatch, django_capture_on_commit_callbacks) -> None:
    """Django's action reported every selected export deleted, the refused one too."""
    from annotate.admin import ExportAdmin

    done = _export(project, ExportState.SUCCEEDED)
    writing = _export(project, ExportState.RUNNING, heartbeat_at=timezone.now())
    monkeypatch.setattr(ExportAdmin, "blockers", lambda self, obj: [])  # the page saw neither in use

    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(url(Export, "changelist"), {
            "action": "delete_selected", "_selected_action": [done.pk, writing.pk], "post": "yes"})

    messages = [str(message) for message in get_messages(response.wsgi_request)]
    assert messages == [f"Export {writing.pk} of Outages cannot be deleted yet: it is being written.",
                        "Deleted 1 export; 1 could not be deleted (see why above)."]
    assert list(Export.objects.values_list("pk", flat=True)) == [writing.pk]
