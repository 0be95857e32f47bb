"""The reviewer app's data: projects, members, model versions, items, predictions, answers, tokens, exports.

The database row is the truth (an item's status and claims, an answer and its revisions, an export's state);
brokers carry only ids. Files live under the artifact root, in directories named by ids (`annotate.storage`).
"""

from __future__ import annotations

import hashlib
import secrets
import shutil
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models, transaction
from django.db.models import F, Q
from django.utils import timezone

from annotate import guidelines, storage


class Role(models.TextChoices):
    REVIEWER = "reviewer", "Reviewer"
    ADMIN = "admin", "Project admin"


class LockingQuerySet(models.QuerySet):
    def lock(self, pk: int, *, no_key: bool = False) -> bool:
        """Lock row `pk` until the transaction ends; False if it is gone. What a deletion (FOR UPDATE) takes before
        it reads, and (`no_key`: new rows may still point at it) what work that will point new rows at it takes
        first, so that it waits for a deletion in flight and then finds the row gone instead of failing on its
        foreign key."""
        return bool(list(self.select_for_update(no_key=no_key).filter(pk=pk).values_list("pk", flat=True)))


class ProjectQuerySet(LockingQuerySet):
    def for_user(self, user) -> ProjectQuerySet:
        """Projects `user` may see: all for staff, else those they are a member of."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(memberships__user=user)

    def administered_by(self, user) -> ProjectQuerySet:
        """Projects `user` may configure, import into and export from: all for staff, else admin memberships."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(memberships__user=user, memberships__role=Role.ADMIN)


MAX_LEASE_SECONDS = 7 * 24 * 3600
# Addresses under projects/ that are not a project's: a project of that slug could never be opened.
RESERVED_SLUGS = frozenset({"new"})


