"""The worker side of a job: lease it, train it with the library's resumable run, then publish the result.

`train(job_id, owner)` is what the `gpu` queue's task calls. It is safe to call any number of times, from any
number of workers: only the lease holder trains, a finished job is left alone, and a job that stopped midway
resumes from its checkpoint (at most `checkpoint_interval` steps are redone, with bit-identical results on CPU).
"""

from __future__ import annotations

import copy
import logging
import os
import time
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from trainingjobs import lease, snapshot
from trainingjobs.lease import TRANSIENT_DB_ERRORS, LeaseLost
from trainingjobs.models import JobState, LossPoint, TrainingJob

logger = logging.getLogger(__name__)

# Progress and loss points are written at most this often (plus once at the end): a step can take a millisecond.
PROGRESS_SECONDS = float(os.environ.get("TC_JOB_PROGRESS_SECONDS", 0.5))


class JobFailed(Exception):
    """A reason the job cannot succeed as configured; it becomes the job's error, shown on its page."""


def train(job_id: int, owner: str) -> str:
    """Ensure job `job_id` is trained if it needs to be; returns what happened, for the worker's log."""
    job = lease.with_db_retry(lambda: lease.acquire(job_id, owner))
    if job is None:
        return "skipped"
    reporter = None
    try:
        base = _base_version(job)
        files = snapshot.ensure(job, base, "train")
        tool = _base_tool(base)
        device = _device(job.device)
        uploads = f", including {job.uploads_text}" if job.train_uploads else ""
        _note(job.pk, owner, device_used=device, total_steps=job.epochs * len(files),
              log=f"training {len(files)} minibatches x {job.epochs} epochs on {device}{uploads}")
        reporter = _Reporter(job.pk, owner)
        result = _run(job, tool, files, device, reporter)
        if reporter.stalled:
            return "stalled"  # the lease runs out and the sweep re-queues the job
        # Points throttled in memory when an earlier worker died are not in the table; the run's history has them.
        reporter.backfill(result.losses, steps_per_epoch=len(files))
        reporter.flush(force=True)
        if reporter.lost:
            return "lease lost"
        if not result.completed:
            lease.release(job.pk, owner, JobState.CANCELLED, log=f"cancelled at step {reporter.step}; checkpoint kept")
            return "cancelled"
        _finish(job.pk, owner, tool)
        return "succeeded"
    except LeaseLost as exc:
        logger.info("job %s: %s", job_id, exc)
        return "lease lost"
    except TRANSIENT_DB_ERRORS:
        raise  # the task retries; the lease expires or is taken again by the same owner
    except JobFailed as exc:
        lease.release(job_id, owner, JobState.FAILED, error=str(exc), log=f"failed: {exc}")
        return "failed"
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"
        lease.release(job_id, owner, JobState.FAILED, error=reason, log=f"failed: {reason}")
        raise


def _run(job: TrainingJob, tool, files: list, device: str, reporter: _Reporter):
    from tensorcode import training

    checkpoint = job.checkpoint_dir
    resuming = (checkpoint / "training.json").exists()
    if resuming:
        _note(job.pk, reporter.owner, log=f"resuming from the checkpoint in jobs/{job.pk}/checkpoint")
    try:
        return training.run(
            tool,
            [str(path) for path in files],
            epochs=job.epochs,
            checkpoint_dir=str(checkpoint),
            interval=job.checkpoint_interval,
            seed=job.seed,
            shuffle=True,
            optimizer=job.optimizer,
            lr=job.lr,
            device=device,
            callback=reporter,
        )
    except (LeaseLost, *TRANSIENT_DB_ERRORS):
        raise
    except ValueError as exc:
        if resuming and reporter.step == 0:
            raise JobFailed(
                f"cannot resume from the checkpoint in jobs/{job.pk}/checkpoint (kept as it is): {exc}"
            ) from exc
        raise


