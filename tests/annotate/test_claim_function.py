"""The claim as a PostgreSQL function (migration 0005) picks exactly what the Python steps pick.

`annotate.queue` claims with one call of `annotate_claim_next` on PostgreSQL and with `_claim_next_in_python`
elsewhere. `test_queue.py` runs every queue behaviour on both; here random states (overlaps, ties, held,
expired and foreign claims, drafts and final answers, pending and finished items) are claimed both ways from
the same savepoint, and the item chosen and the claims left behind must be the same.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from annotate import hotpath, queue
from annotate.models import Answer, AnswerKind, Claim, Item, ItemStatus, Membership, Role
from tests.annotate.conftest import make_ready_items

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def _state(project) -> tuple:
    claims = sorted(Claim.objects.filter(item__project=project).values_list("item_id", "reviewer_id", "expires_at"))
    mirrors = sorted(Item.objects.filter(project=project).values_list("id", "claimed_by_id", "claim_expires_at"))
    return claims, mirrors


def _claim_both_ways(project, user, now) -> tuple[tuple, tuple]:
    """(item id, state after) by the database function and by the Python steps, each from the same savepoint."""
    outcomes = []
    for in_database in (True, False):
        savepoint = transaction.savepoint()
        if in_database:
            picked = hotpath.claim_next_in_database(project, user, ItemStatus.READY, now,
                                                    now + timedelta(seconds=project.lease_seconds), 20)
        else:
            item = queue._claim_next_in_python(project, user, now, now + timedelta(seconds=project.lease_seconds))
            picked = item.pk if item else None
        outcomes.append((picked, _state(project)))
        transaction.savepoint_rollback(savepoint)
    return outcomes[0], outcomes[1]


@pytest.mark.parametrize("seed", range(12))
def test_the_function_claims_what_the_python_steps_claim(seed, project, reviewer, second_reviewer,
                                                         django_user_model) -> None:
    rng = random.Random(seed)
    now = timezone.now()
    project.overlap = rng.choice([1, 2, 3])
    project.save(update_fields=["overlap"])
    others = [django_user_model.objects.create_user(f"extra{k}") for k in range(2)]
    Membership.objects.bulk_create(Membership(project=project, user=u, role=Role.REVIEWER) for u in others)
    team = [reviewer, second_reviewer, *others]
    items = make_ready_items(project, [rng.choice([None, 0.1, 0.5, 0.5, 0.9]) for _ in range(14)])
    for item in items:
        item.status = rng.choice([ItemStatus.READY] * 5 + [ItemStatus.PENDING, ItemStatus.DONE])
        for user in team:
            roll = rng.random()
            if roll < 0.15:
                Claim.objects.create(item=item, reviewer=user, created_at=now - timedelta(minutes=rng.randrange(60)),
                                     expires_at=now + timedelta(minutes=rng.choice([-5, 5, 20])))
            elif roll < 0.3:
                kind = rng.choice([AnswerKind.TARGET, AnswerKind.SKIP, AnswerKind.DRAFT])
                Answer.objects.create(item=item, reviewer=user, kind=kind, target="db", source={})
                item.final_answers += kind != AnswerKind.DRAFT
        item.save(update_fields=["status", "final_answers"])

    claimed = 0
    for _ in range(30):
        user = rng.choice(team)
        by_function, by_python = _claim_both_ways(project, user, now)
        assert by_function == by_python
        if by_function[0] is None:
            continue
        claimed += 1
        queue.claim_next_id(project, user, now=now)  # keep the claim, so the next round starts from it
        if rng.random() < 0.5:
            queue.submit(Item.objects.get(pk=by_function[0]), user, "db", now=now)
    assert claimed  # every seed gives the team something to claim