class Project(models.Model):
    """One tool kind and mode, the model version that predicts for it, and the items reviewers label."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    tool = models.CharField(max_length=32, help_text="Registered tool name (tensorcode.tools.names()).")
    mode = models.CharField(max_length=32, help_text="One of the tool's modes (tensorcode.tools.MODES).")
    guidelines = models.TextField(blank=True)
    configuration = models.JSONField(default=dict, blank=True, help_text="The tool's configuration.")
    current_version = models.ForeignKey(
        "ModelVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    overlap = models.PositiveIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="How many reviewers label each item. Raised, finished items go back to the queue for the answers "
                  "they lack (adjudicated ones stay finished); lowered, items with enough answers are finished.",
    )
    lease_seconds = models.PositiveIntegerField(  # at most a week: a longer one overflowed the claim's expiry
        default=600, validators=[MinValueValidator(10), MaxValueValidator(MAX_LEASE_SECONDS)],
        help_text="How long a claim on an item lasts.",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    predictions_resent_at = models.DateTimeField(
        null=True, blank=True, help_text="When the sweep last queued again the predictions of items waiting for one."
    )

    objects = ProjectQuerySet.as_manager()

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name or self.slug

    @property
    def guidelines_html(self):
        """The guidelines rendered from Markdown (`annotate.guidelines`)."""
        return guidelines.to_html(self.guidelines)

    def item_counts(self) -> dict[str, int]:
        """The project's items by status (statuses without items left out), from the (project, status) index."""
        return dict(self.items.order_by().values_list("status").annotate(n=models.Count("id")))

    def clean(self) -> None:
        from annotate import tooling

        try:
            tooling.check_tool_mode(self.tool, self.mode)
        except ValueError as exc:
            raise ValidationError({"mode": str(exc)}) from exc
        errors = {}
        if self.slug in RESERVED_SLUGS:
            errors["slug"] = f"{self.slug!r} is part of the site's addresses (projects/{self.slug}/); choose another."
        try:  # every submit, import and model of the project reads it: Django's admin checks it as the site does
            tooling.check_configuration(self.tool, self.mode, self.configuration)
        except (ValueError, TypeError) as exc:
            errors["configuration"] = str(exc)
        if self.pk and self.overlap:
            most = self.items.aggregate(most=models.Max("final_answers"))["most"] or 0
            if self.overlap < most:
                errors["overlap"] = f"Some items already have {most} answers; the overlap cannot be lower than that."
        if errors:
            raise ValidationError(errors)

    def role_of(self, user) -> str | None:
        """"admin" | "reviewer" | None for `user` in this project; staff count as admin.

        Remembered on this instance (one query per user, not one per permission check): a request's several
        checks then cost nothing. Saving or deleting a membership through this instance forgets it.
        """
        if not getattr(user, "is_authenticated", False):
            return None
        if user.is_staff:
            return Role.ADMIN.value
        roles = self.__dict__.setdefault("_roles", {})
        if user.pk not in roles:
            roles[user.pk] = self.memberships.filter(user=user).values_list("role", flat=True).first()
        return roles[user.pk]

    def remember_role(self, user, role: str | None) -> None:
        """Record `user`'s role, already read with the project (`access.member_project`), for `role_of`."""
        self.__dict__.setdefault("_roles", {})[user.pk] = role

    def forget_roles(self) -> None:
        self.__dict__.pop("_roles", None)

    def is_admin(self, user) -> bool:
        return self.role_of(user) == Role.ADMIN

    def is_member(self, user) -> bool:
        """Whether `user` may review in this project (reviewers, admins and staff)."""
        return self.role_of(user) is not None

    def answered_by(self):
        """The users with an answer here (members or not): one probe of `answer_latest_final` per user, not a
        DISTINCT over every answer."""
        from django.contrib.auth import get_user_model

        answers = Answer.objects.filter(reviewer=models.OuterRef("pk"), project=self)
        return get_user_model().objects.filter(models.Exists(answers))

    def unfinished_training_jobs(self) -> list:
        """The project's waiting or running training jobs, oldest first (none without the jobs app): work that
        still reads the project's uploads and writes into it."""
        from django.apps import apps

        if not apps.is_installed("trainingjobs"):
            return []
        jobs = apps.get_model("trainingjobs", "TrainingJob").objects.filter(
            project=self, state__in=["PENDING", "RUNNING"])
        return list(jobs.order_by("pk").only("pk", "state", "train_uploads"))

    def source_for(self, item_id: int, user) -> str:
        """Provenance of a review: `review:<project>/<item>/<reviewer>`."""
        return f"review:{self.slug}/{item_id}/{user.get_username()}"

    def adjudication_source_for(self, item_id: int, user) -> str:
        """Provenance of an adjudicated target: `adjudication:<project>/<item>/<admin>`."""
        return f"adjudication:{self.slug}/{item_id}/{user.get_username()}"


class Membership(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.REVIEWER)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="membership_unique_user")]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} ({self.role})"

    def save(self, *args, **kwargs):
        super().save(*args, **kwargs)
        self.project.forget_roles()

    def delete(self, *args, **kwargs):
        """Remove the member; their claims in the project are released at once (their answers are kept)."""
        from annotate import hotpath, queue

        with transaction.atomic():
            hotpath.lock_account(self.user_id)  # a claim in flight waits for this and is refused, or is released
            queue.release_claims(self.project, self.user)
            result = super().delete(*args, **kwargs)
        self.project.forget_roles()
        return result


class ModelVersionQuerySet(LockingQuerySet):
    def allocate(self, project: Project, **fields) -> ModelVersion:
        """Create a version row and its (empty) directory `models/<id>`; the caller writes the tool into it."""
        fields.setdefault("tool", project.tool)
        fields.setdefault("mode", project.mode)
        version = self.create(project=project, **fields)
        version.directory = storage.relative_name("models", version.pk)
        version.save(update_fields=["directory"])
        storage.artifact_dir("models", version.pk, create=True)
        return version


