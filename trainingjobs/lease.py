"""A worker's lease on a job row: taken under a row lock, kept alive by heartbeats, checked before each write.

Only the lease holder writes progress, checkpoints or the outcome. A redelivered or duplicated message for a
job that a live worker holds backs off; a lease whose heartbeat stopped expires and the sweep re-queues the job.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

from django.conf import settings
from django.db import OperationalError, close_old_connections, connection, transaction
from django.db.utils import InterfaceError
from django.utils import timezone

from trainingjobs.models import JobState, TrainingJob

logger = logging.getLogger(__name__)

# The errors a dropped or restarting database raises; anything else is not retried.
TRANSIENT_DB_ERRORS = (OperationalError, InterfaceError)

T = TypeVar("T")


class LeaseLost(Exception):
    """Another worker holds the job now (or it was swept, cancelled or finished): stop without writing."""


def lease_seconds() -> float:
    return float(settings.TC_JOB_LEASE_SECONDS)


def heartbeat_seconds() -> float:
    """How often the holder renews: a third of the lease, so two missed beats still leave it alive."""
    return max(0.05, min(10.0, lease_seconds() / 3))


def owner_id(task_id: str | None) -> str:
    """This worker process and message: a different host, process or message is a different owner."""
    return f"{socket.gethostname()}:{os.getpid()}:{task_id or 'direct'}"


def acquire(job_id: int, owner: str) -> TrainingJob | None:
    """Take the lease on a job that needs training; None (and nothing changed) when it does not or is held."""
    with transaction.atomic():
        job = TrainingJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.is_final:
            return None
        now = timezone.now()
        if job.state == JobState.RUNNING and job.lease_is_live(now) and job.lease_owner != owner:
            job.log = job.appended_log(job.log, f"{owner} backed off: the job is leased by {job.lease_owner}")
            job.save(update_fields=["log"])
            return None
        if job.cancel_requested:
            job.state, job.finished_at, job.lease_owner = JobState.CANCELLED, now, ""
            job.log = job.appended_log(job.log, "cancelled before training started")
            job.save(update_fields=["state", "finished_at", "lease_owner", "log"])
            return None
        job.state = JobState.RUNNING
        job.lease_owner = owner
        job.lease_expires_at = now + timedelta(seconds=lease_seconds())
        job.attempts += 1
        job.started_at = job.started_at or now
        job.attempt_started_at = now
        job.attempt_step = job.step
        job.worker_host = socket.gethostname()
        job.error = ""
        job.log = job.appended_log(job.log, f"attempt {job.attempts}: leased by {owner}")
        job.save()
        return job


def locked_if_held(job_id: int, owner: str) -> TrainingJob:
    """The job row, locked for this transaction; raises LeaseLost unless `owner` still holds it RUNNING."""
    job = TrainingJob.objects.select_for_update().get(pk=job_id)
    if job.state != JobState.RUNNING or job.lease_owner != owner:
        raise LeaseLost(f"job {job_id} is {job.state} and leased by {job.lease_owner or 'nobody'}, not {owner}")
    return job


def release(job_id: int, owner: str, state: str, *, error: str = "", log: str = "") -> bool:
    """End the lease by moving the job to `state`; False if `owner` no longer held it."""
    with transaction.atomic():
        try:
            job = locked_if_held(job_id, owner)
        except LeaseLost:
            return False
        job.state = state
        job.lease_owner = ""
        job.lease_expires_at = None
        job.error = error
        if state != JobState.PENDING:
            job.finished_at = timezone.now()
        if log:
            job.log = job.appended_log(job.log, log)
        job.save()
        return True


def with_db_retry(operation: Callable[[], T], *, attempts: int = 6, first_delay: float = 0.1) -> T:
    """Run `operation`, retrying the named transient database errors with exponential backoff and a cap.

    Between tries the broken connection is dropped so that Django opens a new one.
    """
    delay = first_delay
    for attempt in range(1, attempts + 1):
        try:
            return operation()
        except TRANSIENT_DB_ERRORS as exc:
            if attempt == attempts:
                raise
            logger.warning("database unavailable (%s); retry %d/%d in %.1f s", exc, attempt, attempts - 1, delay)
            _drop_connection()
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
    raise AssertionError("unreachable")


def _drop_connection() -> None:
    if connection.in_atomic_block:
        return  # the caller's transaction owns the connection (tests run inside one); it cannot be replaced here
    with contextlib.suppress(TRANSIENT_DB_ERRORS):
        connection.close()
    close_old_connections()
