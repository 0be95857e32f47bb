"""Adjudication: an admin settles an item its reviewers disagree on; bad requests are refused with nothing lost."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied

from annotate import adjudication, queue
from annotate.models import Adjudication, AdjudicationKind, AdjudicationRevision, Answer

pytestmark = pytest.mark.django_db


def test_picking_a_reviewers_answer_stores_it_with_the_admins_provenance(split_item, project_admin,
                                                                         second_reviewer) -> None:
    sams = Answer.objects.get(item=split_item, reviewer=second_reviewer)

    result = adjudication.adjudicate(split_item, project_admin, answer=sams)

    stored = Adjudication.objects.get(item=split_item)
    assert (result.status, stored.kind, stored.target, stored.chosen_answer) == (
        "adjudicated", AdjudicationKind.PICKED, "dns", sams)
    assert stored.source == f"adjudication:outages/{split_item.pk}/ada"
    assert result.message == f"Item {split_item.pk} adjudicated: picked sam's answer."


def test_a_written_target_is_checked_like_a_reviewers_and_normalized(split_item, project_admin) -> None:
    result = adjudication.adjudicate(split_item, project_admin, target=1)  # an index: the second candidate

    assert (result.adjudication.kind, result.adjudication.target) == (AdjudicationKind.WRITTEN, "dns")
    assert result.adjudication.chosen_answer is None


def test_a_written_target_the_trainer_rejects_is_refused_and_nothing_stored(split_item, project_admin) -> None:
    with pytest.raises(adjudication.InvalidTarget, match="unknown hypothesis id 'disk'"):
        adjudication.adjudicate(split_item, project_admin, target="disk")

    assert not Adjudication.objects.exists()


def test_a_note_with_a_nul_character_is_refused_and_nothing_stored(split_item, project_admin) -> None:
    with pytest.raises(ValueError, match=r"note: contains a NUL character"):
        adjudication.adjudicate(split_item, project_admin, target="dns", note="checked\x00")

    assert not Adjudication.objects.exists()


def test_the_reviewers_distribution_is_a_valid_ranking_target(split_item, project_admin) -> None:
    result = adjudication.adjudicate(split_item, project_admin, distribution=True)

    assert (result.adjudication.kind, result.adjudication.target) == (AdjudicationKind.DISTRIBUTION, [0.5, 0.5])


def test_adjudicating_an_item_without_disagreement_is_refused_with_a_clear_message(
    ready_items, project, reviewer, project_admin
) -> None:
    (item,) = ready_items(project, [0.1])
    queue.claim_next(project, reviewer)
    queue.submit(item, reviewer, "db")

    with pytest.raises(adjudication.NoDisagreement, match=r"nothing to adjudicate: its reviewers do not disagree "
                                                           r"\(it has 1 final target"):
        adjudication.adjudicate(item, project_admin, target="db")
    assert not Adjudication.objects.exists()


def test_reviewers_who_agreed_since_the_list_was_read_are_not_adjudicated(split_item, project_admin,
                                                                          second_reviewer) -> None:
    queue.submit(split_item, second_reviewer, "db")  # sam changes his mind; the caller still holds the old flag
    split_item.disagreement = True

    with pytest.raises(adjudication.NoDisagreement, match="all 2 final targets agree"):
        adjudication.adjudicate(split_item, project_admin, target="db")


def test_adjudicating_again_replaces_the_target_and_keeps_the_history(split_item, project_admin) -> None:
    adjudication.adjudicate(split_item, project_admin, target="db")
    again = adjudication.adjudicate(split_item, project_admin, target="db")
    replaced = adjudication.adjudicate(split_item, project_admin, target="dns", note="the log says DNS")

    assert (again.status, replaced.status) == ("unchanged", "replaced")
    assert Adjudication.objects.get().target == "dns"
    assert list(AdjudicationRevision.objects.values_list("target", "note")) == [("db", ""),
                                                                                 ("dns", "the log says DNS")]


def test_only_the_projects_admins_adjudicate(split_item, reviewer, outsider) -> None:
    for user in (reviewer, outsider):
        with pytest.raises(PermissionDenied):
            adjudication.adjudicate(split_item, user, target="db")


def test_exactly_one_kind_of_target_is_accepted(split_item, project_admin) -> None:
    with pytest.raises(ValueError, match="exactly one of target, answer or distribution, got target, distribution"):
        adjudication.adjudicate(split_item, project_admin, target="db", distribution=True)
    with pytest.raises(ValueError, match="got none"):
        adjudication.adjudicate(split_item, project_admin)


def test_an_answer_of_another_item_or_a_skip_cannot_be_picked(split_item, ready_items, project, project_admin,
                                                              reviewer, outsider) -> None:
    (other,) = ready_items(project, [0.9])
    queue.claim_next(project, reviewer)
    foreign = queue.submit(other, reviewer, "db").answer
    skip = Answer.objects.create(item=split_item, reviewer=outsider, kind="skip", skip_reason="unsure", source="s")

    with pytest.raises(ValueError, match=f"not an answer to item {split_item.pk}"):
        adjudication.adjudicate(split_item, project_admin, answer=foreign)
    with pytest.raises(ValueError, match="is a skipped, not a target"):
        adjudication.adjudicate(split_item, project_admin, answer=skip)


def test_open_disagreements_settle_with_the_distribution_in_one_go(split_item, project, project_admin) -> None:
    assert list(adjudication.open_disagreements(project)) == [split_item]

    assert adjudication.adjudicate_open_with_distribution(project, project_admin) == 1

    assert list(adjudication.open_disagreements(project)) == []
    assert Adjudication.objects.get().target == [0.5, 0.5]


def test_distribution_is_refused_for_tools_that_do_not_rank(split_item, project, project_admin) -> None:
    project.tool, project.mode = "investigator", "verification"

    with pytest.raises(ValueError, match="ranking tools only, not investigator/verification"):
        adjudication.adjudicate_open_with_distribution(project, project_admin)