class ModelVersion(models.Model):
    """A `save_pretrained` directory the app manages, under the artifact root, named by this row's id."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="versions")
    tool = models.CharField(max_length=32)
    mode = models.CharField(max_length=32)
    directory = models.CharField(max_length=64, blank=True, editable=False)
    label = models.CharField(max_length=200, blank=True)
    trained = models.BooleanField(default=False, help_text="False for a fresh, untrained tool.")
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    created_by_job = models.ForeignKey(
        "trainingjobs.TrainingJob", null=True, blank=True, on_delete=models.SET_NULL, related_name="created_versions"
    )
    metrics = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = ModelVersionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.label or f"version {self.pk}"

    @property
    def path(self) -> Path:
        """The version's directory (holds `tool.json` once materialized)."""
        return storage.resolve(self.directory or storage.relative_name("models", self.pk))

    @property
    def is_materialized(self) -> bool:
        return (self.path / "tool.json").is_file()

    def in_use(self) -> list[str]:
        """Why the version cannot be deleted now (`deletion.delete_record`): the project predicts with it, or a
        training job not yet over starts from it or writes it."""
        from django.apps import apps

        reasons = []
        if Project.objects.filter(current_version=self).exists():
            reasons.append("it is the project's current model (promote another version first)")
        if apps.is_installed("trainingjobs"):
            jobs = apps.get_model("trainingjobs", "TrainingJob").objects.filter(
                Q(base_version=self) | Q(result_version=self), state__in=["PENDING", "RUNNING"])
            reasons += [f"training job {pk} is not over (cancel it on the training page)"
                        for pk in jobs.order_by("pk").values_list("pk", flat=True)]
        return reasons

    def load(self):
        """The tool in eval mode (worker only: imports torch). A fresh untrained version is created on first use."""
        from annotate import tooling

        return tooling.load_version(self)


class ItemStatus(models.TextChoices):
    PENDING = "pending", "Waiting for a prediction"
    REFUSED = "refused", "Refused by the model"
    READY = "ready", "Ready for review"
    DONE = "done", "Done"
    SKIPPED = "skipped", "Skipped"

    @classmethod
    def counted(cls, counts: dict) -> list[tuple[str, str, int]]:
        """(status, label, items) per status in order, from `counts` by status; "refused" only where some are."""
        return [(value, label, counts.get(value, 0)) for value, label in cls.choices
                if value != cls.REFUSED or counts.get(value)]


FINISHED_STATUSES = (ItemStatus.DONE, ItemStatus.SKIPPED)  # an item no reviewer needs to see again


class ItemQuerySet(models.QuerySet):
    def claim_next(self, project: Project, user):
        """Claim the next item for `user` (see `annotate.queue.claim_next`); None when nothing is left."""
        from annotate import queue

        return queue.claim_next(project, user)

    def in_queue_order(self) -> ItemQuerySet:
        """Least confident prediction first (calibrated when the model has a fitted calibration), then oldest."""
        return self.order_by(F("confidence").asc(nulls_last=True), "created_at", "id")

    def remove_refused(self, project: Project, batch: int = 5000) -> int:
        """Delete the project's refused items (and any row that hangs off them); returns how many.

        A refused item was never ready, so it has no claim or answer to lose. Each batch is locked first, so an
        item that a worker predicts meanwhile (and makes ready) is either removed before or kept after. The rows
        go set-based (`deletion.delete_items`): Django's cascade loaded every item, inputs and all, which took
        4.7 s for 50,000 items against 2.2 s (measured 2026-12-03).
        """
        from annotate import deletion  # it imports this module

        return deletion.delete_items(self.filter(project=project, status=ItemStatus.REFUSED), batch=batch)[Item]


REFUSAL_LENGTH = 500


