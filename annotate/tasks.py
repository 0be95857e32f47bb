"""Celery tasks of the reviewer app. They take ids, re-fetch rows, and are safe to run twice."""

from __future__ import annotations

import logging
import re
from contextlib import contextmanager

from celery import Task, shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.db import InterfaceError, OperationalError, transaction
from django.db.models import Q
from django.utils import timezone

from annotate import broker, tooling
from annotate.models import (
    REFUSAL_LENGTH,
    STALE_WAIT,
    DeletionState,
    ExperienceUpload,
    Export,
    ExportState,
    Item,
    ItemDeletion,
    ItemImport,
    ItemStatus,
    ModelUpload,
    ModelVersion,
    Prediction,
    Project,
    Queued,
    Upload,
    UploadState,
)

logger = logging.getLogger(__name__)

IMPORT_TIME_LIMIT = 1800  # seconds; 64 MiB of the smallest items (646,345) took 57 s here
DELETION_TIME_LIMIT = 3600  # seconds; 90,000 items with their answers took 7 s here
PREDICT_BATCH = 64  # items per prediction task (and per traced forward)
# The database briefly unreachable is the one transient failure worth retrying; anything else is a bug or bad
# data and is recorded (export error, upload reason) or raised as is.
RETRY = {"autoretry_for": (OperationalError, InterfaceError), "retry_backoff": 2, "retry_backoff_max": 60,
         "max_retries": 5}


@shared_task
def ping() -> str:
    """Answer "pong": proves a worker is consuming from the configured broker."""
    return "pong"


def enqueue_predictions(project: Project, item_ids: list[int], version_id: int | None = None) -> int:
    """Queue `predict_items` in batches, each sent when the current transaction commits; returns the batches."""
    batches = 0
    for start in range(0, len(item_ids), PREDICT_BATCH):
        predict_items.delay_on_commit(project.pk, list(item_ids[start:start + PREDICT_BATCH]), version_id)
        batches += 1
    return batches


def waited_too_long(project: Project) -> bool:
    """Whether the oldest item waiting for a prediction has waited past `STALE_WAIT` (never without a model).

    Prediction tasks are only queued when items are imported or a version is promoted; a message lost on the
    way would leave its items waiting for good. The sweep sends them again only when the workers are idle
    (`resend_lost_predictions`); the project page offers admins the same at once. The oldest is the one with
    the lowest id: one probe of an index.
    """
    if project.current_version_id is None:
        return False
    oldest = _in_status(project, ItemStatus.PENDING).values_list("created_at", flat=True).first()
    return oldest is not None and timezone.now() - oldest >= STALE_WAIT


def requeue_waiting(project: Project) -> int:
    """Queue predictions again for every item still waiting for one; returns how many.

    An item predicted by the current version meanwhile is skipped by `predict_items`; one that a worker is
    predicting at that very moment may get a second prediction from the same version (the item shows the latest).
    So the page offers this only once the oldest waiting item has waited past `STALE_WAIT`.
    """
    return _queue_current(project, ItemStatus.PENDING)


def retry_refused(project: Project) -> int:
    """Queue predictions by the project's current version for the items an earlier version refused; returns how
    many. (A version that refused an item refuses it again: `predict_items` makes no prediction twice.)"""
    return _queue_current(project, ItemStatus.REFUSED)


def _queue_current(project: Project, status: ItemStatus) -> int:
    """Queue predictions by the current version (none without one) for the project's items in `status`."""
    if project.current_version_id is None:
        return 0
    ids = list(_in_status(project, status).values_list("id", flat=True))
    enqueue_predictions(project, ids)
    return len(ids)


