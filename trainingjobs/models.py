"""Fine-tune job rows: the source of truth for a job's state (PENDING -> RUNNING -> final).

A broker message only carries a job's id. Whoever trains a job first takes its lease on this row (a row lock
to take it, then a heartbeat that pushes `lease_expires_at` forward); a worker that finds a live lease held by
someone else backs off, and a sweep re-queues RUNNING jobs whose heartbeat stopped.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from annotate import storage

LOG_TAIL_LINES = 200
LOWER_IS_BETTER = {"mse"}  # held-out metrics (training.evaluate) where a smaller value is the better one
LOG_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) ", re.MULTILINE)


class JobState(models.TextChoices):
    PENDING = "PENDING", "Pending"
    RUNNING = "RUNNING", "Running"
    SUCCEEDED = "SUCCEEDED", "Succeeded"
    FAILED = "FAILED", "Failed"
    CANCELLED = "CANCELLED", "Cancelled"


FINAL_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
ACTIVE_STATES = (JobState.PENDING, JobState.RUNNING)

# What a job froze at launch, one id per record (100,000 reviewed answers are a 0.9 MB JSON list, 7 ms to decode),
# which only its worker and its own page's counts read: lists of jobs and the polled status leave them unread.
FROZEN_FIELDS = ("train_records", "held_out_records", "train_adjudications", "held_out_adjudications",
                 "train_uploads")


class TrainingJobQuerySet(models.QuerySet):
    def listed(self) -> TrainingJobQuerySet:
        """The jobs without the record ids they froze or their log: what a row in a list of jobs shows."""
        return self.defer(*FROZEN_FIELDS, "log")

    def active_first(self) -> TrainingJobQuerySet:
        """Running jobs first, then queued ones in the order workers take them (by when they were queued), then
        the rest, newest first."""
        rank = models.Case(models.When(state=JobState.RUNNING, then=0), models.When(state=JobState.PENDING, then=1),
                           default=2)
        queued = models.Case(models.When(state__in=ACTIVE_STATES, then=models.F("queued_at")))
        return self.order_by(rank, queued.asc(nulls_last=True), "-created_at", "-id")


class Optimizer(models.TextChoices):
    SGD = "sgd", "SGD"
    ADAM = "adam", "Adam"
    ADAMW = "adamw", "AdamW"


class DevicePreference(models.TextChoices):
    AUTO = "auto", "Auto (CUDA when the worker has it)"
    CPU = "cpu", "CPU"
    CUDA = "cuda", "CUDA"


class TrainingJob(models.Model):
    """One fine-tune of a project's model version on a frozen snapshot of its reviewed records."""

    project = models.ForeignKey("annotate.Project", on_delete=models.CASCADE, related_name="training_jobs")
    base_version = models.ForeignKey(
        "annotate.ModelVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs_based_on"
    )
    # Kept so that a job whose base version was deleted can still say which one it was.
    base_version_label = models.CharField(max_length=200, blank=True)
    result_version = models.ForeignKey(
        "annotate.ModelVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs_producing"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    # -- settings (fixed at launch; "continue" raises `epochs`) ---------------------------------------------------
    filters = models.JSONField(default=dict, blank=True, help_text="Which reviewed records, as in an export.")
    held_out_fraction = models.FloatField(
        default=0.2, validators=[MinValueValidator(0.0), MaxValueValidator(0.9)],
        help_text="Share of reviewed items kept out of training to evaluate base and new versions.",
    )
    minibatch_size = models.PositiveIntegerField(default=32, validators=[MinValueValidator(1)])
    optimizer = models.CharField(max_length=8, choices=Optimizer.choices, default=Optimizer.ADAM)
    lr = models.FloatField(default=0.01, validators=[MinValueValidator(1e-8), MaxValueValidator(10.0)])
    epochs = models.PositiveIntegerField(default=20, validators=[MinValueValidator(1), MaxValueValidator(10_000)])
    seed = models.PositiveIntegerField(default=0)
    device = models.CharField(max_length=8, choices=DevicePreference.choices, default=DevicePreference.AUTO)
    checkpoint_interval = models.PositiveIntegerField(
        default=50, validators=[MinValueValidator(1)], help_text="Steps between checkpoints."
    )

    # -- state ---------------------------------------------------------------------------------------------------
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.PENDING)
    error = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    first_step_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    # -- the worker's lease and report -----------------------------------------------------------------------------
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0, help_text="Times a worker took the lease.")
    worker_host = models.CharField(max_length=200, blank=True)
    device_used = models.CharField(max_length=32, blank=True)
    step = models.PositiveIntegerField(default=0)
    total_steps = models.PositiveIntegerField(default=0)
    epoch = models.PositiveIntegerField(default=0)
    # The step and time at which the current attempt started: the ETA is measured on this attempt only.
    attempt_step = models.PositiveIntegerField(default=0)
    attempt_started_at = models.DateTimeField(null=True, blank=True)
    # The data, frozen at launch: ids of the answer revisions (immutable rows) trained on and held out, and for
    # adjudicated items (which contribute their adjudicated target instead of their answers) the ids of the
    # adjudication revisions current at launch, so that adjudicating again later changes no job.
    train_records = models.JSONField(default=list, blank=True)
    held_out_records = models.JSONField(default=list, blank=True)
    train_adjudications = models.JSONField(default=list, blank=True)
    held_out_adjudications = models.JSONField(default=list, blank=True)
    # Accepted experience uploads the admin chose to include, frozen at launch: their ids, and the supervision
    # records they held then. Training data only, never held out; the worker copies the files into the train
    # snapshot, so deleting an upload or accepting new ones later changes no job.
    train_uploads = models.JSONField(default=list, blank=True)
    upload_records = models.PositiveIntegerField(default=0)
    metrics = models.JSONField(default=dict, blank=True)
    log = models.TextField(blank=True, help_text=f"The last {LOG_TAIL_LINES} lines of the job's log.")

    objects = TrainingJobQuerySet.as_manager()

    @property
    def attempt_started(self):
        """When a worker took the job since it was last queued; None while it waits. After a resume the first
        attempt's start (`started_at`) shown beside the new queueing time read as earlier than it."""
        started = self.attempt_started_at
        return started if started and (self.queued_at is None or started >= self.queued_at) else None

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state", "lease_expires_at"], name="job_state_lease")]

    def __str__(self) -> str:
        return f"training job {self.pk} of {self.project}"

    # -- derived -------------------------------------------------------------------------------------------------
    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    def in_use(self) -> list[str]:
        """Why the job cannot be deleted now (`annotate.deletion.delete_record`): a worker may run it."""
        return [] if self.is_final else [f"it is {self.get_state_display().lower()} (cancel it first)"]

    @property
    def train_count(self) -> int:
        """Records trained on: reviewed answers and adjudicated targets."""
        return len(self.train_records) + len(self.train_adjudications)

    @property
    def upload_count(self) -> int:
        """Experience upload files trained on (each is one minibatch)."""
        return len(self.train_uploads)

    @property
    def uploads_text(self) -> str:
        """"2 experience upload files with 9 supervision records", for the page and the log."""
        files, records = self.upload_count, self.upload_records
        return (f"{files} experience upload file{'s' if files != 1 else ''} "
                f"with {records} supervision record{'s' if records != 1 else ''}")

    @property
    def held_out_count(self) -> int:
        return len(self.held_out_records) + len(self.held_out_adjudications)

    @property
    def directory(self) -> Path:
        """`jobs/<id>/` under the artifact root: the data snapshot and the checkpoint."""
        return storage.artifact_dir("jobs", self.pk, create=False)

    @property
    def checkpoint_dir(self) -> Path:
        return self.directory / "checkpoint"

    @property
    def percent(self) -> int:
        if self.state == JobState.SUCCEEDED:
            return 100
        return min(100, int(100 * self.step / self.total_steps)) if self.total_steps else 0

    @property
    def eta_seconds(self) -> int | None:
        """Seconds left at this attempt's pace; None before it has made a step."""
        if self.state != JobState.RUNNING or not self.attempt_started_at or self.step <= self.attempt_step:
            return None
        elapsed = (timezone.now() - self.attempt_started_at).total_seconds()
        per_step = elapsed / (self.step - self.attempt_step)
        return math.ceil(per_step * max(0, self.total_steps - self.step))

    @property
    def eta(self) -> timedelta | None:
        seconds = self.eta_seconds
        return None if seconds is None else timedelta(seconds=seconds)

    @property
    def can_cancel(self) -> bool:
        return self.state in (JobState.PENDING, JobState.RUNNING) and not self.cancel_requested

    @property
    def can_resume(self) -> bool:
        return self.state in (JobState.CANCELLED, JobState.FAILED)

    @property
    def can_continue(self) -> bool:
        return self.state == JobState.SUCCEEDED

    def lease_is_live(self, now=None) -> bool:
        return bool(self.lease_owner) and self.lease_expires_at is not None and (
            self.lease_expires_at > (now or timezone.now())
        )

    @property
    def filters_text(self) -> str:
        """The launch's filters in words, for the job page ("" when it took every reviewed answer)."""
        filters, parts = self.filters or {}, []
        if filters.get("reviewers"):
            parts.append("answers by " + ", ".join(filters["reviewers"]))
        if filters.get("agreed_only"):
            parts.append("open disagreements left out")
        parts += [f"{key} {value}" for key, value in filters.items() if key not in ("reviewers", "agreed_only")]
        return "; ".join(parts)

    @property
    def held_out_verdict(self) -> dict:
        """How the new version did against the base on the held-out records: `{"metric", "loss"}`, each "better",
        "worse" or "" (equal, or nothing to compare). The metric's direction is the tool's: `mse` is better lower,
        every other metric (top-1, accuracy, recall@1, exact match) higher."""
        base, new = (self.metrics or {}).get("base"), (self.metrics or {}).get("new")
        if not base or not new:
            return {"metric": "", "loss": ""}
        lower_is_better = new.get("metric") in LOWER_IS_BETTER
        return {"metric": _verdict(base.get("value"), new.get("value"), lower_is_better=lower_is_better),
                "loss": _verdict(base.get("loss"), new.get("loss"), lower_is_better=True)}

    @property
    def log_for_display(self) -> str:
        """The log with each line's UTC stamp as a clock time of the active time zone (the viewer's), as the
        rest of the job page reads. Lines written before stamps carried their date keep their UTC time."""
        return LOG_STAMP.sub(
            lambda m: timezone.localtime(datetime.fromisoformat(m[1])).strftime("%H:%M:%S "), self.log)

    @staticmethod
    def appended_log(log: str, *lines: str) -> str:
        """`log` with `lines` added, each stamped with its UTC time, cut to the last LOG_TAIL_LINES lines."""
        stamp = timezone.now().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        kept = log.splitlines() + [f"{stamp} {line}" for line in lines]
        return "\n".join(kept[-LOG_TAIL_LINES:])


def _verdict(base, new, *, lower_is_better: bool) -> str:
    if not isinstance(base, (int, float)) or not isinstance(new, (int, float)) or base == new:
        return ""
    return "better" if (new < base) == lower_is_better else "worse"


class LossPoint(models.Model):
    """The training loss after one optimizer step. One row per (job, step): a replayed step overwrites it."""

    job = models.ForeignKey(TrainingJob, on_delete=models.CASCADE, related_name="loss_points")
    step = models.PositiveIntegerField()
    epoch = models.PositiveIntegerField()
    loss = models.FloatField()

    class Meta:
        ordering = ["job", "step"]
        constraints = [models.UniqueConstraint(fields=["job", "step"], name="losspoint_unique_step")]

    def __str__(self) -> str:
        return f"job {self.job_id} step {self.step}: {self.loss:.4g}"