class Item(models.Model):
    """One tool input to review. `claimed_by`/`claim_expires_at` mirror the latest `Claim` (the truth).

    `confidence` is the queue's key: the latest prediction's calibrated confidence when its model had a fitted
    calibration, else its raw confidence (`Prediction.queue_confidence`).
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="items")
    inputs = models.JSONField()
    status = models.CharField(max_length=16, choices=ItemStatus.choices, default=ItemStatus.PENDING)
    confidence = models.FloatField(null=True, blank=True)
    prediction = models.ForeignKey(
        "Prediction", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    final_answers = models.PositiveIntegerField(
        default=0, help_text="Final answers (targets and skips) so far; the item is done at the project's overlap."
    )
    disagreement = models.BooleanField(
        default=False, editable=False,
        help_text="Two or more reviewers gave final targets that do not all agree (annotate.agreement); kept up "
                  "to date whenever the item's final answers change, so lists can filter on it.",
    )
    refusal = models.CharField(
        max_length=REFUSAL_LENGTH, blank=True, default="", db_default="", editable=False,
        help_text="Why the model refused the inputs of a REFUSED item (the version and its own message); kept until "
                  "a version predicts the item.",
    )
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    claim_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = ItemQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["project", "status", "confidence", "created_at", "id"], name="item_queue_order"),
            models.Index(fields=["project", "created_at"], name="item_project_created"),
            models.Index(fields=["project", "disagreement", "id"], name="item_disagreement"),
            # The item list's keyset pages (annotate.itemlist): by id, by status then id, by confidence then id.
            models.Index(fields=["project", "id"], name="item_list_id"),
            models.Index(fields=["project", "status", "id"], name="item_list_status"),
            models.Index(fields=["project", "confidence", "id"], name="item_list_confidence"),
        ]

    def __str__(self) -> str:
        return f"item {self.pk}"


class Claim(models.Model):
    """A reviewer's lease on an item. With overlap > 1 several reviewers hold claims on one item at once."""

    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="claims")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="claims")
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)
    # What the reviewer has typed into the item's forms and not sent, as their browser last sent it
    # ({"answer": [fields], "skip": [fields]}, `forms.TypedForm`): their other browsers show it while the claim
    # lasts. It goes with the claim, so an answer submitted or skipped takes it along.
    typed = models.JSONField(null=True, blank=True)
    typed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["item", "reviewer"], name="claim_unique_reviewer")]
        indexes = [models.Index(fields=["reviewer", "expires_at"], name="claim_reviewer_expiry")]

    def __str__(self) -> str:
        # In the viewer's time zone (the middleware activates it), as the admin's own columns show times.
        return f"{self.reviewer} on {self.item_id} until {timezone.localtime(self.expires_at):%H:%M:%S %Z}"

    @property
    def active(self) -> bool:
        return self.expires_at > timezone.now()


class AdminTyping(models.Model):
    """What a project admin typed into an item's admin form (the target they write when adjudicating, a refused
    item's fixed inputs) and has not sent, as their browser last sent it (`forms.TypedForm`): their other
    browsers show it. A reviewer's typing lives on their claim instead; an admin form has no claim, so this row
    goes when the form is sent (`annotate.unsent`) or the item is deleted."""

    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    form = models.CharField(max_length=16)
    fields = models.JSONField()
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["item", "user", "form"], name="admin_typing_unique")]
        # On a project's delete page: "2 unsent admin forms".
        verbose_name = "unsent admin form"
        verbose_name_plural = "unsent admin forms"

    def __str__(self) -> str:
        return f"{self.user}'s unsent {self.form} on item {self.item_id}"


