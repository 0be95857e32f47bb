"""Accepted experience uploads as training data: frozen at launch, copied into the train snapshot, trained on."""

from __future__ import annotations

import json
import threading

import pytest

from annotate.models import ExperienceUpload, ModelVersion
from tests.conftest import start_in_thread, wait_for_a_lock_wait
from tests.trainingjobs.conftest import upload
from tests.trainingjobs.test_runner import assert_same_weights, cancel_at, launch, weights
from tests.trainingjobs.test_snapshot import sources_of
from trainingjobs import runner, services, snapshot
from trainingjobs.models import JobState, TrainingJob

MINE = [f"mine:{n}" for n in range(200, 208)]  # the sources in the two files of the `uploads` fixture


def manifest(job: TrainingJob) -> dict:
    return json.loads((job.directory / "data" / "train" / snapshot.MANIFEST).read_text())


def test_launch_with_uploads_freezes_the_accepted_ones_only(project, reviewed, uploads, not_accepted) -> None:
    job = launch(project, include_uploads=True)

    assert job.train_uploads == [row.pk for row in uploads]
    assert job.upload_records == 2 and job.train_count == 9
    assert "plus 2 experience upload files with 2 supervision records for training" in job.log
    assert launch(project).train_uploads == []  # the keyword defaults to reviewed records only


def test_refused_and_pending_uploads_leave_nothing_to_train_on(project, not_accepted) -> None:
    with pytest.raises(services.JobActionError, match="no reviewed records match and the project has no accepted"):
        launch(project, include_uploads=True)
    assert not TrainingJob.objects.exists()


def test_a_job_with_only_uploads_launches_and_trains_on_them(project, uploads) -> None:
    with pytest.raises(services.JobActionError, match="no reviewed records match"):
        launch(project)

    job = launch(project, include_uploads=True)

    assert (job.train_count, job.held_out_count, job.upload_records) == (0, 0, 2)
    assert runner.train(job.pk, "worker-a") == "succeeded", TrainingJob.objects.get(pk=job.pk).error
    job.refresh_from_db()
    assert job.step == job.total_steps == 3 * 2  # two files, one minibatch each, three epochs
    assert sources_of(job, "train") == MINE
    assert job.metrics["held_out"] == 0  # uploads are never held out


def test_the_snapshot_copies_the_uploads_and_the_runner_trains_on_them(
    project, reviewed, uploads, not_accepted
) -> None:
    plain = launch(project)
    mixed = launch(project, include_uploads=True)

    assert runner.train(plain.pk, "worker-a") == "succeeded"
    assert runner.train(mixed.pk, "worker-a") == "succeeded"

    plain.refresh_from_db()
    mixed.refresh_from_db()
    names = [f"upload-{row.pk:05d}.json" for row in uploads]
    assert manifest(mixed)["files"][-2:] == names and manifest(mixed)["uploads"] == [row.pk for row in uploads]
    for name, row in zip(names, uploads, strict=True):
        assert (mixed.directory / "data" / "train" / name).read_bytes() == row.path.read_bytes()
    assert plain.step == 3 * 3 and mixed.step == 3 * 5  # nine reviewed records in 3 minibatches, plus 2 files
    assert mixed.loss_points.count() == 15
    assert sources_of(mixed, "train")[-8:] == MINE
    assert not [s for s in sources_of(mixed, "train") + sources_of(mixed, "held_out") if s.startswith("mine:3")]
    assert sources_of(plain, "train") == sources_of(mixed, "train")[:-8]
    assert "training 5 minibatches x 3 epochs on cpu, including 2 experience upload files" in mixed.log
    trained, without = weights(mixed.result_version), weights(plain.result_version)
    assert any(not trained[key].equal(without[key]) for key in trained)


@pytest.mark.parametrize("gone", ["file", "row"])
def test_a_frozen_upload_that_is_gone_fails_the_job_naming_it(project, reviewed, uploads, gone) -> None:
    job = launch(project, include_uploads=True)
    missing, pk = uploads[1], uploads[1].pk
    missing.path.unlink()
    if gone == "row":
        missing.delete()

    assert runner.train(job.pk, "worker-a") == "failed"

    job.refresh_from_db()
    assert job.state == JobState.FAILED
    if gone == "file":
        assert job.error.startswith(f"the file of experience upload {pk} (mine-204.json) is gone")
    else:
        assert job.error.startswith(f"experience upload {pk} was deleted after the job was launched")
    assert f"failed: {job.error}" in job.log
    assert not (job.directory / "data" / "train").exists()  # nothing half-written to train on by mistake


def test_an_upload_that_does_not_bind_to_the_base_version_fails_the_job(project, reviewed, uploads) -> None:
    project.configuration = {"dim": 16, "buckets": 64, "max_words": 16}
    project.save(update_fields=["configuration"])
    wider = ModelVersion.objects.allocate(project, label="wider")

    job = services.launch(project, base_version=wider, include_uploads=True, epochs=1, minibatch_size=4)
    assert runner.train(job.pk, "worker-a") == "failed"

    job.refresh_from_db()
    assert job.error.startswith(f"experience upload {uploads[0].pk} (mine-200.json) does not load against the base")