def resend_lost_predictions(now) -> int:
    """Queue again the predictions of each project whose waiting items look lost; returns how many projects.

    A long queue of predictions and a lost message both leave items waiting, and sending a long queue again
    would predict most items twice. So a project's waiting items are sent again only when the workers are
    idle: its oldest item has waited past `STALE_WAIT`, no prediction at all was made in that time, and the
    queue that prediction tasks go to holds no message (a worker that is down leaves messages there, so the
    sweep adds no more while it is down). Each project is sent again at most once per `STALE_WAIT`
    (`Project.predictions_resent_at`, moved by a conditional update first, so two sweeps at once send once).
    """
    latest = Prediction.objects.order_by("-id").values_list("created_at", flat=True).first()
    if latest is not None and now - latest < STALE_WAIT:
        return 0
    due = Q(predictions_resent_at__isnull=True) | Q(predictions_resent_at__lte=now - STALE_WAIT)
    projects = [project for project in Project.objects.filter(due, current_version__isnull=False).order_by("pk")
                if waited_too_long(project)]
    if not projects or broker.waiting_messages(predict_items) != 0:
        return 0
    resent = 0
    for project in projects:
        if Project.objects.filter(due, pk=project.pk).update(predictions_resent_at=now):
            count = requeue_waiting(project)
            logger.warning("project %s: %s items still wait for a prediction while the workers are idle: their "
                           "predictions were queued again", project.slug, count)
            resent += 1
    return resent


def _in_status(project: Project, status: ItemStatus):
    return Item.objects.filter(project=project, status=status).order_by("id")


@shared_task(time_limit=1800, soft_time_limit=1700, **RETRY)
def predict_items(project_id: int, item_ids: list[int], version_id: int | None = None) -> int:
    """Predict `item_ids` with the project's current version (or `version_id`) inside `tensorcode.trace()`.

    Stores a Prediction (receipt, trace summary, raw and calibrated confidence) per item and makes pending and
    refused items ready. Items that already have a prediction from that version are skipped, so the task is safe
    to run twice. A pending item whose inputs the model refuses becomes REFUSED with the model's reason: the
    sweep does not send it again, and the next promoted version tries it. Returns the number of predictions made.
    """
    project = Project.objects.filter(pk=project_id).select_related("current_version").first()
    if project is None:
        return 0
    version = (
        ModelVersion.objects.filter(pk=version_id, project=project).first() if version_id else project.current_version
    )
    if version is None:
        logger.warning("project %s has no model version to predict with", project.slug)
        return 0
    items = list(
        Item.objects.filter(project=project, pk__in=item_ids).exclude(predictions__model_version=version).order_by("id")
    )
    if not items:
        return 0
    results = _predict(version, items)
    made = 0
    with transaction.atomic():
        # Locked and read again: an item deleted meanwhile, or one whose inputs an admin fixed (which moves its
        # created_at, `imports.fix_refused`), gets nothing from this run, made from what it was; the task the
        # fix queued predicts the new inputs.
        now = dict(Item.objects.select_for_update().filter(pk__in=[item.pk for item in items]).order_by("pk")
                   .values_list("pk", "created_at"))
        for item, result in zip(items, results, strict=True):
            if now.get(item.pk) != item.created_at:
                continue
            if isinstance(result, str):
                # Only an item that no version predicted (its reason from the latest version to refuse it): one
                # refused by a newer version keeps its prediction.
                named = f"version {version.pk}" + (f" ({version.label})" if version.label else "")
                refusal = f"{named}: {result}"[:REFUSAL_LENGTH]
                Item.objects.filter(pk=item.pk, status__in=[ItemStatus.PENDING, ItemStatus.REFUSED]).update(
                    status=ItemStatus.REFUSED, refusal=refusal)
                continue
            prediction = Prediction.objects.create(
                item=item, model_version=version, receipt=result["receipt"], trace=result["trace"],
                confidence=result["confidence"], calibrated_confidence=result.get("calibrated_confidence"),
            )
            # The queue reads Item.confidence (one indexed query): calibrated when the model has a calibration.
            fields = {"prediction": prediction, "confidence": prediction.queue_confidence}
            Item.objects.filter(pk=item.pk).update(**fields)
            Item.objects.filter(pk=item.pk, status__in=[ItemStatus.PENDING, ItemStatus.REFUSED]).update(
                status=ItemStatus.READY, refusal="")
            made += 1
    return made


def _predict(version: ModelVersion, items: list[Item]) -> list[dict | str]:
    """One result per item: its prediction, or why the model refused (or failed on) its inputs.

    The model is loaded first, on its own: a version that cannot be loaded (its files out of reach, say) fails
    the task, which is sent again, instead of marking every item refused.
    """
    tooling.load_version(version)
    return _predict_each(version, items)