class Prediction(models.Model):
    """A model version's receipt for an item, with the summary of the traced call that produced it."""

    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="predictions")
    model_version = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="predictions"
    )
    receipt = models.JSONField()
    trace = models.JSONField(default=dict, blank=True)
    confidence = models.FloatField(null=True, blank=True, help_text="The model's raw (uncalibrated) confidence.")
    calibrated_confidence = models.FloatField(
        null=True, blank=True,
        help_text="The calibrated confidence, when the model had a fitted (and fresh) calibration; else empty.",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"prediction {self.pk} for item {self.item_id}"

    @property
    def queue_confidence(self) -> float | None:
        """What the queue orders by: the calibrated confidence when there is one, else the raw confidence."""
        return self.calibrated_confidence if self.calibrated_confidence is not None else self.confidence

    @property
    def untrained(self) -> bool:
        """Whether the model that made it was a fresh, untrained tool (labelled so in the page)."""
        return self.model_version is not None and not self.model_version.trained


class AnswerKind(models.TextChoices):
    TARGET = "target", "Target"
    SKIP = "skip", "Skipped"
    DRAFT = "draft", "Draft"


FINAL_KINDS = (AnswerKind.TARGET, AnswerKind.SKIP)


class Answer(models.Model):
    """A reviewer's answer to an item: one row per (item, reviewer); its history is in `revisions`.

    `project` repeats the item's project (filled on save) so "this reviewer's latest answer in this project",
    read on every review page, is one index probe however many answers the reviewer has in other projects.
    """

    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="answers")
    # Indexed by `answer_latest_final`, which leads with it.
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", editable=False, db_index=False)
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="answers")
    kind = models.CharField(max_length=16, choices=AnswerKind.choices)
    target = models.JSONField(null=True, blank=True)
    skip_reason = models.CharField(max_length=500, blank=True)
    source = models.CharField(max_length=300)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["item", "reviewer"], name="answer_unique_reviewer")]
        indexes = [
            models.Index(fields=["reviewer", "updated_at"], name="answer_reviewer_updated"),
            models.Index(fields=["item", "kind"], name="answer_item_kind"),
            # The item list's reviewer filter probes (reviewer, item) pairs.
            models.Index(fields=["reviewer", "item"], name="answer_reviewer_item"),
            # The reviewer's latest final answer in a project (Back, Undo, the workspace's previous item), read
            # newest first; drafts are few and skipped. Not a partial index: a prepared statement's generic plan
            # takes the kinds as parameters and could not use one. It also serves `project`'s foreign key.
            models.Index(fields=["project", "reviewer", "-updated_at", "-id"], name="answer_latest_final"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} by {self.reviewer} on item {self.item_id}"

    def save(self, *args, **kwargs) -> None:
        if self.project_id is None:
            self.project_id = self.item.project_id
        super().save(*args, **kwargs)

    @property
    def is_final(self) -> bool:
        return self.kind in FINAL_KINDS


class AnswerRevision(models.Model):
    """One state of an answer; every change adds one, nothing is overwritten silently."""

    answer = models.ForeignKey(Answer, on_delete=models.CASCADE, related_name="revisions")
    kind = models.CharField(max_length=16, choices=AnswerKind.choices)
    target = models.JSONField(null=True, blank=True)
    skip_reason = models.CharField(max_length=500, blank=True)
    note = models.CharField(max_length=200, blank=True, help_text="Why this revision was made.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"revision {self.pk} of answer {self.answer_id}"


class AdjudicationKind(models.TextChoices):
    PICKED = "picked", "A reviewer's answer"
    WRITTEN = "written", "Written by the admin"
    DISTRIBUTION = "distribution", "The reviewers' distribution"


class Adjudication(models.Model):
    """An admin's final target for an item its reviewers disagree on, with its own provenance.

    Exports carry this target instead of the reviewers' answers (`annotate.export`). Adjudicating again replaces
    the target; every state is kept in `revisions` (see `annotate.adjudication.adjudicate`).
    """

    item = models.OneToOneField(Item, on_delete=models.CASCADE, related_name="adjudication")
    kind = models.CharField(max_length=16, choices=AdjudicationKind.choices)
    target = models.JSONField()
    chosen_answer = models.ForeignKey(
        Answer, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="The reviewer's answer the admin picked; empty when the admin wrote the target.",
    )
    adjudicator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    source = models.CharField(max_length=300, help_text="Provenance: adjudication:<project>/<item>/<admin>.")
    note = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["item_id"]

    def __str__(self) -> str:
        return f"adjudication of item {self.item_id} by {self.adjudicator}"


class AdjudicationRevision(models.Model):
    """One state of an adjudication; re-adjudicating adds one, nothing is overwritten silently."""

    adjudication = models.ForeignKey(Adjudication, on_delete=models.CASCADE, related_name="revisions")
    kind = models.CharField(max_length=16, choices=AdjudicationKind.choices)
    target = models.JSONField()
    chosen_answer = models.ForeignKey(Answer, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    adjudicator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    note = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"revision {self.pk} of adjudication {self.adjudication_id}"


class ApiTokenQuerySet(models.QuerySet):
    def issue(self, user, name: str = "", project: Project | None = None) -> tuple[ApiToken, str]:
        """Create a token for `user`; returns the row and the secret key (shown once, stored only hashed)."""
        key = f"tca_{secrets.token_urlsafe(32)}"
        token = self.create(user=user, name=name, project=project, key_hash=ApiToken.hash_key(key), prefix=key[:8])
        return token, key

    def authenticate(self, key: str) -> ApiToken | None:
        """The active token for `key` (its user active too), recording its use; None otherwise."""
        if not key:
            return None
        token = (
            self.select_related("user", "project")
            .filter(key_hash=ApiToken.hash_key(key), revoked_at__isnull=True, user__is_active=True)
            .first()
        )
        if token is not None:
            now = timezone.now()
            self.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
        return token


class ApiToken(models.Model):
    """A JSON API key of a user; optionally limited to one project. Only its SHA-256 is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True)
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="api_tokens",
        help_text="When set, the token reaches only this project.",
    )
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=8, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        verbose_name = "API token"  # not "Api token", in the admin and on a project's delete page

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or self.user})"

    @staticmethod
    def hash_key(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    def reaches(self, project: Project) -> bool:
        """Whether this token may act on `project` (its scope and its user's membership)."""
        if self.project_id is not None and self.project_id != project.pk:
            return False
        return project.is_member(self.user)


# Work waiting longer than this for a worker may have lost its message on the way (a broker restarted without
# persistence, a web process killed between its commit and the send): pages say so, and it is sent again.
STALE_WAIT = timedelta(minutes=10)


class Queued(models.Model):
    """Work a worker does on a row (an export, an upload's check), which its page follows while it is PENDING.

    `sent_at` is when its task was last sent: `tasks.resend_stale_work` sends it again when the row is still
    PENDING `STALE_WAIT` after that, as each of these tasks is safe to run twice.
    """

    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(default=timezone.now, help_text="When its task was last sent to the workers.")

    class Meta:
        abstract = True

    @property
    def waiting_long(self) -> bool:
        """Still pending `STALE_WAIT` after it was made: no worker has taken it (or one is very slow)."""
        return self.state == "PENDING" and timezone.now() - self.created_at >= STALE_WAIT

    @property
    def sent_again(self) -> bool:
        return self.sent_at - self.created_at >= STALE_WAIT

    def in_use(self) -> list[str]:
        """Why the row cannot be deleted now (`deletion.delete_record`): a worker still writes it or its files."""
        return []


class ExportState(models.TextChoices):
    PENDING = "PENDING", "Pending"
    RUNNING = "RUNNING", "Running"
    SUCCEEDED = "SUCCEEDED", "Succeeded"
    FAILED = "FAILED", "Failed"


class ExportFormat(models.TextChoices):
    EXPERIENCE = "experience", "Experience files"
    JSONL = "jsonl", "Flat JSONL"


class Export(Queued):
    """An export of a project's answers; its files are under `exports/<id>/` with a manifest.json.

    A run holds the export by its `run_token` and renews `heartbeat_at` as it writes progress (at least every
    few seconds); a RUNNING export whose heartbeat is older than `LEASE` is taken for dead (its worker killed),
    and the next run, sent again by `tasks.resend_stale_work`, takes it over (`annotate.export.run`).
    """

    TIME_LIMIT = timedelta(hours=1)  # `run_export`'s hard limit
    LEASE = timedelta(minutes=10)  # covers the longest step without progress: loading the model, zipping

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="exports")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    filters = models.JSONField(default=dict, blank=True)
    minibatch_size = models.PositiveIntegerField(default=32, validators=[MinValueValidator(1)])
    format = models.CharField(max_length=16, choices=ExportFormat.choices, default=ExportFormat.EXPERIENCE)
    state = models.CharField(max_length=16, choices=ExportState.choices, default=ExportState.PENDING)
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    files = models.JSONField(default=list, blank=True, help_text="File names in the export directory.")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    run_token = models.CharField(max_length=32, blank=True, help_text="The run that holds the export.")
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text="When that run last wrote progress.")

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(done__lte=F("total")) | Q(total=0), name="export_done_le_total")
        ]

    def __str__(self) -> str:
        return f"export {self.pk} of {self.project}"

    @property
    def directory(self) -> Path:
        return storage.artifact_dir("exports", self.pk, create=False)

    @property
    def is_final(self) -> bool:
        return self.state in (ExportState.SUCCEEDED, ExportState.FAILED)

    @property
    def stalled(self) -> bool:
        """RUNNING, but its run has written nothing for `LEASE`: its worker is gone, and another run may take it."""
        return (self.state == ExportState.RUNNING
                and (self.heartbeat_at is None or timezone.now() - self.heartbeat_at >= self.LEASE))

    @property
    def percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else (100 if self.is_final else 0)

    def in_use(self) -> list[str]:
        return ["it is being written"] if self.state == ExportState.RUNNING and not self.stalled else []


