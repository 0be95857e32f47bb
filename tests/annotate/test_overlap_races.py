"""An overlap changed while a reviewer's submit is in flight applies to that submit's item too.

The submit decides from the overlap whether its answer finishes the item; `queue.apply_overlap` finishes or
reopens items by the new one. Without a lock in common each decided from what the other had not committed: a
lowered overlap left the item ready with every answer it needs (no reviewer could claim it, nothing finished it),
a raised one left it finished short of an answer. Played out on PostgreSQL with two connections: the submit's
transaction held open, the change seen waiting for it, then both committed.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction
from django.utils import timezone

from annotate import queue
from annotate.models import Answer, Item, ItemStatus, Membership, Project, Role
from tests.annotate.conftest import project_admin_form
from tests.annotate.races import Other, second_waits
from tests.conftest import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL's locks")]


def set_overlap(project: Project, overlap: int) -> None:
    project.overlap = overlap
    project.save(update_fields=["overlap"])


def change_overlap(project: Project, overlap: int):
    """What the settings page does, on a project read of its own: save the overlap, then apply it."""
    def work() -> tuple[int, int]:
        Project.objects.filter(pk=project.pk).update(overlap=overlap)
        return queue.apply_overlap(Project.objects.get(pk=project.pk))
    return work


def submit_held(item: Item, user, target: str) -> tuple[Other, threading.Event]:
    """`user` submits `target` on `item` in a transaction kept open; started, submitted, not yet committed."""
    commit = threading.Event()
    submitter = Other(lambda: queue.submit(item, user, target).status, hold=commit)
    submitter.start()
    assert submitter.ready.wait(timeout=30)
    assert (submitter.error, submitter.result) == (None, "submitted")
    return submitter, commit


def change_while_held(project: Project, overlap: int, submitter: Other, commit: threading.Event) -> Other:
    changer = Other(change_overlap(project, overlap))
    second_waits(submitter, commit, changer, what="the overlap's change to wait for the submit in flight")
    return changer


def test_an_overlap_lowered_while_the_last_answer_it_needs_is_submitted_finishes_the_item(
        ready_items, project, reviewer, second_reviewer) -> None:
    set_overlap(project, 3)
    (item,) = ready_items(project, [0.1])
    assert queue.claim_next(project, reviewer) == item
    queue.submit(item, reviewer, "db")
    assert queue.claim_next(project, second_reviewer) == item
    submitter, commit = submit_held(item, second_reviewer, "dns")  # the item's second answer, of three

    changer = change_while_held(project, 2, submitter, commit)

    assert changer.result == (1, 0)
    item.refresh_from_db()
    assert (item.status, item.final_answers) == (ItemStatus.DONE, 2)


def test_an_overlap_raised_while_an_answer_is_submitted_sends_the_item_back_for_the_one_it_lacks(
        ready_items, project, reviewer, second_reviewer) -> None:
    (item,) = ready_items(project, [0.1])  # overlap 1
    assert queue.claim_next(project, reviewer) == item
    submitter, commit = submit_held(item, reviewer, "db")  # finishes the item, at overlap 1

    changer = change_while_held(project, 2, submitter, commit)

    assert changer.result == (0, 1)
    item.refresh_from_db()
    assert (item.status, item.final_answers) == (ItemStatus.READY, 1)
    assert queue.claim_next(Project.objects.get(pk=project.pk), second_reviewer) == item


def test_submits_in_flight_do_not_wait_for_each_other(ready_items, project, reviewer, second_reviewer) -> None:
    first, second = ready_items(project, [0.1, 0.2])
    assert queue.claim_next(project, reviewer) == first
    assert queue.claim_next(project, second_reviewer) == second
    one, commit_one = submit_held(first, reviewer, "db")

    other, commit_other = submit_held(second, second_reviewer, "db")  # while the first is still open

    commit_one.set()
    commit_other.set()
    one.join(timeout=30)
    other.join(timeout=30)
    assert Answer.objects.filter(item__in=[first, second]).count() == 2


def test_the_django_admin_lowering_a_projects_overlap_while_an_answer_is_submitted(
        ready_items, project, reviewer, django_user_model, rf, monkeypatch) -> None:
    """Django's admin saves in one transaction, and applies the overlap once it has committed. Applied inside it
    while the admin could also rename the project, the overlap waited for a submit in flight that was itself
    waiting for that transaction's lock on the project's row (a new answer refers to its project, and a changed
    slug locked the row against that): PostgreSQL broke the deadlock by failing one of them. The slug is fixed
    there now; the submit still finishes its item under the new overlap."""
    from django.contrib.admin.sites import site

    set_overlap(project, 2)
    (item,) = ready_items(project, [0.1])
    assert queue.claim_next(project, reviewer) == item
    submits: list[Other] = []
    apply_overlap = queue.apply_overlap

    def submit_then_apply(applied: Project) -> tuple[int, int]:
        """The reviewer's submit comes in just before the overlap is applied."""
        commit = threading.Event()
        submitter = Other(lambda: queue.submit(item, reviewer, "db").status, hold=commit)
        submits.append(submitter)
        submitter.start()
        wait_for(lambda: submitter.ready.is_set() or submitter.blocked_or_done(), timeout=30,
                 what="the submit to be made or to wait for a lock")
        commit.set()
        return apply_overlap(applied)

    monkeypatch.setattr(queue, "apply_overlap", submit_then_apply)
    request = rf.post("/")
    request.user = django_user_model.objects.create_superuser("root", password="a-long-password")
    form = project_admin_form(request, project, overlap=1)
    assert form.is_valid(), form.errors

    with transaction.atomic():  # as the admin's change view saves
        site._registry[Project].save_model(request, form.save(commit=False), form, change=True)
    (submitter,) = submits
    submitter.join(timeout=30)

    assert (submitter.error, submitter.result) == (None, "submitted")
    item.refresh_from_db()
    assert (item.status, item.final_answers) == (ItemStatus.DONE, 1)


def test_a_lease_kept_while_the_overlap_is_raised_and_the_new_place_taken_is_kept(
        ready_items, project, reviewer, second_reviewer, django_user_model) -> None:
    """A keep read the overlap before it locked the item and counted the claims after: an overlap raised, and the
    place it opened taken, in between left it counting the new claim against the old overlap, and the reviewer,
    whose lease had not ended, was told another reviewer took the item after it did (seen in the 20-reviewer test)."""
    third = django_user_model.objects.create_user("tess")
    Membership.objects.create(project=project, user=third, role=Role.REVIEWER)
    set_overlap(project, 2)
    (item,) = ready_items(project, [0.1])
    assert queue.claim_next(project, reviewer) == item
    assert queue.claim_next(project, second_reviewer) == item
    keeper = Other(lambda: queue.keep(item, reviewer))

    with transaction.atomic():  # the overlap raised to 3, and its new place claimed, as one commit
        Project.objects.filter(pk=project.pk).update(overlap=3)
        assert queue.claim_next_id(Project.objects.get(pk=project.pk), third) == item.pk  # holds the item's row
        keeper.start()  # reads the overlap that is committed: 2
        wait_for(keeper.blocked_or_done, timeout=30, what="the keep to wait for the claim's lock on the item")
    keeper.join(timeout=30)

    assert keeper.error is None, keeper.error
    assert item.claims.filter(expires_at__gt=timezone.now()).count() == 3
