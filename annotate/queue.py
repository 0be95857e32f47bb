"""The review queue: claims with leases, submissions validated like the trainer, skips, going back, undo.

Every change to an item's claims and answers happens while its row is locked (`select_for_update`), so an item
is never held by more reviewers than the project's overlap, and a reviewer never gets the same item twice.
Claims (`Claim` rows) are the truth; `Item.claimed_by`/`claim_expires_at` mirror the latest one for display.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Case, Exists, F, OuterRef, Q, Value, When
from django.utils import timezone

from annotate import agreement, hotpath, tooling
from annotate.models import (
    FINAL_KINDS,
    FINISHED_STATUSES,
    Answer,
    AnswerKind,
    AnswerRevision,
    Claim,
    Item,
    ItemStatus,
    Project,
)

_MAX_ATTEMPTS = 20  # candidates tried per claim when others take them concurrently

LEASE_LOST = (
    "Your claim on this item expired or another reviewer took it, so your answer was not submitted. "
    "It is kept as a draft: submit again, or press k, to take the item back, if a reviewer's place on it is still "
    "free."
)
FINISHED_MEANWHILE = (
    "This item was finished while you worked on it (it has every answer its project's overlap asks for), so your "
    "answer was not submitted. It is kept as a draft."
)


class InvalidTarget(ValueError):
    """The target would be rejected by the tool's trainer; the message is the trainer's."""


@dataclass(frozen=True)
class Outcome:
    """What a submit or skip did: `status` is "submitted" | "unchanged" | "edited" | "draft"."""

    answer: Answer
    status: str
    message: str

    @property
    def ok(self) -> bool:
        return self.status != "draft"


def claim_next(project: Project, user, *, now=None) -> Item | None:
    """Claim the next item for `user` (`claim_next_id`) and return it with its prediction; None when none is left."""
    item_id = claim_next_id(project, user, now=now)
    if item_id is None:
        return None
    item = Item.objects.select_related("prediction", "prediction__model_version").defer("prediction__trace").get(
        pk=item_id)
    item.project = project
    return item


def claim_next_id(project: Project, user, *, now=None) -> int | None:
    """Claim the next item for `user`: least confident prediction first, then oldest; its id, None when none is left.

    A reviewer who already holds an active claim in the project gets that item back (with a renewed lease).
    On PostgreSQL the whole claim is one call of a database function (`hotpath.claim_next_in_database`): the
    review loop's hottest write, one round trip instead of seven. Elsewhere `_claim_next_in_python` takes the
    same steps; the queue's tests run both.
    """
    _require_member(project, user)
    now = now or timezone.now()
    expires = now + timedelta(seconds=project.lease_seconds)
    if hotpath.claims_in_database():
        return hotpath.claim_next_in_database(project, user, ItemStatus.READY, now, expires, _MAX_ATTEMPTS)
    item = _claim_next_in_python(project, user, now, expires)
    return item.pk if item is not None else None


def _claim_next_in_python(project: Project, user, now, expires) -> Item | None:
    with _claiming(project, user) as allowed:
        if not allowed:
            return None
        # Fixed SQL (`annotate.hotpath`), as in the database function (migration 0005).
        held = hotpath.held_item_id(project.pk, user, ItemStatus.READY, now)
        item = hotpath.lock_item(held) if held is not None else None
        # Read before the lock: gone (its project deleted) or no longer ready, it is passed over.
        if item is not None and item.status == ItemStatus.READY:
            return _claim(item, user, expires, now)
        rejected: list[int] = []
        for _ in range(_MAX_ATTEMPTS):
            item = hotpath.next_candidate(project, user, ItemStatus.READY, now, rejected)
            if item is None:
                return None
            # The filter ran before the lock; count again now that no one else can change this item.
            if hotpath.free_slots(item, user, now) > 0:
                return _claim(item, user, expires, now)
            rejected.append(item.pk)
    return None


def release(item: Item, user) -> None:
    """Give up `user`'s claim on `item` (it returns to the queue at once)."""
    with transaction.atomic():
        item = Item.objects.select_for_update().get(pk=item.pk)
        Claim.objects.filter(item=item, reviewer=user).delete()
        _unmirror(item, user)


def release_claims(project: Project, user) -> int:
    """Release every claim `user` holds in `project` (a member removed); answers and drafts are kept."""
    released = 0
    with transaction.atomic():
        for item in Item.objects.select_for_update().filter(project=project, claims__reviewer=user):
            released += Claim.objects.filter(item=item, reviewer=user).delete()[0]
            _unmirror(item, user)
    return released