class DeletionState(models.TextChoices):
    PENDING = "PENDING", "Waiting for a worker"
    RUNNING = "RUNNING", "Deleting"
    SUCCEEDED = "SUCCEEDED", "Done"
    STOPPED = "STOPPED", "Stopped"
    FAILED = "FAILED", "Failed"


class ItemDeletion(Queued):
    """Items an admin chose to delete (the delete page, or the API), deleted by a worker in locked batches.

    Deleting 100,000 items with their answers takes seconds to tens of seconds, longer than a request should
    wait behind a proxy, so the request only counts and stores the items' ids, and the worker deletes among
    those ids only, writing its progress with each batch in the batch's own transaction (`deleted_items`,
    `deleted`): a run cut short and started again goes on where the last batch ended.
    """

    LEASE = timedelta(minutes=10)  # far more than one batch takes: a RUNNING row silent for longer lost its worker

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="item_deletions")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    filters = models.JSONField(default=dict, blank=True, help_text="The item list's parameters, as given.")
    item_ids = models.JSONField(default=list, blank=True, help_text="The items counted: no other item goes.")
    total = models.PositiveIntegerField(default=0)
    state = models.CharField(max_length=16, choices=DeletionState.choices, default=DeletionState.PENDING)
    deleted_items = models.PositiveIntegerField(default=0)
    deleted = models.JSONField(default=dict, blank=True, help_text="Rows deleted so far, per model label.")
    reason = models.TextField(blank=True, help_text="Why it stopped or failed.")
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text="When a run last wrote progress.")
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"deletion {self.pk} of {self.total} items of {self.project}"

    @property
    def is_final(self) -> bool:
        return self.state in (DeletionState.SUCCEEDED, DeletionState.STOPPED, DeletionState.FAILED)

    @property
    def stalled(self) -> bool:
        """RUNNING, but no batch has finished for `LEASE`: its worker is gone, and the task is sent again."""
        return (self.state == DeletionState.RUNNING
                and timezone.now() - (self.heartbeat_at or self.created_at) >= self.LEASE)

    @property
    def percent(self) -> int:
        return min(100, int(100 * self.deleted_items / self.total)) if self.total else 100

    def in_use(self) -> list[str]:
        return [] if self.is_final else ["it is still deleting items (stop it on its page first)"]