class _Reporter:
    """The run's per-step callback: buffers loss points, writes them with a heartbeat every PROGRESS_SECONDS.

    Returns True (stop, checkpoint first) when the job was cancelled; raises LeaseLost (stop, no checkpoint) when
    another worker holds the job now. When the database does not answer it retries, then keeps training and tries
    again at the next beat; if the lease would expire before a beat gets through, it stops while the lease is
    still its own, so two workers never train one job at once.
    """

    def __init__(self, job_id: int, owner: str):
        self.job_id = job_id
        self.owner = owner
        self.step = 0
        self.points: list[LossPoint] = []
        self.lost = False  # another worker holds the job now
        self.stalled = False  # the database did not answer for most of the lease: stop while it is still ours
        self.cancelled = False
        self._last_write = 0.0
        self._lease_deadline = time.monotonic() + lease.lease_seconds()
        self._report = None

    def __call__(self, report) -> bool:
        self.step = report.step
        self._report = report
        self.points.append(LossPoint(job_id=self.job_id, step=report.step, epoch=report.epoch, loss=report.loss))
        if time.monotonic() - self._last_write >= min(PROGRESS_SECONDS, lease.heartbeat_seconds()):
            self.flush()
        if self.lost:
            # Raised, not returned: the run then stops without writing the checkpoint that the new holder owns.
            raise LeaseLost(f"job {self.job_id}: {self.owner} lost its lease at step {report.step}")
        return self.stalled or self.cancelled

    def flush(self, *, force: bool = False) -> None:
        if self.lost:
            return
        try:
            lease.with_db_retry(self._write, attempts=6 if force else 3)
        except LeaseLost as exc:
            logger.warning("job %s: %s; stopping", self.job_id, exc)
            self.lost = True
        except TRANSIENT_DB_ERRORS as exc:
            if force:
                raise
            margin = lease.heartbeat_seconds()
            logger.warning("job %s: heartbeat failed (%s); training on, retrying at the next beat", self.job_id, exc)
            if time.monotonic() > self._lease_deadline - margin:
                logger.warning("job %s: lease about to expire without a heartbeat; stopping", self.job_id)
                self.stalled = True

    def backfill(self, losses: list[float], *, steps_per_epoch: int) -> None:
        """Write the points of `losses` (the whole run's history, from step 1) that the table lacks."""
        have = set(LossPoint.objects.filter(job_id=self.job_id).values_list("step", flat=True))
        have.update(point.step for point in self.points)
        self.points.extend(
            LossPoint(job_id=self.job_id, step=step, epoch=(step - 1) // max(1, steps_per_epoch) + 1, loss=loss)
            for step, loss in enumerate(losses, start=1)
            if step not in have
        )

    def _write(self) -> None:
        started = time.monotonic()
        with transaction.atomic():
            job = lease.locked_if_held(self.job_id, self.owner)
            if self.points:
                # A step redone after resuming from a checkpoint replaces its earlier point.
                LossPoint.objects.bulk_create(
                    self.points, update_conflicts=True, unique_fields=["job", "step"], update_fields=["epoch", "loss"]
                )
            now = timezone.now()
            fields = {"lease_expires_at": now + timedelta(seconds=lease.lease_seconds())}
            if self._report is not None:
                fields.update(step=self._report.step, epoch=self._report.epoch, total_steps=self._report.total)
                if job.first_step_at is None:
                    fields["first_step_at"] = now
            TrainingJob.objects.filter(pk=self.job_id).update(**fields)
            self.cancelled = job.cancel_requested
        self.points = []
        self._last_write = time.monotonic()
        self._lease_deadline = started + lease.lease_seconds()


def _note(job_id: int, owner: str, *, log: str = "", **fields) -> None:
    """Update the held job's fields and append `log`; LeaseLost if it is no longer held."""

    def write():
        with transaction.atomic():
            job = lease.locked_if_held(job_id, owner)
            for name, value in fields.items():
                setattr(job, name, value)
            if log:
                job.log = job.appended_log(job.log, log)
            job.save(update_fields=[*fields, "log"])

    lease.with_db_retry(write)


def _base_version(job: TrainingJob):
    if job.base_version is None:
        label = f" ({job.base_version_label})" if job.base_version_label else ""
        raise JobFailed(
            f"the base model version{label} was deleted after the job was launched; "
            "launch a new job from an existing version"
        )
    return job.base_version


def _base_tool(version):
    """A private copy of the base version's tool (the loader caches tools; training must not touch the cache)."""
    from annotate import tooling

    try:
        return copy.deepcopy(tooling.load_version(version))
    except (OSError, ValueError) as exc:
        raise JobFailed(f"cannot load the base model version {version.pk} ({version}): {exc}") from exc


def _device(preference: str) -> str:
    import torch

    if preference == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if preference == "cuda" and not torch.cuda.is_available():
        raise JobFailed("the job asks for CUDA but this worker has no CUDA device; relaunch with device auto or cpu")
    return preference


def _finish(job_id: int, owner: str, tool) -> None:
    """Publish the trained tool as a new model version and evaluate base and new on the held-out records."""
    from trainingjobs import evaluation

    job = TrainingJob.objects.select_related("project", "base_version").get(pk=job_id)
    tool = tool.to("cpu").eval()
    calibration = evaluation.refit_calibration(job, tool)
    version = _result_version(job, owner)
    if not version.is_materialized:
        tool.save_pretrained(version.path)
    held_out = snapshot.ensure(job, version, "held_out") if job.held_out_count else []
    metrics = evaluation.compare(job, version, held_out)
    if calibration:
        metrics["calibration"] = calibration
    with transaction.atomic():
        held = lease.locked_if_held(job_id, owner)
        version.metrics = {**version.metrics, "held_out": metrics.get("new")}
        version.save(update_fields=["metrics"])
        held.metrics = metrics
        held.state = JobState.SUCCEEDED
        held.finished_at = timezone.now()
        held.lease_owner = ""
        held.lease_expires_at = None
        held.step = held.total_steps
        held.log = held.appended_log(held.log, f"succeeded: new model version {version.pk}")
        held.save()


def trained_label(job_id: int, epochs: int, base) -> str:
    """The name of the version a job trains: "job 7: 10 epochs from <base>".

    A base that a job trained, or whose own name would not fit, is named "version <id>": the names nested one
    generation per job ("job 9: ... from job 8: ... from ...") until one outgrew the label column, and the job
    failed after its training was done."""
    from django.template.defaultfilters import pluralize

    from annotate.models import ModelVersion

    head = f"job {job_id}: {epochs} epoch{pluralize(epochs)} from "
    if base is None:
        return head + "a deleted version"
    origin = str(base)
    if base.created_by_job_id is not None or len(head + origin) > ModelVersion._meta.get_field("label").max_length:
        origin = f"version {base.pk}"
    return head + origin


def _result_version(job: TrainingJob, owner: str):
    """The version this run publishes: made once per run to success (a rerun after a crash reuses it).

    "Continue" trains a succeeded job for more epochs: that makes a new version and keeps the previous one.
    """
    from annotate.models import ModelVersion

    with transaction.atomic():
        held = lease.locked_if_held(job.pk, owner)
        version = held.result_version
        if version is not None and version.metrics.get("epochs") == held.epochs:
            return version
        base = job.base_version
        version = ModelVersion.objects.allocate(
            job.project,
            label=trained_label(job.pk, held.epochs, base),
            trained=True,
            parent=base,
            created_by_job=job,
            metrics={"job": job.pk, "epochs": held.epochs},
        )
        held.result_version = version
        held.save(update_fields=["result_version"])
        return version
