"""Deleting a project (`annotate.deletion`): the database ends exactly as Django's own cascade would leave it,
another project keeps every row and file, files go only once the rows have, and unfinished work blocks it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.apps import apps
from django.db import transaction
from django.utils import timezone

from annotate import deletion, storage
from annotate.models import (
    Adjudication,
    AdjudicationRevision,
    Answer,
    AnswerRevision,
    ApiToken,
    Claim,
    ExperienceUpload,
    Export,
    ExportState,
    Item,
    ItemStatus,
    Membership,
    ModelUpload,
    ModelVersion,
    Prediction,
    Project,
    Role,
)
from tests.annotate.conftest import decision_input
from trainingjobs.models import JobState, LossPoint, TrainingJob

pytestmark = pytest.mark.django_db


def _full_project(slug: str, reviewer, admin) -> Project:
    """A project with at least one row of every model that goes with it, each pointer set."""
    project = Project.objects.create(slug=slug, name=slug.title(), tool="decision", mode="rank",
                                     configuration={"dim": 8, "buckets": 64}, created_by=admin)
    Membership.objects.create(project=project, user=reviewer, role=Role.REVIEWER)
    Membership.objects.create(project=project, user=admin, role=Role.ADMIN)
    first = ModelVersion.objects.allocate(project, label="untrained", trained=False)
    job = TrainingJob.objects.create(project=project, base_version=first, state=JobState.SUCCEEDED,
                                     created_by=admin)
    second = ModelVersion.objects.allocate(project, label="trained", parent=first, created_by_job=job)
    job.result_version = second
    job.save(update_fields=["result_version"])
    storage.artifact_dir("jobs", job.pk)
    LossPoint.objects.create(job=job, step=1, epoch=1, loss=0.5)
    project.current_version = second
    project.save(update_fields=["current_version"])
    for n in range(3):
        item = Item.objects.create(project=project, inputs=decision_input(n), status=ItemStatus.READY)
        prediction = Prediction.objects.create(item=item, model_version=second, receipt={"kind": "ranking"})
        item.prediction = prediction
        item.save(update_fields=["prediction"])
    item = project.items.order_by("pk").first()
    Claim.objects.create(item=item, reviewer=reviewer, expires_at=timezone.now() + timedelta(minutes=5))
    answers = [Answer.objects.create(item=item, reviewer=who, kind="target", target=choice, source="s")
               for who, choice in ((reviewer, "db"), (admin, "dns"))]
    for answer in answers:
        AnswerRevision.objects.create(answer=answer, kind="target", target=answer.target)
    adjudication = Adjudication.objects.create(item=item, kind="picked", target="db", chosen_answer=answers[0],
                                               adjudicator=admin, source="adjudication")
    AdjudicationRevision.objects.create(adjudication=adjudication, kind="picked", target="db",
                                        chosen_answer=answers[0], adjudicator=admin)
    ApiToken.objects.issue(reviewer, "labelling script", project=project)
    export = Export.objects.create(project=project, requested_by=admin, state=ExportState.SUCCEEDED)
    storage.artifact_dir("exports", export.pk)
    model_upload = ModelUpload.objects.create(project=project, uploaded_by=admin, version=second)
    storage.artifact_dir("model-uploads", model_upload.pk)
    experience = ExperienceUpload.objects.create(project=project, uploaded_by=admin)
    storage.artifact_dir("uploads", experience.pk)
    return project


@pytest.fixture
def doomed(reviewer, project_admin) -> Project:
    return _full_project("doomed", reviewer, project_admin)


@pytest.fixture
def kept(second_reviewer, project_admin) -> Project:
    """Another project, with rows of every kind too: none of them may go."""
    return _full_project("kept", second_reviewer, project_admin)


def _rows() -> dict[str, dict]:
    """Every row of every table: {model: {pk: its column values}}."""
    return {model._meta.label: {row.pk: tuple(getattr(row, f.attname) for f in model._meta.concrete_fields)
                                for row in model._base_manager.all()}
            for model in apps.get_models(include_auto_created=True) if not model._meta.proxy}


def _directories() -> set[str]:
    return {f"{path.parent.name}/{path.name}" for path in Path(storage.root()).glob("*/*")}


def test_every_model_that_goes_with_a_project_has_rows_here(doomed) -> None:
    """So the comparison below covers them all: a model added later with no row in `_full_project` fails this."""
    counts = deletion.summary(doomed)
    assert counts and all(counts.values()), counts
    assert set(counts) >= {"items", "answers", "answer revisions", "predictions", "model versions"}


def test_deleting_leaves_the_database_as_djangos_cascade_does(doomed, kept) -> None:
    ModelVersion.objects.filter(project=kept).update(parent=doomed.current_version)  # a pointer across projects
    with transaction.atomic():
        # Django's collector: right, but it loads every row and, at scale, sends one statement too many.
        Project.objects.get(pk=doomed.pk).delete()
        expected = _rows()
        transaction.set_rollback(True)
    assert _rows() != expected

    deleted = deletion.delete_project(doomed)

    assert _rows() == expected
    assert deleted.rows["items"] == 3 and deleted.rows["answers"] == 2 and deleted.rows["training jobs"] == 1
    assert "3 items" in str(deleted) and "2 answers" in str(deleted)
    assert set(ModelVersion.objects.filter(project=kept).values_list("parent", flat=True)) == {None}
    assert Item.objects.filter(project=kept).count() == 3


def test_files_go_after_the_rows_and_another_projects_stay(doomed, kept, django_capture_on_commit_callbacks) -> None:
    before = _directories()
    ours = {storage.relative_name(kind, pk) for kind, model in deletion._artifact_models().items()
            for pk in model.objects.filter(project=doomed).values_list("pk", flat=True)}
    assert ours < before and {name.split("/")[0] for name in ours} == set(storage.KINDS)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        deleted = deletion.delete_project(doomed)
    assert _directories() == before, "the files wait for the commit"
    for callback in callbacks:
        callback()

    assert _directories() == before - ours
    assert deleted.directories == len(ours)


def test_a_waiting_training_job_blocks_and_nothing_goes(doomed) -> None:
    job = TrainingJob.objects.create(project=doomed, state=JobState.PENDING)
    before = _rows()

    with pytest.raises(deletion.ProjectBusy, match=f"training job {job.pk} is waiting"):
        deletion.delete_project(doomed)

    assert _rows() == before
    job.state = JobState.CANCELLED
    job.save(update_fields=["state"])
    deletion.delete_project(doomed)
    assert not Project.objects.filter(pk=doomed.pk).exists()


def test_an_export_being_written_blocks_until_its_time_limit_has_passed(doomed) -> None:
    export = Export.objects.create(project=doomed, state=ExportState.RUNNING, started_at=timezone.now())
    assert deletion.blockers(doomed) == [f"export {export.pk} is being written"]

    export.started_at = timezone.now() - deletion.EXPORT_TIME_LIMIT - timedelta(minutes=1)  # its worker was killed
    export.save(update_fields=["started_at"])
    assert deletion.blockers(doomed) == []


def test_deleting_twice_deletes_nothing_the_second_time(doomed) -> None:
    deletion.delete_project(doomed)
    again = deletion.delete_project(doomed)
    assert again.rows == {} and again.directories == 0 and str(again) == "nothing else"
