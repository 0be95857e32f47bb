"""Adjudication: an admin settles an item its reviewers disagree on, with a target of their own provenance.

The final target is one of three kinds: a reviewer's answer the admin picked, a target the admin wrote (checked
exactly as the tool's trainer checks it, like every reviewer's target), or, for ranking tools, the reviewers'
empirical distribution over the candidates (`agreement.empirical_distribution`), which the library trains on
with a soft cross-entropy. Its provenance is `adjudication:<project>/<item>/<admin>`; exports carry it instead
of the reviewers' answers.

Adjudicating again replaces the target and keeps every earlier one in `AdjudicationRevision`, so a slip of the
keyboard costs nothing. An item whose reviewers do not disagree is refused (`NoDisagreement`) unless it already
has an adjudication, which may still be corrected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from annotate import agreement, tooling
from annotate.models import (
    Adjudication,
    AdjudicationKind,
    AdjudicationRevision,
    Answer,
    AnswerKind,
    Item,
    Project,
)
from annotate.queue import InvalidTarget

__all__ = ["InvalidTarget", "NoDisagreement", "Result", "adjudicate", "adjudicate_open_with_distribution",
           "disagreement_counts", "open_disagreements", "reviewer_distribution"]


class NoDisagreement(ValueError):
    """The item's reviewers do not disagree (fewer than two final targets, or all agree): nothing to settle."""


@dataclass(frozen=True)
class Result:
    """What `adjudicate` did: `status` is "adjudicated" | "replaced" | "unchanged"."""

    adjudication: Adjudication
    status: str

    @property
    def message(self) -> str:
        a = self.adjudication
        what = {
            AdjudicationKind.PICKED: f"picked {a.chosen_answer.reviewer.get_username()}'s answer"
            if a.chosen_answer_id else "picked a reviewer's answer",
            AdjudicationKind.WRITTEN: "wrote the target",
            AdjudicationKind.DISTRIBUTION: "used the reviewers' distribution",
        }[a.kind]
        if self.status == "unchanged":
            return f"Item {a.item_id} already has this adjudicated target; nothing changed."
        if self.status == "replaced":
            return f"Item {a.item_id} adjudicated again ({what}); the earlier target is kept in its history."
        return f"Item {a.item_id} adjudicated: {what}."


def adjudicate(item: Item, admin, *, target: Any = None, answer: Answer | None = None,
               distribution: bool = False, note: str = "", now=None) -> Result:
    """Store the final target of `item`: `answer` (a reviewer's final target on it), a written `target`, or
    `distribution=True` (ranking tools: the reviewers' choices as a distribution over the candidates).

    Exactly one of the three. Raises `PermissionDenied` unless `admin` administers the item's project,
    `NoDisagreement` when the reviewers do not disagree (and the item has no adjudication to correct),
    `InvalidTarget` with the trainer's message for a written target training would reject, and `ValueError`
    for anything else wrong with the request. Nothing is stored when it raises.
    """
    project = item.project
    if not project.is_admin(admin):
        raise PermissionDenied(f"{admin} does not administer project {project.slug!r}")
    given = [name for name, value in (("target", target is not None), ("answer", answer is not None),
                                      ("distribution", distribution)) if value]
    if len(given) != 1:
        raise ValueError("adjudicate: give exactly one of target, answer or distribution, got "
                         + (", ".join(given) or "none"))
    if "\x00" in str(note):
        raise ValueError("note: contains a NUL character (\\u0000), which cannot be stored; remove it")
    now = now or timezone.now()
    with transaction.atomic():
        item = Item.objects.select_for_update().get(pk=item.pk)
        item.project = project
        current = Adjudication.objects.filter(item=item).first()
        # Decide from the answers as they are now, under the item's lock, not from a flag read earlier.
        disagreement = agreement.item_disagreement(item)
        if disagreement != item.disagreement:
            item.disagreement = disagreement
            item.save(update_fields=["disagreement"])
        if not disagreement and current is None:
            raise NoDisagreement(
                f"Item {item.pk} has nothing to adjudicate: its reviewers do not disagree "
                f"({_targets_phrase(item)}). Adjudication settles items where reviewers gave different targets."
            )
        kind, final, chosen = _final_target(project, item, target, answer, distribution)
        if current is not None and (current.kind, current.target, current.chosen_answer_id) == (
                kind, final, chosen.pk if chosen else None):
            return Result(current, "unchanged")
        status = "replaced" if current is not None else "adjudicated"
        adjudication = current or Adjudication(item=item, created_at=now)
        adjudication.kind, adjudication.target, adjudication.chosen_answer = kind, final, chosen
        adjudication.adjudicator = admin
        adjudication.source = project.adjudication_source_for(item.pk, admin)
        adjudication.note, adjudication.updated_at = (note or "").strip()[:500], now
        adjudication.save()
        AdjudicationRevision.objects.create(
            adjudication=adjudication, kind=kind, target=final, chosen_answer=chosen, adjudicator=admin,
            note=adjudication.note, created_at=now,
        )
        return Result(adjudication, status)