def test_uploads_changed_after_the_snapshot_change_nothing_and_resume_is_exact(
    project, reviewed, uploads, tmp_path, monkeypatch
) -> None:
    straight = launch(project, include_uploads=True)
    runner.train(straight.pk, "worker-a")
    interrupted = launch(project, include_uploads=True)
    with monkeypatch.context() as patch:
        cancel_at(patch, 4)
        assert runner.train(interrupted.pk, "worker-a") == "cancelled"

    uploads[0].path.unlink()
    ExperienceUpload.objects.filter(pk=uploads[0].pk).delete()
    upload(project, range(220, 224), tmp_path)  # accepted after launch
    services.resume(interrupted.pk)
    assert runner.train(interrupted.pk, "worker-b") == "succeeded"

    straight.refresh_from_db()
    interrupted.refresh_from_db()
    assert interrupted.train_uploads == [row.pk for row in uploads]
    assert_same_weights(straight.result_version, interrupted.result_version)
    assert list(interrupted.loss_points.values_list("step", "loss")) == list(
        straight.loss_points.values_list("step", "loss")
    )
    assert sources_of(interrupted, "train") == sources_of(straight, "train")


def test_an_upload_a_waiting_job_froze_is_not_removed_until_the_job_ends(
        project, uploads, django_capture_on_commit_callbacks) -> None:
    """Removing an upload takes its file with it; the job that froze it copies the file when it starts, so it
    is refused, naming the job, until the job is cancelled or done. Later launches leave it out."""
    from annotate import imports

    job = launch(project, include_uploads=True)
    first, second = uploads
    directory = first.path.parent

    with pytest.raises(imports.UploadInUse, match=f"part of training job {job.pk}, which has not finished"):
        imports.remove_upload(first)
    assert ExperienceUpload.objects.filter(pk=first.pk).exists() and first.path.is_file()

    services.cancel(job.pk)
    with django_capture_on_commit_callbacks(execute=True):
        imports.remove_upload(first)

    assert not ExperienceUpload.objects.filter(pk=first.pk).exists()
    assert not directory.exists()
    assert launch(project, include_uploads=True).train_uploads == [second.pk]


def test_django_admin_deletes_an_upload_as_the_project_page_removes_it(
        client, django_user_model, project, uploads, django_capture_on_commit_callbacks) -> None:
    """Its file goes too, and an upload a waiting job froze cannot be deleted there either: the confirmation page
    names the job instead of offering Delete."""
    superuser = django_user_model.objects.create_superuser("root", password="a-long-password")
    client.force_login(superuser)
    first = uploads[0]
    url = f"/admin/annotate/experienceupload/{first.pk}/delete/"
    job = launch(project, include_uploads=True)

    page = client.post(url, {"post": "yes"}).content.decode()
    assert f"training job {job.pk} froze it and is not over (cancel it, or let it finish)" in page
    assert first.path.is_file()

    services.cancel(job.pk)
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(url, {"post": "yes"}).status_code == 302

    assert not ExperienceUpload.objects.filter(pk=first.pk).exists() and not first.path.parent.exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_removal_during_a_launch_waits_for_it_and_then_names_its_job(project, uploads, monkeypatch) -> None:
    """The launch locks the uploads it freezes until it commits; a removal locks its row before looking for jobs,
    so it waits, then sees the new job and refuses. Without the locks it would delete a file the job needs."""
    from annotate import imports

    frozen, go_on = threading.Event(), threading.Event()
    select_uploads = snapshot.select_uploads

    def select_and_hold(project):
        result = select_uploads(project)
        frozen.set()
        go_on.wait(timeout=60)
        return result

    monkeypatch.setattr(snapshot, "select_uploads", select_and_hold)
    outcome: dict = {}
    launcher = start_in_thread(outcome, "job", lambda: launch(project, include_uploads=True, enqueue=False))
    assert frozen.wait(timeout=60)
    remover = start_in_thread(outcome, "removal", lambda: imports.remove_upload(uploads[0]))
    wait_for_a_lock_wait(remover)  # the removal is blocked on the launch's lock
    assert remover.is_alive()
    go_on.set()
    launcher.join(timeout=60)
    remover.join(timeout=60)

    job = outcome["job"]
    assert isinstance(job, TrainingJob) and job.train_uploads == [row.pk for row in uploads]
    assert isinstance(outcome["removal"], imports.UploadInUse), outcome["removal"]
    assert f"part of training job {job.pk}" in str(outcome["removal"])
    assert ExperienceUpload.objects.filter(pk=uploads[0].pk).exists() and uploads[0].path.is_file()