class UploadState(models.TextChoices):
    PENDING = "PENDING", "Being checked"
    ACCEPTED = "ACCEPTED", "Accepted"
    REFUSED = "REFUSED", "Refused"


class Upload(Queued):
    """What every upload a worker checks records: who sent it, its size, and the check's outcome."""

    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    size = models.PositiveBigIntegerField(default=0)
    state = models.CharField(max_length=16, choices=UploadState.choices, default=UploadState.PENDING)
    reason = models.TextField(blank=True, help_text="Why the file was refused.")
    checked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
        ordering = ["-created_at", "-id"]

    @property
    def directory(self) -> Path:
        """Where the uploaded files wait for their check (removed once it is done)."""
        raise NotImplementedError

    def refuse(self, reason: str) -> bool:
        """Record that this pending upload was refused for `reason` and remove its files; False if it was no
        longer pending (a check finished first), and nothing changes."""
        refused = type(self).objects.filter(pk=self.pk, state=UploadState.PENDING).update(
            state=UploadState.REFUSED, reason=reason[:2000], checked_at=timezone.now(), **self._refusal(reason))
        if refused:
            shutil.rmtree(self.directory, ignore_errors=True)
        return bool(refused)

    def _refusal(self, reason: str) -> dict:
        return {}

    def in_use(self) -> list[str]:
        return ["a worker is checking it"] if self.state == UploadState.PENDING else []


class ItemImportQuerySet(models.QuerySet):
    def recent(self, limit: int = 3):
        """What the project page lists: imports still under way, and those finished in the last day."""
        since = timezone.now() - timedelta(days=1)
        return self.filter(Q(state=UploadState.PENDING) | Q(created_at__gte=since))[:limit]


