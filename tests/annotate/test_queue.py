"""The review queue: leases, order, overlap, submissions validated like the trainer, skip, previous, undo."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from annotate import hotpath, queue
from annotate.models import Answer, AnswerKind, AnswerRevision, Claim, Item, ItemStatus, Project

pytestmark = pytest.mark.django_db

# On PostgreSQL a claim is one call of the database function (migration 0005); `queue._claim_next_in_python`
# takes the same steps elsewhere. Every test here runs on each path this database has.
CLAIM_PATHS = ["database", "python"] if hotpath.claims_in_database() else ["python"]


@pytest.fixture(autouse=True, params=CLAIM_PATHS)
def claim_path(request, monkeypatch) -> str:
    if request.param == "python":
        monkeypatch.setattr(hotpath, "claims_in_database", lambda: False)
    return request.param


def test_claim_orders_least_confident_first_then_oldest(ready_items, project, reviewer) -> None:
    sure, unsure_old, unsure_new = ready_items(project, [0.9, 0.2, 0.2])

    assert queue.claim_next(project, reviewer) == unsure_old
    queue.submit(unsure_old, reviewer, "db")
    assert queue.claim_next(project, reviewer) == unsure_new
    queue.submit(unsure_new, reviewer, "db")
    assert queue.claim_next(project, reviewer) == sure


def test_claim_returns_the_held_item_instead_of_a_second_one(ready_items, project, reviewer) -> None:
    ready_items(project, [0.1, 0.2])

    first = queue.claim_next(project, reviewer)

    assert queue.claim_next(project, reviewer) == first
    assert Claim.objects.filter(reviewer=reviewer).count() == 1


def test_an_item_is_never_held_by_two_reviewers(ready_items, project, reviewer, second_reviewer) -> None:
    (only,) = ready_items(project, [0.5])

    assert queue.claim_next(project, reviewer) == only
    assert queue.claim_next(project, second_reviewer) is None


def test_expired_lease_returns_item_to_the_queue(ready_items, project, reviewer, second_reviewer) -> None:
    (only,) = ready_items(project, [0.5])
    queue.claim_next(project, reviewer, now=timezone.now() - timedelta(seconds=project.lease_seconds + 1))

    assert queue.claim_next(project, second_reviewer) == only


def test_pending_items_without_prediction_are_not_offered(ready_items, project, reviewer) -> None:
    (item,) = ready_items(project, [0.5])
    item.status = ItemStatus.PENDING
    item.save()

    assert queue.claim_next(project, reviewer) is None


def test_outsider_cannot_claim(ready_items, project, outsider) -> None:
    ready_items(project, [0.5])

    with pytest.raises(PermissionDenied):
        queue.claim_next(project, outsider)


def test_submit_stores_target_with_provenance_and_finishes_item(ready_items, project, reviewer) -> None:
    (item,) = ready_items(project, [0.5])
    queue.claim_next(project, reviewer)

    outcome = queue.submit(item, reviewer, "db")

    assert outcome.status == "submitted"
    answer = Answer.objects.get()
    assert (answer.kind, answer.target) == (AnswerKind.TARGET, "db")
    assert answer.source == f"review:outages/{item.pk}/rita"
    item.refresh_from_db()
    assert (item.status, item.final_answers, item.claimed_by) == (ItemStatus.DONE, 1, None)
    assert not Claim.objects.exists()


def test_submit_rejects_target_the_trainer_would_reject(ready_items, project, reviewer) -> None:
    (item,) = ready_items(project, [0.5])
    queue.claim_next(project, reviewer)

    with pytest.raises(queue.InvalidTarget, match="unknown hypothesis id 'nope'"):
        queue.submit(item, reviewer, "nope")

    assert not Answer.objects.exists()
    assert queue.holds_claim(item, reviewer)


def test_submit_rejects_distribution_that_does_not_sum_to_one(ready_items, project, reviewer) -> None:
    (item,) = ready_items(project, [0.5])
    queue.claim_next(project, reviewer)

    with pytest.raises(queue.InvalidTarget):
        queue.submit(item, reviewer, [0.7, 0.7])

    assert not Answer.objects.exists()


def test_double_submit_is_idempotent(ready_items, project, reviewer) -> None:
    (item,) = ready_items(project, [0.5])
    queue.claim_next(project, reviewer)

    first = queue.submit(item, reviewer, "db")
    second = queue.submit(item, reviewer, "db")

    assert (first.status, second.status) == ("submitted", "unchanged")
    assert Answer.objects.count() == 1
    assert AnswerRevision.objects.count() == 1
    item.refresh_from_db()
    assert item.final_answers == 1


def test_changing_a_submitted_answer_keeps_every_revision(ready_items, project, reviewer) -> None:
    (item,) = ready_items(project, [0.5])
    queue.claim_next(project, reviewer)
    queue.submit(item, reviewer, "db")

    outcome = queue.submit(item, reviewer, "dns")

    assert outcome.status == "edited"
    assert Answer.objects.get().target == "dns"
    assert list(AnswerRevision.objects.values_list("target", flat=True)) == ["db", "dns"]
    item.refresh_from_db()
    assert item.final_answers == 1


def test_submit_after_lease_expired_keeps_work_as_draft(ready_items, project, reviewer) -> None:
    (item,) = ready_items(project, [0.5])
    queue.claim_next(project, reviewer, now=timezone.now() - timedelta(seconds=project.lease_seconds + 1))

    outcome = queue.submit(item, reviewer, "db")

    assert outcome.status == "draft"
    assert "kept as a draft" in outcome.message
    answer = Answer.objects.get()
    assert (answer.kind, answer.target) == (AnswerKind.DRAFT, "db")
    item.refresh_from_db()
    assert (item.status, item.final_answers) == (ItemStatus.READY, 0)


def test_submit_after_lease_was_taken_keeps_work_as_draft(ready_items, project, reviewer, second_reviewer) -> None:
    (item,) = ready_items(project, [0.5])
    queue.claim_next(project, reviewer, now=timezone.now() - timedelta(seconds=project.lease_seconds + 1))
    assert queue.claim_next(project, second_reviewer) == item

    outcome = queue.submit(item, reviewer, "dns")

    assert outcome.status == "draft"
    assert queue.submit(item, second_reviewer, "db").status == "submitted"
    assert {(a.reviewer.username, a.kind) for a in Answer.objects.all()} == {("rita", "draft"), ("sam", "target")}


def test_reclaiming_after_a_lost_lease_submits_the_draft(ready_items, project, reviewer) -> None:
    (item,) = ready_items(project, [0.5])
    queue.claim_next(project, reviewer, now=timezone.now() - timedelta(seconds=project.lease_seconds + 1))
    queue.submit(item, reviewer, "db")

    assert queue.claim_next(project, reviewer) == item
    assert queue.submit(item, reviewer, "db").status == "submitted"
    assert Answer.objects.get().kind == AnswerKind.TARGET


def test_a_draft_whose_lease_ended_takes_its_item_back_while_a_place_is_free(
        ready_items, project, reviewer, second_reviewer) -> None:
    first, second = ready_items(project, [0.4, 0.5])
    for item in (first, second):
        Claim.objects.create(item=item, reviewer=reviewer, expires_at=timezone.now() - timedelta(seconds=1))
        assert queue.submit(item, reviewer, "db").status == "draft"
    assert queue.claim_next(project, second_reviewer) == first  # someone else has the first one now

    assert queue.reclaim(first, reviewer) is False
    assert queue.reclaim(second, reviewer) is True
    assert queue.submit(second, reviewer, "db").status == "submitted"
    assert queue.reclaim(second, reviewer) is False  # answered: nothing to take back
    assert queue.submit(first, reviewer, "db").status == "draft"
    assert queue.submit(first, second_reviewer, "dns").status == "submitted"


def test_reclaim_under_overlap_two_counts_the_other_reviewers_place(
        ready_items, project, reviewer, second_reviewer) -> None:
    project.overlap = 2
    project.save(update_fields=["overlap"])
    (item,) = ready_items(project, [0.5])
    Claim.objects.create(item=item, reviewer=reviewer, expires_at=timezone.now() - timedelta(seconds=1))
    assert queue.submit(item, reviewer, "db").status == "draft"
    assert queue.claim_next(project, second_reviewer) == item

    assert queue.reclaim(item, reviewer) is True
    assert Claim.objects.filter(item=item, expires_at__gt=timezone.now()).count() == 2


def test_keep_starts_the_lease_again_from_now(ready_items, project, reviewer) -> None:
    (item,) = ready_items(project, [0.5])
    began = timezone.now()
    queue.claim_next(project, reviewer, now=began)
    later = began + timedelta(seconds=project.lease_seconds - 30)

    expires = queue.keep(item, reviewer, now=later)

    assert expires == later + timedelta(seconds=project.lease_seconds)
    assert Claim.objects.get(item=item, reviewer=reviewer).expires_at == expires
    item.refresh_from_db()
    assert (item.claimed_by, item.claim_expires_at) == (reviewer, expires)  # the mirror follows
    assert queue.submit(item, reviewer, "db", now=expires - timedelta(seconds=1)).status == "submitted"


def test_keep_takes_an_ended_lease_back_while_its_place_is_free(
        ready_items, project, reviewer, second_reviewer) -> None:
    first, second = ready_items(project, [0.4, 0.5])
    for item in (first, second):
        Claim.objects.create(item=item, reviewer=reviewer, expires_at=timezone.now() - timedelta(seconds=1))
    assert queue.claim_next(project, second_reviewer) == first  # the first one's place is someone else's now

    with pytest.raises(queue.NotKept, match="Another reviewer took this item"):
        queue.keep(first, reviewer)
    assert queue.keep(second, reviewer) > timezone.now()
    assert queue.holds_claim(second, reviewer) and not queue.holds_claim(first, reviewer)


@pytest.mark.parametrize(("setup", "reason"), [
    ("never claimed", "not assigned to you"),
    ("answered", "You have answered this item"),
    ("finished by others", "This item is finished"),
    ("waiting for a prediction", "no longer ready for review"),
])
def test_keep_refuses_an_item_that_cannot_be_theirs(
        ready_items, project, reviewer, second_reviewer, setup, reason) -> None:
    (item,) = ready_items(project, [0.5])
    if setup == "answered":
        queue.claim_next(project, reviewer)
        queue.submit(item, reviewer, "db")
    elif setup == "finished by others":
        Claim.objects.create(item=item, reviewer=reviewer, expires_at=timezone.now() - timedelta(seconds=1))
        assert queue.claim_next(project, second_reviewer) == item
        queue.submit(item, second_reviewer, "dns")
    elif setup == "waiting for a prediction":
        queue.claim_next(project, reviewer)
        Item.objects.filter(pk=item.pk).update(status=ItemStatus.PENDING)
    claims_before = list(Claim.objects.values_list("item_id", "reviewer_id", "expires_at"))

    with pytest.raises(queue.NotKept, match=reason):
        queue.keep(item, reviewer)
    assert list(Claim.objects.values_list("item_id", "reviewer_id", "expires_at")) == claims_before


def test_keep_is_for_members_only(ready_items, project, reviewer, outsider) -> None:
    (item,) = ready_items(project, [0.5])
    queue.claim_next(project, reviewer)
    with pytest.raises(PermissionDenied):
        queue.keep(item, outsider)


def test_skip_needs_a_reason_and_takes_the_item_out_of_the_queue(
    ready_items, project, reviewer, second_reviewer
) -> None:
    (item,) = ready_items(project, [0.5])
    queue.claim_next(project, reviewer)

    with pytest.raises(ValueError, match="skip_reason"):
        queue.skip(item, reviewer, "  ")
    outcome = queue.skip(item, reviewer, "inputs are garbled")

    assert outcome.status == "submitted"
    item.refresh_from_db()
    assert item.status == ItemStatus.SKIPPED
    assert Answer.objects.get().skip_reason == "inputs are garbled"
    assert queue.claim_next(project, second_reviewer) is None


def test_previous_walks_back_through_answered_items(ready_items, project, reviewer) -> None:
    items = ready_items(project, [0.1, 0.2, 0.3])
    for item in items:
        assert queue.claim_next(project, reviewer) == item
        queue.submit(item, reviewer, "db")

    assert queue.previous(project, reviewer) == items[2]
    assert queue.previous(project, reviewer, before=items[2]) == items[1]
    assert queue.previous(project, reviewer, before=items[0]) is None


def test_answer_and_previous_agrees_with_previous(ready_items, project, reviewer) -> None:
    """The item page's one query gives the reviewer's answer and the same "previous" as `previous`."""
    first, second, third = ready_items(project, [0.1, 0.2, 0.3])
    assert queue.answer_and_previous(project, reviewer, first) == (None, None)
    for item in (first, second):
        queue.claim_next(project, reviewer)
        queue.submit(item, reviewer, "db")
    queue.save_draft(third, reviewer, "dns")

    draft, previous = queue.answer_and_previous(project, reviewer, third)
    assert draft.kind == AnswerKind.DRAFT and previous == second.pk
    answer, previous = queue.answer_and_previous(project, reviewer, second)
    assert answer.is_final and previous == first.pk == queue.previous(project, reviewer, before=second).pk
    assert queue.answer_and_previous(project, reviewer, first)[1] is None


def test_undo_turns_last_answer_into_draft_and_gives_item_back(ready_items, project, reviewer) -> None:
    first, second = ready_items(project, [0.1, 0.2])
    queue.claim_next(project, reviewer)
    queue.submit(first, reviewer, "db")

    undone = queue.undo_last(project, reviewer)

    assert undone.kind == AnswerKind.DRAFT and undone.target == "db"
    first.refresh_from_db()
    assert (first.status, first.final_answers) == (ItemStatus.READY, 0)
    assert queue.claim_next(project, reviewer) == first
    assert list(AnswerRevision.objects.values_list("note", flat=True)) == ["", "undone"]
    assert queue.submit(first, reviewer, "dns").status == "submitted"


def test_undo_with_nothing_submitted_returns_none(ready_items, project, reviewer) -> None:
    assert queue.undo_last(project, reviewer) is None


def test_overlap_two_gives_each_item_to_two_different_reviewers(ready_items, project, reviewer, second_reviewer,
                                                                 project_admin) -> None:
    project.overlap = 2
    project.save()
    first, second = ready_items(project, [0.1, 0.2])

    assert queue.claim_next(project, reviewer) == first
    assert queue.claim_next(project, second_reviewer) == first
    assert queue.claim_next(project, project_admin) == second  # two claims on `first` already
    queue.submit(first, reviewer, "db")
    first.refresh_from_db()
    assert first.status == ItemStatus.READY
    assert queue.claim_next(project, reviewer) == second  # one claim (the admin's) on it so far
    queue.submit(first, second_reviewer, "dns")
    first.refresh_from_db()
    assert (first.status, first.final_answers) == (ItemStatus.DONE, 2)


def test_overlap_never_offers_a_reviewer_the_same_item_twice(ready_items, project, reviewer) -> None:
    project.overlap = 2
    project.save()
    (item,) = ready_items(project, [0.1])
    queue.claim_next(project, reviewer)
    queue.submit(item, reviewer, "db")

    assert queue.claim_next(project, reviewer) is None


def test_release_returns_item_at_once(ready_items, project, reviewer, second_reviewer) -> None:
    (item,) = ready_items(project, [0.5])
    queue.claim_next(project, reviewer)

    queue.release(item, reviewer)

    assert queue.claim_next(project, second_reviewer) == item


def test_removing_a_member_releases_their_claims_and_keeps_their_work(
    ready_items, project, reviewer, second_reviewer
) -> None:
    first, second = ready_items(project, [0.1, 0.2])
    queue.claim_next(project, reviewer)
    queue.submit(first, reviewer, "db")
    assert queue.claim_next(project, reviewer) == second

    project.memberships.get(user=reviewer).delete()

    assert not Claim.objects.exists()
    second.refresh_from_db()
    assert second.claimed_by is None
    assert Answer.objects.get(reviewer=reviewer).target == "db"
    assert queue.claim_next(project, second_reviewer) == second


def test_overlap_cannot_be_lowered_below_existing_answers(ready_items, project, reviewer, second_reviewer) -> None:
    from django.core.exceptions import ValidationError

    project.overlap = 2
    project.save()
    (item,) = ready_items(project, [0.1])
    for user in (reviewer, second_reviewer):
        queue.claim_next(project, user)
        queue.submit(item, user, "db")

    project.overlap = 1
    with pytest.raises(ValidationError, match="already have 2 answers"):
        project.full_clean()


def test_a_lowered_overlap_finishes_the_items_that_already_have_enough_answers(ready_items, project, reviewer,
                                                                            second_reviewer) -> None:
    project.overlap = 3
    project.save()
    answered, skipped, once, untouched = ready_items(project, [0.1, 0.2, 0.3, 0.4])
    for user in (reviewer, second_reviewer):
        assert queue.claim_next(project, user) == answered
        queue.submit(answered, user, "db")
        assert queue.claim_next(project, user) == skipped
        queue.skip(skipped, user, "unreadable")
    assert queue.claim_next(project, reviewer) == once
    queue.submit(once, reviewer, "db")

    project.overlap = 2
    project.save()
    assert queue.apply_overlap(project) == (2, 0)

    statuses = dict(Item.objects.filter(project=project).values_list("pk", "status"))
    assert statuses == {answered.pk: ItemStatus.DONE, skipped.pk: ItemStatus.SKIPPED, once.pk: ItemStatus.READY,
                        untouched.pk: ItemStatus.READY}
    assert Answer.objects.filter(item__project=project).count() == 5  # nothing lost
    assert queue.claim_next(project, second_reviewer) == once  # the one still lacking an answer
    assert queue.apply_overlap(project) == (0, 0)  # safe to repeat


def test_a_claim_on_an_item_a_lowered_overlap_finished_keeps_its_answer_as_a_draft_and_says_why(
        ready_items, project, reviewer, second_reviewer) -> None:
    project.overlap = 2
    project.save()
    (item,) = ready_items(project, [0.1])
    assert queue.claim_next(project, reviewer) == item
    assert queue.claim_next(project, second_reviewer) == item
    queue.submit(item, reviewer, "db")
    project.overlap = 1
    project.save()
    assert queue.apply_overlap(project) == (1, 0)

    claim = Claim.objects.get(item=item, reviewer=second_reviewer)
    assert claim.expires_at <= timezone.now()  # the lease ended; the claim, with what they typed, stays
    assert Item.objects.get(pk=item.pk).claim_expires_at <= timezone.now()
    with pytest.raises(queue.NotKept):
        queue.keep(Item.objects.get(pk=item.pk), second_reviewer)
    outcome = queue.submit(Item.objects.get(pk=item.pk), second_reviewer, "dns")

    assert (outcome.status, outcome.message) == ("draft", queue.FINISHED_MEANWHILE)
    assert (outcome.answer.kind, outcome.answer.target) == (AnswerKind.DRAFT, "dns")
    assert outcome.answer.revisions.get().note == "kept as draft: item finished"


def test_a_raised_overlap_sends_finished_items_back_for_the_answers_they_lack(ready_items, project, reviewer,
                                                                            second_reviewer, project_admin) -> None:
    from annotate import adjudication

    project.overlap = 2
    project.save()
    disputed, agreed, single = ready_items(project, [0.1, 0.2, 0.3])
    for user, target in ((reviewer, "db"), (second_reviewer, "dns")):
        assert queue.claim_next(project, user) == disputed
        queue.submit(disputed, user, target)
        assert queue.claim_next(project, user) == agreed
        queue.submit(agreed, user, "db")
    adjudication.adjudicate(Item.objects.get(pk=disputed.pk), project_admin, target="db")
    project.overlap = 1
    project.save()
    assert queue.claim_next(project, reviewer) == single
    queue.submit(single, reviewer, "db")

    project.overlap = 3
    project.save()
    assert queue.apply_overlap(project) == (0, 2)

    statuses = dict(Item.objects.filter(project=project).values_list("pk", "status"))
    assert statuses == {disputed.pk: ItemStatus.DONE, agreed.pk: ItemStatus.READY, single.pk: ItemStatus.READY}
    assert queue.claim_next(project, reviewer) is None  # never the same reviewer twice
    assert queue.claim_next(project, second_reviewer) == single
    queue.submit(single, second_reviewer, "db")
    assert Item.objects.get(pk=single.pk).status == ItemStatus.READY  # two of three answers


def test_a_submit_settles_its_item_by_the_overlap_saved_after_its_request_read_the_project(
        ready_items, project, reviewer, second_reviewer) -> None:
    """A request reads the project first; an admin may change the overlap before its submit writes."""
    project.overlap = 3
    project.save()
    lowered, raised = ready_items(project, [0.1, 0.2])
    assert queue.claim_next(project, reviewer) == lowered
    queue.submit(lowered, reviewer, "db")
    assert queue.claim_next(project, second_reviewer) == lowered
    read_before = Project.objects.get(pk=project.pk)  # overlap 3
    project.overlap = 2
    project.save()
    assert queue.apply_overlap(project) == (0, 0)  # one answer each: nothing to finish yet

    lowered.project = read_before
    assert queue.submit(lowered, second_reviewer, "dns").status == "submitted"

    assert Item.objects.get(pk=lowered.pk).status == ItemStatus.DONE  # two answers of the two it now needs
    assert queue.claim_next(project, reviewer) == raised
    read_before = Project.objects.get(pk=project.pk)  # overlap 2
    project.overlap = 3
    project.save()
    queue.apply_overlap(project)
    raised.project = read_before
    queue.submit(raised, reviewer, "db")
    assert queue.claim_next(project, second_reviewer) == raised
    queue.submit(raised, second_reviewer, "db")
    assert Item.objects.get(pk=raised.pk).status == ItemStatus.READY  # two answers of three


def test_a_claim_gives_no_place_the_overlap_saved_after_its_request_read_the_project_lacks(
        ready_items, project, reviewer, second_reviewer, django_user_model) -> None:
    """An admin lowered the overlap between a request's read of the project and its claim (or the Keep of a
    lease that had ended): the item is full under the new overlap, and no second reviewer is given it."""
    project.overlap = 2
    project.save()
    (item,) = ready_items(project, [0.1])
    assert queue.claim_next(project, reviewer) == item
    staff = django_user_model.objects.create_user("staff", is_staff=True)  # not a member: its own check
    read_before = Project.objects.get(pk=project.pk)  # overlap 2: a place left
    project.overlap = 1
    project.save()

    assert queue.claim_next(read_before, second_reviewer) is None
    assert queue.claim_next(read_before, staff) is None

    Claim.objects.filter(item=item, reviewer=reviewer).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert queue.claim_next(project, second_reviewer) == item  # the place the ended lease left
    item.project = Project.objects.get(pk=project.pk)
    item.project.overlap = 2
    with pytest.raises(queue.NotKept, match="Another reviewer took this item"):
        queue.keep(item, reviewer)
    assert list(Claim.objects.filter(item=item, expires_at__gt=timezone.now()).values_list(
        "reviewer", flat=True)) == [second_reviewer.pk]


def _two_answers(project, item, reviewer, second_reviewer, first: str, second: str) -> None:
    project.overlap = 2
    project.save()
    for user, target in ((reviewer, first), (second_reviewer, second)):
        assert queue.claim_next(project, user) == item
        queue.submit(item, user, target)
    item.refresh_from_db()


def test_different_targets_mark_the_item_as_a_disagreement(ready_items, project, reviewer, second_reviewer) -> None:
    (item,) = ready_items(project, [0.1])

    _two_answers(project, item, reviewer, second_reviewer, "db", "dns")

    assert item.disagreement is True


def test_equal_targets_and_a_single_target_are_no_disagreement(ready_items, project, reviewer,
                                                                second_reviewer) -> None:
    agreed, single = ready_items(project, [0.1, 0.2])
    _two_answers(project, agreed, reviewer, second_reviewer, "db", "db")
    queue.claim_next(project, reviewer)
    queue.submit(single, reviewer, "dns")
    single.refresh_from_db()

    assert (agreed.disagreement, single.disagreement) == (False, False)


def test_edit_and_undo_keep_the_disagreement_flag_current(ready_items, project, reviewer, second_reviewer) -> None:
    (item,) = ready_items(project, [0.1])
    _two_answers(project, item, reviewer, second_reviewer, "db", "dns")

    queue.submit(item, second_reviewer, "db")  # an edit: now they agree
    item.refresh_from_db()
    assert item.disagreement is False

    queue.submit(item, second_reviewer, "dns")
    queue.undo_last(project, second_reviewer)  # sam's answer becomes a draft: one target left
    item.refresh_from_db()
    assert (item.disagreement, item.final_answers) == (False, 1)