def reviewer_distribution(item: Item) -> list[float]:
    """The reviewers' final targets on a ranking item as a distribution over its candidates, in input order."""
    targets = list(Answer.objects.filter(item=item, kind=AnswerKind.TARGET).values_list("target", flat=True))
    return agreement.empirical_distribution(targets, item.inputs)


def open_disagreements(project: Project):
    """Items of `project` whose reviewers disagree and that no admin has adjudicated yet, oldest first."""
    return Item.objects.filter(project=project, disagreement=True, adjudication__isnull=True).order_by("id")


def disagreement_counts(project: Project) -> dict[str, int]:
    """`{"disagreements", "adjudicated", "open"}`: items of `project` whose reviewers disagree now, how many of
    those an admin has adjudicated, and how many are left (one query)."""
    counts = Item.objects.filter(project=project, disagreement=True).aggregate(
        disagreements=Count("id"), adjudicated=Count("id", filter=Q(adjudication__isnull=False)))
    return {**counts, "open": counts["disagreements"] - counts["adjudicated"]}


def adjudicate_open_with_distribution(project: Project, admin) -> int:
    """Adjudicate every open disagreement of a ranking project with its reviewers' distribution; the count."""
    if (project.tool, project.mode) not in agreement.RANKING:
        raise ValueError(f"the reviewers' distribution is a target of ranking tools only, not {project.tool}/"
                         f"{project.mode}")
    done = 0
    for item in open_disagreements(project).iterator(chunk_size=500):
        item.project = project
        try:
            adjudicate(item, admin, distribution=True, note="distribution of the reviewers' choices")
        except NoDisagreement:
            continue  # a reviewer changed their answer since the list was read
        done += 1
    return done


# -- internals -------------------------------------------------------------------------------------------------
def _final_target(project: Project, item: Item, target: Any, answer: Answer | None,
                  distribution: bool) -> tuple[str, Any, Answer | None]:
    if answer is not None:
        answer = Answer.objects.select_related("reviewer").filter(pk=answer.pk).first()
        if answer is None or answer.item_id != item.pk:
            raise ValueError(f"answer: not an answer to item {item.pk}")
        if answer.kind != AnswerKind.TARGET:
            raise ValueError(f"answer: {answer.reviewer.get_username()}'s answer to item {item.pk} is a "
                             f"{answer.get_kind_display().lower()}, not a target; pick a final target")
        return AdjudicationKind.PICKED, answer.target, answer
    if distribution:
        if (project.tool, project.mode) not in agreement.RANKING:
            raise ValueError(f"distribution: the reviewers' distribution is a target of ranking tools only, "
                             f"not {project.tool}/{project.mode}")
        target, kind = reviewer_distribution(item), AdjudicationKind.DISTRIBUTION
    else:
        kind = AdjudicationKind.WRITTEN
    try:
        normalized = tooling.validate_target(project.tool, project.mode, item.inputs, target, project.configuration)
        return kind, tooling.to_json(normalized), None
    except ValueError as exc:
        raise InvalidTarget(str(exc)) from exc


def _targets_phrase(item: Item) -> str:
    count = Answer.objects.filter(item=item, kind=AnswerKind.TARGET).count()
    if count < 2:
        return f"it has {count} final target{'s' if count != 1 else ''}, and disagreement needs two or more"
    return f"all {count} final targets agree"
