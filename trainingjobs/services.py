"""What admins and the scheduler do to jobs: launch, cancel, resume, continue, promote, sweep.

Every change locks the job row and enqueues with `delay_on_commit`, so a task never runs before the row it
reads is committed. Training itself is `trainingjobs.runner`, on a worker.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Min, Q
from django.utils import timezone

from trainingjobs import defaults, snapshot
from trainingjobs.models import JobState, TrainingJob

logger = logging.getLogger(__name__)


class JobActionError(ValueError):
    """An action the job's state does not allow; the message says why, for the page."""


def launch(
    project,
    *,
    base_version,
    created_by=None,
    filters: dict | None = None,
    include_uploads: bool = False,
    enqueue: bool = True,
    **settings,
) -> TrainingJob:
    """Create a job that trains `base_version` on `project`'s reviewed records as they are now, and queue it.

    `include_uploads` also trains on the project's experience uploads accepted now (training only, never held
    out; `snapshot.select_uploads`). `settings` are the job's fields (held_out_fraction, minibatch_size,
    optimizer, lr, epochs, seed, device, checkpoint_interval); the tool kind's defaults fill in the rest.
    `enqueue=False` leaves it for the caller to train (`manage.py launch_training --here`).
    """
    if base_version is None or base_version.project_id != project.pk:
        raise JobActionError("choose a model version of this project to start from")
    from annotate import export
    from annotate.models import ModelVersion, Project

    values = defaults.for_tool(project.tool) | {k: v for k, v in settings.items() if v is not None}
    try:
        filters = export.validate_filters(filters)
    except ValueError as exc:
        raise JobActionError(str(exc)) from exc
    with transaction.atomic():
        # The project first, as a deletion batch locks it before it deletes: a batch in flight commits before
        # the records are read, so the job never freezes ids of answers that batch takes away.
        if not Project.objects.lock(project.pk, no_key=True):
            raise JobActionError("the project has been deleted")
        if not ModelVersion.objects.lock(base_version.pk, no_key=True):  # an admin may be deleting it
            raise JobActionError(f"{base_version} has been deleted; choose another version to start from")
        records = snapshot.select_records(project, filters)
        frozen = snapshot.split(records, values["held_out_fraction"], values["seed"])
        if include_uploads:
            frozen |= snapshot.select_uploads(project)
        job = TrainingJob(
            project=project,
            base_version=base_version,
            base_version_label=str(base_version),
            created_by=created_by,
            filters=filters,
            **frozen,
            **values,
        )
        if not job.train_count and not job.upload_records:
            raise JobActionError(
                "no reviewed records match"
                + (" and the project has no accepted experience uploads" if include_uploads else "")
                + "; review some items (or widen the filters) first"
            )
        job.save()
        adjudicated = len(job.train_adjudications) + len(job.held_out_adjudications)
        job.log = job.appended_log(
            "", f"launched: {job.train_count} training and {job.held_out_count} held-out records from {base_version}"
            + (f" (adjudicated targets: {adjudicated})" if adjudicated else "")
            + (f", plus {job.uploads_text} for training" if job.train_uploads else "")
        )
        if enqueue:
            _enqueue(job)
        else:
            job.save()
    return job


def cancel(job_id: int) -> TrainingJob:
    """Stop a job: at once when it is queued, at its next step when a worker is training it."""
    with transaction.atomic():
        job = TrainingJob.objects.select_for_update().get(pk=job_id)
        if job.is_final:
            raise JobActionError(f"the job is already {job.get_state_display().lower()}")
        if job.state == JobState.PENDING:
            job.state, job.finished_at = JobState.CANCELLED, timezone.now()
            job.log = job.appended_log(job.log, "cancelled while queued")
        else:
            job.log = job.appended_log(job.log, "cancel requested; stopping at the next step")
        job.cancel_requested = True
        job.save()
    return job


def resume(job_id: int) -> TrainingJob:
    """Queue a cancelled or failed job again; it continues from its last checkpoint."""
    with transaction.atomic():
        job = TrainingJob.objects.select_for_update().get(pk=job_id)
        if not job.can_resume:
            raise JobActionError("only a cancelled or failed job can be resumed")
        job.log = job.appended_log(job.log, "resume requested")
        _requeue(job)
    return job


def continue_training(job_id: int, extra_epochs: int) -> TrainingJob:
    """Train a succeeded job for `extra_epochs` more, from its final checkpoint; the result is a new version."""
    if not isinstance(extra_epochs, int) or extra_epochs < 1:
        raise JobActionError("continue needs a positive number of extra epochs")
    with transaction.atomic():
        job = TrainingJob.objects.select_for_update().get(pk=job_id)
        if not job.can_continue:
            raise JobActionError("only a succeeded job can be continued")
        job.epochs += extra_epochs
        job.log = job.appended_log(job.log, f"continue requested: {extra_epochs} more epochs ({job.epochs} in all)")
        _requeue(job)
    return job


def promote(version, *, by=None) -> None:
    """Make `version` its project's current model and re-predict the items still waiting for review.
    `JobActionError` when the version was deleted meanwhile."""
    from annotate.models import ModelVersion, Project
    from trainingjobs import tasks

    with transaction.atomic():
        project = Project.objects.select_for_update().get(pk=version.project_id)
        if not ModelVersion.objects.lock(version.pk, no_key=True):  # an admin may be deleting it
            raise JobActionError(f"{version} has been deleted")
        project.current_version = version
        project.save(update_fields=["current_version"])
        tasks.repredict_pending.delay_on_commit(project.pk, version.pk)
    logger.info("project %s: version %s promoted by %s", project.slug, version.pk, by)