def submit(item: Item, user, target, *, now=None) -> Outcome:
    """Store `target` as `user`'s answer to `item`, validated exactly as the tool's trainer validates it.

    Idempotent: submitting the same target again changes nothing. Changing a submitted answer is an edit (a new
    revision). Without an active claim (expired, or taken by someone else) the target is kept as a draft and
    the outcome says so. Raises `InvalidTarget` (nothing stored) when training would reject the target.
    """
    project = item.project
    _require_member(project, user)
    try:
        normalized = tooling.validate_target(project.tool, project.mode, item.inputs, target, project.configuration)
        normalized = tooling.to_json(normalized)
    except ValueError as exc:
        raise InvalidTarget(str(exc)) from exc
    return _finish(item, user, AnswerKind.TARGET, normalized, "", now or timezone.now())


def skip(item: Item, user, reason: str, *, now=None) -> Outcome:
    """Skip `item` with a reason (required); a skip is a final answer, so the item is not offered again."""
    project = item.project
    _require_member(project, user)
    reason = (reason or "").strip()
    if not reason:
        raise ValueError("skip_reason: say why the item is skipped")
    return _finish(item, user, AnswerKind.SKIP, None, reason[:500], now or timezone.now())


def save_draft(item: Item, user, target) -> Answer:
    """Keep unfinished work as `user`'s draft on `item` (never replaces a final answer)."""
    _require_member(item.project, user)
    with transaction.atomic():
        item = Item.objects.select_for_update().get(pk=item.pk)
        answer = Answer.objects.filter(item=item, reviewer=user).first()
        if answer is not None and answer.is_final:
            return answer
        return _write(answer, item, user, AnswerKind.DRAFT, tooling.to_json(target), "", "draft saved")


def answer_and_previous(project: Project, user, item: Item, *, read: tuple[Answer | None, int | None] | None = None
                        ) -> tuple[Answer | None, int | None]:
    """`user`'s answer to `item` and the item they answered last in `project` before it, in one query.

    The previous item is the one `previous(project, user, before=item)` gives; when `item`'s own answer is final
    it is looked up after it (a second query), since "before" is then relative to that answer. `read`: the answer
    and the item of the latest final answer, already read (`hotpath.item_for_page` reads them with the item).
    """
    if read is not None:
        answer, latest = read
    else:
        rows = hotpath.answer_and_latest(user, project.pk, item.pk)
        answer = next((row for row in rows if row.item_id == item.pk), None)
        latest = next((row.item_id for row in rows if row.item_id != item.pk), None)
    if answer is not None and answer.is_final:
        before = previous(project, user, before=item)
        return answer, before.pk if before else None
    return answer, latest


def previous(project: Project, user, before: Item | None = None) -> Item | None:
    """The item `user` answered last in `project` (before `before`'s answer when given), to look at or edit."""
    answers = Answer.objects.filter(project=project, reviewer=user, kind__in=FINAL_KINDS)
    if before is not None:
        mine = answers.filter(item=before).first()
        if mine is not None:
            answers = answers.filter(Q(updated_at__lt=mine.updated_at) | Q(updated_at=mine.updated_at, id__lt=mine.id))
    answer = answers.order_by("-updated_at", "-id").select_related("item").first()
    return answer.item if answer else None


def undo_last(project: Project, user, *, now=None) -> Answer | None:
    """Undo `user`'s most recent final answer in `project`: it becomes a draft and the item returns to them.

    Nothing is deleted: the undone answer keeps its target (now a draft) and a revision records the undo.
    The reviewer gets a fresh claim on the item when the overlap allows it. None when there is nothing to undo.
    """
    _require_member(project, user)
    now = now or timezone.now()
    latest = (
        Answer.objects.filter(project=project, reviewer=user, kind__in=FINAL_KINDS)
        .order_by("-updated_at", "-id")
        .values_list("pk", "item_id")
        .first()
    )
    if latest is None:
        return None
    with _claiming(project, user) as allowed:
        item = Item.objects.select_for_update().get(pk=latest[1])
        answer = Answer.objects.select_for_update().get(pk=latest[0])
        if not answer.is_final:
            return answer
        answer = _write(answer, item, user, AnswerKind.DRAFT, answer.target, answer.skip_reason, "undone")
        item.final_answers = max(0, item.final_answers - 1)
        item.status = ItemStatus.READY if item.prediction_id else ItemStatus.PENDING
        item.project = project
        item.disagreement = agreement.item_disagreement(item)
        item.save(update_fields=["final_answers", "status", "disagreement"])
        if allowed and item.status == ItemStatus.READY and hotpath.free_slots(item, user, now) > 0:
            _claim(item, user, now + timedelta(seconds=project.lease_seconds), now)
        return answer