def _predict_each(version: ModelVersion, items: list[Item]) -> list[dict | str]:
    try:
        return tooling.predict_batch(version, [item.inputs for item in items])
    except SoftTimeLimitExceeded:
        raise
    except Exception as exc:
        if len(items) == 1:
            return [_refusal(items[0], exc)]
    # One bad input fails the whole batch: predict one by one so the others still get their predictions.
    return [result for item in items for result in _predict_each(version, [item])]


def _refusal(item: Item, exc: Exception) -> str:
    """The reason an item's inputs got no prediction: the tool's own check (a `ValueError` naming the field), or
    an error of the model on them, which would otherwise fail its task each time the sweep sent it again."""
    if isinstance(exc, ValueError):
        # The batch of one names its item "inputs[0]"; the item page shows the inputs as "inputs".
        reason = re.sub(r"^inputs\[0\]", "inputs", str(exc))
        logger.warning("item %s: the model refused its inputs: %s", item.pk, reason)
        return reason
    logger.exception("item %s: the model failed on its inputs", item.pk)
    return f"the model failed on these inputs ({type(exc).__name__}: {exc})"


@shared_task(time_limit=Export.TIME_LIMIT.total_seconds(), soft_time_limit=Export.TIME_LIMIT.total_seconds() - 100,
             **RETRY)
def run_export(export_id: int) -> str:
    """Write an export's files (see `annotate.export.run`); returns its final state."""
    from annotate import export as exports

    export = Export.objects.filter(pk=export_id).first()
    if export is None:
        return "missing"
    return exports.run(export).state


@contextmanager
def _refused_if_it_fails(model: type[Upload], pk: int):
    """Record a check that fails unexpectedly as the upload's refusal, with its traceback in the worker's log.

    Left PENDING, the sweep would send it again every `STALE_WAIT` to fail the same way, and its page would
    ask whether a worker is running. The database briefly unreachable is raised, for `RETRY`.
    """
    try:
        yield
    except (OperationalError, InterfaceError):
        raise
    except Exception as exc:
        logger.exception("%s %s: the check failed", model._meta.verbose_name, pk)
        _refuse(model, pk, f"the check failed ({type(exc).__name__}) and kept nothing; upload the file again, and "
                           "if it fails again, ask an administrator to look at the worker's log")


def _refuse(model: type[Upload], pk: int, reason: str) -> None:
    """`Upload.refuse` of row `pk`, if it is still pending."""
    row = model.objects.filter(pk=pk, state=UploadState.PENDING).first()
    if row is not None:
        row.refuse(reason)


@shared_task(time_limit=IMPORT_TIME_LIMIT, soft_time_limit=IMPORT_TIME_LIMIT - 60, **RETRY)
def import_item_file(import_id: int) -> str:
    """Import an uploaded JSONL file whole, or record its problems (`annotate.imports.run_import`); its state.
    Safe to run twice: a finished import is left alone, and one cut short committed nothing."""
    from annotate import imports

    with _refused_if_it_fails(ItemImport, import_id):
        try:
            return imports.run_import(import_id)
        except SoftTimeLimitExceeded:
            minutes = IMPORT_TIME_LIMIT // 60
            _refuse(ItemImport, import_id, f"file: importing took longer than {minutes} minutes and was stopped; "
                                           "nothing was imported. Split it into smaller files.")
    return UploadState.REFUSED


@shared_task(time_limit=DELETION_TIME_LIMIT, soft_time_limit=DELETION_TIME_LIMIT - 60, **RETRY)
def delete_matching_items(deletion_id: int) -> str:
    """Delete the items an admin confirmed on the delete page (`annotate.deletion.run_deletion`); its state.
    Safe to run twice: a finished deletion is left alone, and one cut short goes on where its last batch ended."""
    from annotate import deletion

    try:
        return deletion.run_deletion(deletion_id)
    except (OperationalError, InterfaceError):
        raise
    except SoftTimeLimitExceeded:
        reason = (f"Stopped after {DELETION_TIME_LIMIT // 60} minutes; what it deleted is counted here. Delete the "
                  "rest from the item list again.")
    except Exception as exc:
        logger.exception("item deletion %s failed", deletion_id)
        reason = (f"The deletion failed ({type(exc).__name__}); what it deleted is counted here. Delete the rest "
                  "from the item list again, and if it fails again, ask an administrator to look at the worker's "
                  "log.")
    ItemDeletion.objects.filter(pk=deletion_id, state__in=[DeletionState.PENDING, DeletionState.RUNNING]).update(
        state=DeletionState.FAILED, reason=reason, finished_at=timezone.now())
    return DeletionState.FAILED


