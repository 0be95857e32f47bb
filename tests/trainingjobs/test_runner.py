"""The worker side of a job, called directly: lease, train, cancel, resume, fail clearly, publish."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone
from safetensors.torch import load_file

from annotate.models import ModelVersion
from tests.trainingjobs.conftest import review
from trainingjobs import lease, runner, services
from trainingjobs.models import JobState, LossPoint, TrainingJob

SMALL = {"epochs": 3, "minibatch_size": 4, "checkpoint_interval": 2, "lr": 0.05, "held_out_fraction": 0.25}


def launch(project, **settings) -> TrainingJob:
    return services.launch(project, base_version=project.current_version, **(SMALL | settings))


def weights(version: ModelVersion) -> dict:
    return load_file(str(version.path / "model.safetensors"))


def assert_same_weights(a: ModelVersion, b: ModelVersion) -> None:
    left, right = weights(a), weights(b)
    assert sorted(left) == sorted(right)
    for key in left:
        assert left[key].equal(right[key]), key


def cancel_at(monkeypatch, step: int) -> None:
    """Request cancellation (as the page does) once the run reports `step`."""
    monkeypatch.setattr(runner, "PROGRESS_SECONDS", 0.0)
    original = runner._Reporter.__call__

    def call(self, report):
        if report.step == step:
            TrainingJob.objects.filter(pk=self.job_id).update(cancel_requested=True)
        return original(self, report)

    monkeypatch.setattr(runner._Reporter, "__call__", call)


def test_job_trains_and_publishes_a_new_version(project, reviewed) -> None:
    job = launch(project)

    assert runner.train(job.pk, "worker-a") == "succeeded"

    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.finished_at and not job.lease_owner
    assert job.step == job.total_steps == 3 * 3  # 9 training items in minibatches of 4, 3 epochs
    assert list(job.loss_points.values_list("step", flat=True)) == list(range(1, 10))
    version = job.result_version
    assert version.is_materialized and version.trained and version.parent == project.current_version
    assert version.created_by_job == job
    assert job.metrics["held_out"] == 3
    assert {"metric", "value", "loss", "examples"} <= set(job.metrics["new"]) and job.metrics["base"]
    assert job.metrics["new"]["loss"] < job.metrics["base"]["loss"]


def test_training_a_finished_job_again_does_nothing(project, reviewed) -> None:
    job = launch(project)
    runner.train(job.pk, "worker-a")

    assert runner.train(job.pk, "worker-b") == "skipped"
    assert ModelVersion.objects.filter(created_by_job=job).count() == 1


def test_second_worker_backs_off_while_the_lease_is_live(project, reviewed) -> None:
    job = launch(project)
    assert lease.acquire(job.pk, "worker-a") is not None

    assert runner.train(job.pk, "worker-b") == "skipped"

    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.lease_owner == "worker-a" and job.attempts == 1
    assert "worker-b backed off: the job is leased by worker-a" in job.log


def test_expired_lease_is_taken_over(project, reviewed) -> None:
    job = launch(project)
    lease.acquire(job.pk, "dead-worker")
    TrainingJob.objects.filter(pk=job.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    assert runner.train(job.pk, "worker-b") == "succeeded"
    assert TrainingJob.objects.get(pk=job.pk).attempts == 2


def test_cancel_stops_at_the_next_step_and_keeps_the_checkpoint(project, reviewed, monkeypatch) -> None:
    job = launch(project)
    cancel_at(monkeypatch, 4)

    assert runner.train(job.pk, "worker-a") == "cancelled"

    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.step == 4
    assert (job.checkpoint_dir / "training.json").is_file()
    assert job.result_version is None


def test_resume_after_cancel_matches_an_uninterrupted_run_bit_for_bit(project, reviewed, monkeypatch) -> None:
    straight = launch(project)
    runner.train(straight.pk, "worker-a")
    interrupted = launch(project)
    with monkeypatch.context() as patch:
        cancel_at(patch, 5)
        runner.train(interrupted.pk, "worker-a")

    services.resume(interrupted.pk)
    assert runner.train(interrupted.pk, "worker-b") == "succeeded"

    straight.refresh_from_db()
    interrupted.refresh_from_db()
    assert_same_weights(straight.result_version, interrupted.result_version)
    assert list(interrupted.loss_points.values_list("step", "loss")) == list(
        straight.loss_points.values_list("step", "loss")
    )


def test_corrupt_checkpoint_fails_the_job_with_the_reason_and_deletes_nothing(project, reviewed, monkeypatch) -> None:
    job = launch(project)
    with monkeypatch.context() as patch:
        cancel_at(patch, 3)
        runner.train(job.pk, "worker-a")
    files = sorted(path for path in job.checkpoint_dir.iterdir() if path.suffix == ".safetensors")
    for path in files:
        data = path.read_bytes()
        path.write_bytes(data[:-64] + bytes(b ^ 0xFF for b in data[-64:]))
    before = sorted(p.name for p in job.checkpoint_dir.iterdir())

    services.resume(job.pk)
    assert runner.train(job.pk, "worker-a") == "failed"

    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert job.error.startswith(f"cannot resume from the checkpoint in jobs/{job.pk}/checkpoint (kept as it is): ")
    assert sorted(p.name for p in job.checkpoint_dir.iterdir()) == before


def test_base_version_deleted_while_queued_fails_the_job_clearly(project, reviewed) -> None:
    job = launch(project)
    base = project.current_version
    label = str(base)
    project.current_version = None
    project.save()
    base.delete()

    assert runner.train(job.pk, "worker-a") == "failed"

    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert f"the base model version ({label}) was deleted after the job was launched" in job.error


def test_heartbeat_retries_a_database_that_drops_briefly(project, reviewed, monkeypatch) -> None:
    monkeypatch.setattr(runner, "PROGRESS_SECONDS", 0.0)
    failures = iter([OperationalError("server closed the connection unexpectedly")] * 2)
    real = lease.locked_if_held

    def flaky(job_id, owner):
        error = next(failures, None)
        if error is not None:
            raise error
        return real(job_id, owner)

    job = launch(project)
    lease.acquire(job.pk, "worker-a")  # the lease is taken before the database drops
    monkeypatch.setattr(lease, "locked_if_held", flaky)

    assert runner.train(job.pk, "worker-a") == "succeeded"
    assert TrainingJob.objects.get(pk=job.pk).state == JobState.SUCCEEDED


def test_worker_that_lost_its_lease_stops_without_publishing(project, reviewed, monkeypatch) -> None:
    monkeypatch.setattr(runner, "PROGRESS_SECONDS", 0.0)
    original = runner._Reporter.__call__

    def call(self, report):
        if report.step == 2:  # the sweep gave the job to another worker meanwhile
            TrainingJob.objects.filter(pk=self.job_id).update(lease_owner="worker-b")
        return original(self, report)

    monkeypatch.setattr(runner._Reporter, "__call__", call)
    job = launch(project)

    assert runner.train(job.pk, "worker-a") == "lease lost"

    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.lease_owner == "worker-b" and job.result_version is None


def test_labels_given_after_launch_do_not_change_the_job(project, reviewer, reviewed) -> None:
    job = launch(project)
    records = job.train_records + job.held_out_records
    review(project, reviewer, 5, start=100)

    runner.train(job.pk, "worker-a")

    job.refresh_from_db()
    assert sorted(job.train_records + job.held_out_records) == sorted(records)
    assert LossPoint.objects.filter(job=job).count() == 9


def test_continue_trains_more_epochs_into_a_new_version(project, reviewed) -> None:
    job = launch(project)
    runner.train(job.pk, "worker-a")
    first = TrainingJob.objects.get(pk=job.pk).result_version

    services.continue_training(job.pk, 2)
    assert runner.train(job.pk, "worker-a") == "succeeded"

    job.refresh_from_db()
    assert job.epochs == 5 and job.step == 15
    assert job.result_version != first and ModelVersion.objects.filter(pk=first.pk).exists()


def test_sweep_requeues_running_jobs_whose_heartbeat_expired(project, reviewed, django_capture_on_commit_callbacks,
                                                             monkeypatch) -> None:
    sent = []
    monkeypatch.setattr("trainingjobs.tasks.train_job.delay", lambda job_id: sent.append(job_id))
    live, dead = launch(project), launch(project)
    lease.acquire(live.pk, "worker-a")
    lease.acquire(dead.pk, "worker-b")
    TrainingJob.objects.filter(pk=dead.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    with django_capture_on_commit_callbacks(execute=True):
        assert services.sweep() == [dead.pk]

    dead.refresh_from_db()
    assert sent == [dead.pk]
    assert dead.state == JobState.PENDING and not dead.lease_owner
    assert "heartbeat of worker-b expired; re-queued" in dead.log


@pytest.mark.parametrize("messages, waited, requeued", [
    (0, 11, True),  # no message for the one queued job: lost
    (1, 11, False),  # its message waits in the GPU queue (for a free GPU, or for a worker to start)
    (0, 5, False),  # a worker may have taken it a moment ago: not yet
    (None, 11, False),  # the broker cannot say: only the visibility timeout decides
    (None, 61, True),
])
def test_sweep_requeues_a_queued_job_whose_message_is_missing_from_the_gpu_queue(
        project, reviewed, django_capture_on_commit_callbacks, monkeypatch, messages, waited, requeued) -> None:
    from annotate import broker

    sent = []
    monkeypatch.setattr("trainingjobs.tasks.train_job.delay", lambda job_id: sent.append(job_id))
    counted = []
    monkeypatch.setattr(broker, "waiting_messages", lambda task: counted.append(task.name) or messages)
    job = launch(project)
    TrainingJob.objects.filter(pk=job.pk).update(queued_at=timezone.now() - timedelta(minutes=waited))

    with django_capture_on_commit_callbacks(execute=True):
        assert services.sweep() == ([job.pk] if requeued else [])

    job.refresh_from_db()
    assert sent == ([job.pk] if requeued else [])
    assert job.state == JobState.PENDING
    assert ("its message to the GPU workers was lost; re-queued" in job.log) is requeued
    assert counted == ([] if waited < 10 else ["trainingjobs.tasks.train_job"])  # the broker is asked only then
    if requeued:
        assert timezone.now() - job.queued_at < timedelta(minutes=1)  # so sent again at most once per wait


def test_sweep_requeues_only_the_jobs_queued_long_enough_when_one_message_of_several_is_missing(
        project, reviewed, monkeypatch) -> None:
    from annotate import broker

    monkeypatch.setattr("trainingjobs.tasks.train_job.delay", lambda job_id: None)
    monkeypatch.setattr(broker, "waiting_messages", lambda task: 2)  # three queued jobs, two messages
    old, older, recent = launch(project), launch(project), launch(project)
    TrainingJob.objects.filter(pk=old.pk).update(queued_at=timezone.now() - timedelta(minutes=20))
    TrainingJob.objects.filter(pk=older.pk).update(queued_at=timezone.now() - timedelta(minutes=40))

    # Which of them lost its message cannot be told: both old ones are sent again, the recent one is left alone.
    assert sorted(services.sweep()) == sorted([old.pk, older.pk])
    assert TrainingJob.objects.get(pk=recent.pk).log == recent.log


@pytest.mark.parametrize("fraction, held", [(0.0, 0), (0.25, 3), (0.9, 11)])
def test_split_holds_out_whole_items_and_always_trains_on_one(project, reviewed, fraction, held) -> None:
    job = launch(project, held_out_fraction=fraction)

    assert len(job.held_out_records) == held
    assert len(job.train_records) == 12 - held


def test_verifier_job_refits_calibration_on_the_held_out_pairs(admin, reviewer) -> None:
    from annotate.models import Answer, AnswerKind, AnswerRevision, Item, ItemStatus, Project
    from tensorcode import tools

    project = Project.objects.create(slug="nli", name="NLI", tool="investigator", mode="verification",
                                     configuration={"dim": 8, "buckets": 64, "modes": ["verification"]})
    project.current_version = ModelVersion.objects.allocate(project, label="untrained", trained=False)
    project.save()
    labels = ["entailment", "neutral", "contradiction"]
    for n in range(12):
        item = Item.objects.create(project=project, status=ItemStatus.DONE,
                                   inputs={"premise": f"The disk {n} was full.", "hypothesis": f"Disk {n} is full."})
        answer = Answer.objects.create(item=item, reviewer=reviewer, kind=AnswerKind.TARGET, target=labels[n % 3],
                                       source=project.source_for(item.pk, reviewer))
        AnswerRevision.objects.create(answer=answer, kind=answer.kind, target=answer.target)
    job = launch(project, held_out_fraction=0.5)

    assert runner.train(job.pk, "worker-a") == "succeeded", TrainingJob.objects.get(pk=job.pk).error

    job.refresh_from_db()
    assert job.metrics["calibration"]
    from trainingjobs.views import _calibration_text

    assert re.fullmatch(r"temperature [\d.e+-]+ on 6 held-out pairs; NLL [\d.e+-]+ to [\d.e+-]+, ECE [\d.]+ to [\d.]+",
                        _calibration_text(job.metrics["calibration"]))  # the job page's words for the real report
    assert job.metrics["new"]["metric"] == "accuracy"
    tool = tools.load_pretrained(str(job.result_version.path))
    receipt = tools.predict(tool, "verification", [{"premise": "a", "hypothesis": "b"}])[0]
    assert receipt["calibration"]["fitted"] is True


def test_sweep_cancels_a_job_whose_worker_died_after_cancel_was_asked(project, reviewed) -> None:
    job = launch(project)
    lease.acquire(job.pk, "worker-a")
    services.cancel(job.pk)
    TrainingJob.objects.filter(pk=job.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    assert services.sweep() == []

    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and not job.lease_owner


def test_a_trained_versions_name_does_not_nest_its_ancestors(project, reviewed) -> None:
    """Each generation named its base in full ("job 9: ... from job 8: ... from ..."): the sixth outgrew the
    200-character label column, and on PostgreSQL the job failed after its training was done."""
    base = project.current_version
    base.label = ("a model named at some length " * 7)[:190]  # named by a person, within the 200 allowed
    base.save(update_fields=["label"])

    first = launch(project, epochs=1)
    assert runner.train(first.pk, "worker-a") == "succeeded"
    first.refresh_from_db()
    assert first.state == JobState.SUCCEEDED
    assert str(first.result_version) == f"job {first.pk}: 1 epoch from version {base.pk}"  # too long to repeat

    second = services.launch(project, base_version=first.result_version, **(SMALL | {"epochs": 2}))
    assert runner.train(second.pk, "worker-a") == "succeeded"
    second.refresh_from_db()
    assert str(second.result_version) == f"job {second.pk}: 2 epochs from version {first.result_version.pk}"


def test_a_short_name_given_by_a_person_is_kept_in_the_trained_versions_name(project) -> None:
    base = project.current_version
    base.label = "ops model, March"
    assert runner.trained_label(12, 3, base) == "job 12: 3 epochs from ops model, March"
    assert runner.trained_label(12, 3, None) == "job 12: 3 epochs from a deleted version"