def reclaim(item: Item, user, *, now=None) -> bool:
    """Claim `item` again for `user`, whose lease on it ended (their work is a draft); False when it is no longer
    ready, they answered it, or the overlap has no place left for them (another reviewer took it)."""
    try:
        keep(item, user, now=now)
    except NotKept:
        return False
    return True


class NotKept(Exception):
    """`keep` could not renew the lease; the message says why, in the reviewer's words."""


def keep_typed(item: Item, user, typed: dict, *, now=None) -> bool:
    """Keep what `user` typed into `item`'s forms and has not sent (`forms.TypedForm`) on their active claim, so
    that their other browsers show it; False, and nothing kept, without an active claim. It goes with the claim:
    an answer submitted or skipped takes it along, and an ended lease hides it until the item is theirs again."""
    _require_member(item.project, user)
    now = now or timezone.now()
    return Claim.objects.filter(item=item, reviewer=user, expires_at__gt=now).update(
        typed=typed or None, typed_at=now) > 0


def keep(item: Item, user, *, now=None) -> datetime:
    """Renew `user`'s lease on `item`, which the queue gave them: a full lease from `now`; its new end.

    A reviewer still working on an item keeps it, so that another reviewer is not given their place meanwhile.
    A lease that has already ended (their work on it a draft, perhaps) is taken back the same way, while the
    overlap still has their place. Raises `NotKept` when the item can no longer be theirs: the queue never gave
    it to them, they answered it, it is no longer ready, or other reviewers hold every place on it.
    """
    project = item.project
    _require_member(project, user)
    now = now or timezone.now()
    with _claiming(project, user) as allowed:
        if not allowed:
            raise NotKept("You can no longer review in this project.")
        locked = hotpath.lock_item(item.pk)
        if locked is None:
            raise Item.DoesNotExist(f"item {item.pk} is gone")
        kind = Answer.objects.filter(item=locked, reviewer=user).values_list("kind", flat=True).first()
        if kind in FINAL_KINDS:
            raise NotKept("You have answered this item: there is no lease to keep.")
        # An ended claim stays until its reviewer answers or is removed; a draft stays through both.
        if kind is None and not Claim.objects.filter(item=locked, reviewer=user).exists():
            raise NotKept("This item is not assigned to you: review the next item to label.")
        if locked.status in FINISHED_STATUSES:
            raise NotKept("This item is finished: other reviewers answered it. An answer you give now is kept as a "
                          "draft.")
        if locked.status != ItemStatus.READY:
            raise NotKept("This item is no longer ready for review. An answer you give now is kept as a draft.")
        if hotpath.free_slots(locked, user, now) <= 0:
            raise NotKept("Another reviewer took this item after your lease ended: an answer you give now is kept "
                          "as a draft.")
        expires = now + timedelta(seconds=project.lease_seconds)
        _claim(locked, user, expires, now)
        return expires


def holds_claim(item: Item, user, *, now=None) -> bool:
    """Whether `user` holds an active claim on `item`."""
    return Claim.objects.filter(item=item, reviewer=user, expires_at__gt=now or timezone.now()).exists()


# -- internals -------------------------------------------------------------------------------------------------
def _require_member(project: Project, user) -> None:
    if not project.is_member(user):
        raise PermissionDenied(f"{user} is not a member of project {project.slug!r}")


def _final_answers(user, **where):
    return Answer.objects.filter(reviewer=user, kind__in=FINAL_KINDS, **where)


@contextlib.contextmanager
def _claiming(project: Project, user) -> Iterator[bool]:
    """A transaction that may give `user` a claim in `project`, and whether it may: not if they were removed or
    deactivated since the request checked (`hotpath.lock_reviewer`, taken first, before any item's lock, as the
    database claim function does). `project.overlap` is then the overlap as it is now, not as the request read
    it. Every claim the Python steps make is made inside one."""
    with transaction.atomic():
        overlap = hotpath.lock_reviewer(project.pk, user.pk)
        if overlap is not None:
            project.overlap = overlap
        yield overlap is not None


def _claim(item: Item, user, expires, now) -> Item:
    hotpath.claim(item, user, expires, now)  # one upsert and the mirror, no update_or_create: the hot path
    item.claimed_by = user
    item.claim_expires_at = expires
    return item


def _unmirror(item: Item, user) -> None:
    if item.claimed_by_id == user.pk:
        latest = Claim.objects.filter(item=item).order_by("-expires_at").first()
        item.claimed_by_id = latest.reviewer_id if latest else None
        item.claim_expires_at = latest.expires_at if latest else None
        item.save(update_fields=["claimed_by", "claim_expires_at"])