class ItemImport(Upload):
    """A JSONL file of items uploaded on the project page, imported whole or not at all by a worker.

    The page stores the file as `imports/<id>/items.jsonl` and queues `tasks.import_item_file`: checking and
    inserting 100,000 items takes about 12 s, longer than a request should wait behind a proxy. The worker
    creates the items in the same transaction that marks the row ACCEPTED, so one lost half-way leaves it
    PENDING and the task, run again, starts over; or it records the problems found (REFUSED). The file is
    removed either way.
    """

    FILE_NAME = "items.jsonl"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="item_imports")
    objects = ItemImportQuerySet.as_manager()
    original_name = models.CharField(max_length=255, blank=True, help_text="As uploaded; shown, never used as a path.")
    count = models.PositiveIntegerField(default=0, help_text="Items created.")
    problems = models.JSONField(default=list, blank=True, help_text="The first problems found, each naming its line.")
    problem_total = models.PositiveIntegerField(default=0, help_text="All problems found, listed or not.")

    def __str__(self) -> str:
        return f"item import {self.pk} ({self.state})"

    @property
    def directory(self) -> Path:
        return storage.artifact_dir("imports", self.pk, create=False)

    @property
    def path(self) -> Path:
        return self.directory / self.FILE_NAME

    @property
    def more_problems(self) -> int:
        return max(0, self.problem_total - len(self.problems))

    @property
    def whole_file_refused(self) -> bool:
        """Refused as a whole (it took too long, the check failed), not for problems on its lines."""
        return self.problems == [self.reason]

    def _refusal(self, reason: str) -> dict:
        return {"problems": [reason], "problem_total": 1}  # what the API lists as the import's errors


class ModelUpload(Upload):
    """A tool saved with `save_pretrained` elsewhere (trained offline, say), uploaded to become a model version.

    The two files are stored as `model-uploads/<id>/tool.json` and `model.safetensors`; a worker loads them
    strictly against the project's tool and mode (`annotate.versions`), registers the version it finds, and
    removes the upload's files either way. `version` is the version it became.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="model_uploads")
    label = models.CharField(max_length=200, blank=True, help_text="The model version's name.")
    size = models.PositiveBigIntegerField(default=0, help_text="Bytes of both files.")
    reason = models.TextField(blank=True, help_text="Why the files were refused.")
    version = models.ForeignKey(ModelVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    def __str__(self) -> str:
        return f"model upload {self.pk} ({self.state})"

    @property
    def directory(self) -> Path:
        return storage.artifact_dir("model-uploads", self.pk, create=False)


class ExperienceUpload(Upload):
    """An experience file traced by a user's own program, kept when it loads against the project's tool.

    The file is stored as `uploads/<id>/experience.json`; a worker checks it with the library's safe loader and
    records why it was refused, if it was.
    """

    FILE_NAME = "experience.json"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="experience_uploads")
    original_name = models.CharField(max_length=255, blank=True, help_text="As uploaded; shown, never used as a path.")
    summary = models.JSONField(default=dict, blank=True, help_text="Calls, supervision records and sources.")

    def __str__(self) -> str:
        return f"experience upload {self.pk} ({self.state})"

    @property
    def directory(self) -> Path:
        return storage.artifact_dir("uploads", self.pk, create=False)

    @property
    def path(self) -> Path:
        return self.directory / self.FILE_NAME


class DemoSeed(models.Model):
    """A demo project that `manage.py demo` has created: an admin who deletes it does not see it come back at the
    next start (`manage.py demo --recreate` brings it back)."""

    slug = models.SlugField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.slug


class AccountSettings(models.Model):
    """What a user sets for themselves and carries from browser to browser: the time zone their pages use.

    Read with the user in one query on every request (`annotate.backends.ModelBackend`), so a change shows on
    the user's other devices at their next page. A user without a row follows their browser.
    """

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="account_settings")
    time_zone = models.CharField(max_length=64, blank=True,
                                 help_text="An IANA name such as Europe/Berlin; empty: the browser's own zone.")

    def __str__(self) -> str:
        return f"settings of {self.user}"
