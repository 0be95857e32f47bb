"""A reviewer taken off a project or the site while a claim of theirs is in flight holds nothing afterwards.

A request checks membership, then claims. A removal (`Membership.delete`) or a deactivation (`accounts.deactivate`)
landing between the two used to leave a claim made after they released the reviewer's claims, holding the item
until its lease ended. Each order is played out on PostgreSQL with two connections: the one that comes second
is seen waiting for the first one's lock before the first commits.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from annotate import accounts, hotpath, queue
from annotate.models import Claim, Membership
from tests.annotate.races import Other, second_waits
from tests.conftest import wait_for

# Row locks are PostgreSQL's: SQLite runs one writer at a time.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL's row locks")]

TAKE_OFF = {
    "removed from the project": lambda project, user: Membership.objects.get(project=project, user=user).delete(),
    "deactivated": lambda project, user: accounts.deactivate(user),
}


@pytest.fixture(params=["database", "python"])
def claim_path(request, monkeypatch) -> str:
    """Both claim paths take the reviewer's row the same way: the database function, and the Python steps."""
    if request.param == "python":
        monkeypatch.setattr(hotpath, "claims_in_database", lambda: False)
    return request.param


def run_while_taken_off(take_off, other: Other) -> None:
    """Start `other` inside the transaction of `take_off()`, see it wait for that one's lock, then commit."""
    with transaction.atomic():
        take_off()
        other.start()  # its membership check reads what is committed: it is still a member
        wait_for(other.blocked_or_done, timeout=30, what="the claiming transaction to wait for the removal's lock")
    other.join(timeout=30)


@pytest.mark.parametrize("how", TAKE_OFF)
def test_a_claim_in_flight_while_the_reviewer_is_taken_off_is_refused(claim_path, ready_items, project, reviewer,
                                                                       how) -> None:
    ready_items(project, [0.1, 0.2])
    claimer = Other(lambda: queue.claim_next_id(project, reviewer))

    run_while_taken_off(lambda: TAKE_OFF[how](project, reviewer), claimer)

    assert claimer.error is None, claimer.error
    assert claimer.result is None  # refused once the removal committed
    assert not Claim.objects.filter(reviewer=reviewer).exists()


@pytest.mark.parametrize("how", TAKE_OFF)
def test_a_claim_made_just_before_the_reviewer_is_taken_off_is_released(claim_path, ready_items, project, reviewer,
                                                                        how) -> None:
    ready_items(project, [0.1, 0.2])
    commit = threading.Event()
    claimer = Other(lambda: queue.claim_next_id(project, reviewer), hold=commit)
    claimer.start()
    assert claimer.ready.wait(timeout=30)
    assert claimer.error is None and claimer.result is not None  # claimed, not yet committed
    remover = Other(lambda: TAKE_OFF[how](project, reviewer))

    second_waits(claimer, commit, remover, what="the removal to wait for the claim's lock")

    assert not Claim.objects.filter(reviewer=reviewer).exists()  # the removal saw the claim, and released it


def test_keeping_a_draft_while_the_reviewer_is_deactivated_is_refused(ready_items, project, reviewer) -> None:
    """A draft without a claim lets a reviewer take an item back (`queue.keep`): a deactivation in progress wins."""
    (item, _) = ready_items(project, [0.1, 0.2])
    queue.save_draft(item, reviewer, "db")
    keeper = Other(lambda: queue.keep(item, reviewer))

    run_while_taken_off(lambda: accounts.deactivate(reviewer), keeper)

    assert isinstance(keeper.error, queue.NotKept), keeper.error
    assert "no longer review" in str(keeper.error)
    assert not Claim.objects.filter(reviewer=reviewer).exists()


def test_an_undo_while_the_reviewer_is_deactivated_keeps_the_draft_and_claims_nothing(ready_items, project,
                                                                                    reviewer) -> None:
    """Undo gives the item back with a fresh claim (`queue.undo_last`): not to a reviewer deactivated meanwhile."""
    (item, _) = ready_items(project, [0.1, 0.2])
    assert queue.claim_next_id(project, reviewer) == item.pk
    queue.submit(item, reviewer, "db")
    undoer = Other(lambda: queue.undo_last(project, reviewer))

    run_while_taken_off(lambda: accounts.deactivate(reviewer), undoer)

    assert undoer.error is None, undoer.error
    assert undoer.result.kind == "draft"  # the work is kept, as a draft
    assert not Claim.objects.filter(reviewer=reviewer).exists()