def _finish(item: Item, user, kind: str, target, reason: str, now) -> Outcome:
    project = item.project
    with transaction.atomic():
        hotpath.hold_overlap(project.pk)  # read below, after the lock: the overlap that settles the item
        item = Item.objects.select_for_update(of=("self",)).annotate(overlap=F("project__overlap")).get(pk=item.pk)
        project.overlap = item.overlap  # as it is now, not when the request read the project
        item.project = project  # already loaded: saves `_write` a query
        answer = Answer.objects.filter(item=item, reviewer=user).first()
        if answer is not None and answer.is_final:
            if answer.kind == kind and answer.target == target and answer.skip_reason == reason:
                return Outcome(answer, "unchanged", "Already submitted; nothing changed.")
            answer = _write(answer, item, user, kind, target, reason, "edited")
            _settle(item, project)
            return Outcome(answer, "edited", "Your answer was updated; the earlier one is kept in its history.")
        claim = Claim.objects.filter(item=item, reviewer=user, expires_at__gt=now).first()
        if claim is None or item.status != ItemStatus.READY:
            finished = item.status in FINISHED_STATUSES  # by others after the lease ended, or a lowered overlap
            note = "kept as draft: item finished" if finished else "kept as draft: lease lost"
            answer = _write(answer, item, user, AnswerKind.DRAFT, target, reason, note)
            return Outcome(answer, "draft", FINISHED_MEANWHILE if finished else LEASE_LOST)
        answer = _write(answer, item, user, kind, target, reason, "skipped" if kind == AnswerKind.SKIP else "")
        claim.delete()
        item.final_answers += 1
        _settle(item, project)
        _unmirror(item, user)
        return Outcome(answer, "submitted", "Skipped." if kind == AnswerKind.SKIP else "Submitted.")


def apply_overlap(project: Project) -> tuple[int, int]:
    """Bring the items' status in line with `project.overlap` after it changed: (finished, reopened).

    Lowered, a ready item that already has as many final answers is finished ("done" if any of them is a target,
    "skipped" if all skipped), as the last of them would have finished it, and the leases still open on it end
    now (the claims stay, with what their reviewers typed; an answer sent after is kept as a draft). Raised, a
    finished item with fewer goes back to the queue for the answers it now lacks, from reviewers who have not
    answered it; an adjudicated item stays finished, its target already decided. Answers are untouched. Safe to
    repeat, and while reviewers submit: it waits for the submits in flight, which read the overlap before it
    changed, and the ones after it read the new one (`hotpath.hold_overlap`). It applies the overlap last saved.
    """
    items = Item.objects.filter(project=project)
    now = timezone.now()
    with transaction.atomic():
        # Once the submits deciding from the old overlap have committed, and from the overlap last saved.
        hotpath.hold_overlap(project.pk, changing=True)
        project.overlap = Project.objects.values_list("overlap", flat=True).get(pk=project.pk)
        finished = items.filter(status=ItemStatus.READY, final_answers__gte=project.overlap).update(
            status=Case(
                When(Exists(Answer.objects.filter(item=OuterRef("pk"), kind=AnswerKind.TARGET)),
                     then=Value(ItemStatus.DONE)),
                default=Value(ItemStatus.SKIPPED),
            )
        )
        if finished:  # a finished item holds no open lease (the queue never leaves one on it otherwise)
            Claim.objects.filter(item__project=project, item__status__in=FINISHED_STATUSES,
                                 expires_at__gt=now).update(expires_at=now)
            items.filter(status__in=FINISHED_STATUSES, claim_expires_at__gt=now).update(claim_expires_at=now)
        reopened = items.filter(
            status__in=FINISHED_STATUSES, final_answers__lt=project.overlap, prediction__isnull=False,
            adjudication__isnull=True,
        ).update(status=ItemStatus.READY)
    return finished, reopened


def _settle(item: Item, project: Project) -> None:
    """Done once the overlap is reached: "done" if any reviewer gave a target, "skipped" if all skipped.

    Also refreshes `Item.disagreement`, since every change to a final answer passes through here (or undo).
    """
    if item.final_answers >= project.overlap:
        targets = Answer.objects.filter(item=item, kind=AnswerKind.TARGET).exists()
        item.status = ItemStatus.DONE if targets else ItemStatus.SKIPPED
    item.project = project
    item.disagreement = agreement.item_disagreement(item)
    item.save(update_fields=["final_answers", "status", "disagreement"])


def _write(answer: Answer | None, item: Item, user, kind: str, target, reason: str, note: str) -> Answer:
    now = timezone.now()
    if answer is None:
        answer = Answer(item=item, reviewer=user, source=item.project.source_for(item.pk, user), created_at=now)
    answer.kind, answer.target, answer.skip_reason, answer.updated_at = kind, target, reason, now
    answer.save()
    AnswerRevision.objects.create(
        answer=answer, kind=kind, target=target, skip_reason=reason, note=note, created_at=now
    )
    return answer
