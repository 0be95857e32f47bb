"""`manage.py launch_training`: queue a job, or train it in the shell with --here."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from trainingjobs.models import JobState, TrainingJob


def test_launch_training_here_trains_and_reports(project, reviewed) -> None:
    out = StringIO()

    call_command("launch_training", project.slug, "--here", "--epochs", "2", "--minibatch-size", "4", stdout=out)

    job = TrainingJob.objects.get()
    assert job.state == JobState.SUCCEEDED and job.epochs == 2 and job.minibatch_size == 4
    assert f"job {job.pk}: succeeded" in out.getvalue() and "held-out top1" in out.getvalue()


def test_launch_training_queues_with_the_tool_kinds_defaults(project, reviewed, monkeypatch,
                                                             django_capture_on_commit_callbacks) -> None:
    sent = []
    monkeypatch.setattr("trainingjobs.tasks.train_job.delay", sent.append)

    with django_capture_on_commit_callbacks(execute=True):
        call_command("launch_training", project.slug, stdout=StringIO())

    job = TrainingJob.objects.get()
    assert sent == [job.pk] and job.state == JobState.PENDING
    assert (job.optimizer, job.lr, job.epochs) == ("adam", 0.01, 10)


@pytest.mark.django_db
def test_launch_training_names_an_unknown_project() -> None:
    with pytest.raises(CommandError, match="no project with slug 'nope'"):
        call_command("launch_training", "nope")


@pytest.mark.django_db
def test_launch_training_refuses_a_project_without_reviews(project) -> None:
    with pytest.raises(CommandError, match="no reviewed records match"):
        call_command("launch_training", project.slug)


def test_launch_training_include_uploads_trains_on_the_accepted_ones(project, uploads, not_accepted) -> None:
    out = StringIO()

    call_command("launch_training", project.slug, "--include-uploads", "--here", "--epochs", "2", stdout=out)

    job = TrainingJob.objects.get()
    assert job.state == JobState.SUCCEEDED and job.train_uploads == [row.pk for row in uploads]
    assert "0 training and 0 held-out records, plus 2 experience upload files with 2 supervision records" in (
        out.getvalue()
    )