@shared_task(time_limit=600, soft_time_limit=570, **RETRY)
def check_model_upload(upload_id: int) -> str:
    """Load an uploaded `save_pretrained` tool against the project's tool and mode; register it as a version
    (ACCEPTED) or record why not (REFUSED). Safe to run twice (`annotate.versions.check`)."""
    from annotate import versions

    with _refused_if_it_fails(ModelUpload, upload_id):
        return versions.check(upload_id)
    return UploadState.REFUSED


@shared_task(time_limit=600, soft_time_limit=570, **RETRY)
def check_experience_upload(upload_id: int) -> str:
    """Load an uploaded experience file with the library's safe loader against the project's tool.

    ACCEPTED with a summary when its calls bind to the tool; REFUSED with the reason otherwise (and the file
    removed). Safe to run twice: the row is locked while it is checked, and a checked upload is left alone.
    """
    with _refused_if_it_fails(ExperienceUpload, upload_id):
        return _check_experience_upload(upload_id)
    return UploadState.REFUSED


def _check_experience_upload(upload_id: int) -> str:
    with transaction.atomic():
        upload = (ExperienceUpload.objects.select_for_update(of=("self",))
                  .select_related("project__current_version").filter(pk=upload_id).first())
        if upload is None or upload.state != UploadState.PENDING:
            return upload.state if upload else "missing"
        project = upload.project
        try:
            if project.current_version is None:
                raise ValueError("refused: the project has no model version to bind the file's calls to")
            upload.summary = tooling.check_experience_file(project.current_version, upload.path)
        except ValueError as exc:
            upload.state, upload.reason = UploadState.REFUSED, str(exc)[:2000]
        else:
            upload.state = UploadState.ACCEPTED
        upload.checked_at = timezone.now()
        upload.save(update_fields=["state", "reason", "summary", "checked_at"])
    if upload.state == UploadState.REFUSED:
        upload.path.unlink(missing_ok=True)  # once the refusal is recorded: a check cut short keeps the file
    return upload.state


def _resendable(now) -> list[tuple[type[Queued], Q, Task]]:
    """Each kind of queued work, which of its rows wait for a worker, and the task that does it."""
    pending = Q(state=UploadState.PENDING)
    stalled = Q(state=ExportState.RUNNING) & (Q(heartbeat_at__lt=now - Export.LEASE) | Q(heartbeat_at__isnull=True))
    silent = Q(state=DeletionState.RUNNING) & Q(heartbeat_at__lt=now - ItemDeletion.LEASE)
    return [(ItemImport, pending, import_item_file), (ModelUpload, pending, check_model_upload),
            (ExperienceUpload, pending, check_experience_upload), (Export, pending | stalled, run_export),
            (ItemDeletion, pending | silent, delete_matching_items)]


@shared_task(**RETRY)
def resend_stale_work() -> int:
    """Send again the task of every upload or export that waits `STALE_WAIT` after it was last sent, and the
    predictions of projects whose items wait while the workers are idle (`resend_lost_predictions`); how many.

    Run by `celery beat`. A message lost on the way (a broker restarted without persistence, a web process
    killed between its commit and the send) would leave its row waiting for good, and an export whose worker
    was killed stays RUNNING with a heartbeat that no longer moves. Every one of these tasks leaves finished
    work alone (and an export that a live run holds), so a message that was only slow costs a run that does
    nothing. Each row is sent at most once per `STALE_WAIT`: `sent_at` moves first, by a conditional update,
    so two sweeps at once send it once.
    """
    now = timezone.now()
    sent = resend_lost_predictions(now)
    for model, waiting, task in _resendable(now):
        stale = model.objects.filter(waiting, sent_at__lte=now - STALE_WAIT)
        for pk in stale.order_by("pk").values_list("pk", flat=True):
            if stale.filter(pk=pk).update(sent_at=now):
                logger.warning("%s %s still waits for a worker: its task was sent again", model._meta.verbose_name, pk)
                task.delay(pk)
                sent += 1
    return sent
