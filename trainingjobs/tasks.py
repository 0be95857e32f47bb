"""Celery tasks of training jobs. They take ids, re-read the rows, and are safe to run twice.

`train_job` is routed to the `gpu` queue (settings.CELERY_TASK_ROUTES); the others run on the default queue.
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from trainingjobs import lease, runner, services
from trainingjobs.lease import TRANSIENT_DB_ERRORS

_RETRY = {
    "autoretry_for": TRANSIENT_DB_ERRORS,
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": 8,
}


@shared_task(bind=True, acks_late=True, soft_time_limit=getattr(settings, "TC_JOB_TIME_LIMIT", 7 * 24 * 3600),
             **_RETRY)
def train_job(self, job_id: int) -> str:
    """Ensure job `job_id` is trained: lease it, resume from its checkpoint, publish the new version."""
    return runner.train(job_id, lease.owner_id(self.request.id))


@shared_task(**_RETRY)
def sweep_jobs() -> list[int]:
    """Re-queue jobs whose worker stopped sending heartbeats or whose message was lost (run by `celery beat`)."""
    return services.sweep()


@shared_task(**_RETRY)
def repredict_pending(project_id: int, version_id: int) -> int:
    """Queue predictions by the promoted version for the project's items not yet reviewed (those an earlier version
    refused included); returns how many."""
    from annotate.models import ItemStatus, Project
    from annotate.tasks import enqueue_predictions

    project = Project.objects.filter(pk=project_id).first()
    if project is None or project.current_version_id != version_id:
        return 0  # another version was promoted since; its own task re-predicts
    open_items = project.items.filter(status__in=[ItemStatus.PENDING, ItemStatus.REFUSED, ItemStatus.READY])
    ids = list(open_items.order_by("id").values_list("id", flat=True))
    enqueue_predictions(project, ids, version_id)
    return len(ids)