def sweep() -> list[int]:
    """Re-queue RUNNING jobs whose heartbeat expired (their worker died) and PENDING jobs whose message was lost.

    Returns the ids re-queued. Rows another transaction holds are skipped until the next sweep.
    """
    now = timezone.now()
    stale = _lost_before(now)
    requeued = []
    with transaction.atomic():
        expired = TrainingJob.objects.select_for_update(skip_locked=True).filter(
            state=JobState.RUNNING, lease_expires_at__lt=now
        )
        for job in expired:
            if job.cancel_requested:  # its worker died before it could stop: there is nothing left to stop
                job.log = job.appended_log(job.log, f"heartbeat of {job.lease_owner} expired; cancelled as asked")
                job.state, job.finished_at, job.lease_owner, job.lease_expires_at = JobState.CANCELLED, now, "", None
                job.save()
                continue
            job.log = job.appended_log(job.log, f"heartbeat of {job.lease_owner} expired; re-queued")
            _requeue(job)
            requeued.append(job.pk)
        # A queued job whose message was lost (a broker flushed, say).
        lost = TrainingJob.objects.select_for_update(skip_locked=True).filter(
            state=JobState.PENDING, queued_at__lt=stale
        ) if stale else []
        for job in lost:
            job.log = job.appended_log(job.log, "its message to the GPU workers was lost; re-queued")
            _requeue(job)
            requeued.append(job.pk)
    return requeued


# A queued job whose message is missing from the GPU queue this long is sent again.
LOST_WAIT = timezone.timedelta(minutes=10)


def _lost_before(now) -> datetime | None:
    """Queued jobs queued before this have lost their message; None when no message is missing.

    A queued job may wait for a free GPU for hours, its message in the GPU queue all along. A message is
    missing when that queue holds fewer messages than there are queued jobs (a worker holds only the one it
    runs); the jobs then queued longer than `LOST_WAIT` are sent again. A job whose message a worker took a
    moment ago may be among them: its lease makes the second message do nothing. When the broker cannot count,
    only a job older than the visibility timeout (when Redis would have redelivered a message a worker had
    taken) is taken to have lost it.
    """
    from annotate import broker
    from trainingjobs import lease, tasks

    queued = TrainingJob.objects.filter(state=JobState.PENDING)
    if not queued.filter(queued_at__lt=now - LOST_WAIT).exists():
        return None
    messages = broker.waiting_messages(tasks.train_job)
    if messages is None:
        timeout = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("visibility_timeout", 3600)
        return now - timezone.timedelta(seconds=max(timeout, lease.lease_seconds()))
    return now - LOST_WAIT if messages < queued.count() else None


# A GPU worker with nothing to do takes a queued job within seconds; one waiting this long while no job runs
# suggests that no worker takes jobs at all.
NO_WORKER_WAIT = timezone.timedelta(minutes=1)


@dataclass(frozen=True)
class QueuePlace:
    """Where a queued job stands: jobs running now and jobs queued before it (on every project: the GPU
    workers are shared), and whether it looks as if no worker takes jobs."""

    running: int
    ahead: int
    no_worker: bool


def queue_place(job: TrainingJob) -> QueuePlace | None:
    """For a PENDING job's page (None for any other): two counts of the job table."""
    if job.state != JobState.PENDING or job.queued_at is None:
        return None
    running = TrainingJob.objects.filter(state=JobState.RUNNING).count()
    ahead = TrainingJob.objects.filter(state=JobState.PENDING, queued_at__lt=job.queued_at).count()
    no_worker = running == 0 and timezone.now() - job.queued_at >= NO_WORKER_WAIT
    return QueuePlace(running, ahead, no_worker)


@dataclass(frozen=True)
class Activity:
    """What the GPU workers have on among some projects' jobs: for the overview of jobs and the home page."""

    running: int
    queued: int
    no_worker: bool  # jobs wait, none runs, and the oldest has waited NO_WORKER_WAIT: is any worker up?


def activity(jobs) -> Activity:
    """Counts of `jobs` (a queryset) running and queued, in one statement."""
    counts = jobs.filter(state__in=(JobState.PENDING, JobState.RUNNING)).aggregate(
        running=Count("id", filter=Q(state=JobState.RUNNING)),
        queued=Count("id", filter=Q(state=JobState.PENDING)),
        oldest=Min("queued_at", filter=Q(state=JobState.PENDING)),
    )
    oldest = counts["oldest"]
    no_worker = (counts["running"] == 0 and oldest is not None and timezone.now() - oldest >= NO_WORKER_WAIT
                 and not TrainingJob.objects.filter(state=JobState.RUNNING).exists())  # workers are shared
    return Activity(counts["running"], counts["queued"], no_worker)


def _requeue(job: TrainingJob) -> None:
    job.state = JobState.PENDING
    job.cancel_requested = False
    job.error = ""
    job.finished_at = None
    job.lease_owner = ""
    job.lease_expires_at = None
    _enqueue(job)


def _enqueue(job: TrainingJob) -> None:
    from trainingjobs import tasks

    job.queued_at = timezone.now()
    job.save()
    tasks.train_job.delay_on_commit(job.pk)
