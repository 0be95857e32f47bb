"""Twenty reviewers claiming and submitting at once on PostgreSQL: never more claims than the overlap allows.

Each simulated reviewer is a thread with its own database connection, looping claim -> submit until the queue
is empty or the time is up (`TC_CONCURRENCY_SECONDS`, a cap of 120 s; the queue of `TC_CONCURRENCY_ITEMS` items
normally drains in seconds). The run stops by itself. Afterwards every item has exactly `overlap` answers, no
reviewer answered an item twice, every submission a reviewer saw succeed is stored exactly once, and no reviewer
hit an error.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from annotate import queue
from annotate.models import Answer, AnswerKind, Item, ItemStatus, Membership, Project, Role

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

REVIEWERS = 20
SECONDS = float(os.environ.get("TC_CONCURRENCY_SECONDS", "120"))
ITEMS = int(os.environ.get("TC_CONCURRENCY_ITEMS", "60"))
INPUTS = {
    "question": "Why did the service fail?",
    "evidence": [{"source_id": "log", "text": "The disk filled up."}],
    "hypotheses": [{"id": "disk", "text": "The disk filled up."}, {"id": "dns", "text": "DNS broke."}],
}


def _project(overlap: int, items: int) -> tuple[Project, list]:
    users = get_user_model()
    owner = users.objects.create_user(f"owner{overlap}")
    project = Project.objects.create(
        slug=f"load-{overlap}", name="load", tool="decision", mode="rank", overlap=overlap, created_by=owner
    )
    reviewers = [users.objects.create_user(f"r{overlap}-{k}") for k in range(REVIEWERS)]
    Membership.objects.bulk_create(Membership(project=project, user=u, role=Role.REVIEWER) for u in reviewers)
    Item.objects.bulk_create(
        Item(project=project, inputs=INPUTS, status=ItemStatus.READY, confidence=(k % 97) / 97) for k in range(items)
    )
    return project, reviewers


def _reviewer(project: Project, user, deadline: float, submitted: Counter, errors: list, lock: threading.Lock):
    try:
        while time.monotonic() < deadline:
            item = queue.claim_next(project, user)
            if item is None:
                return
            outcome = queue.submit(item, user, "disk" if item.pk % 3 else "dns")
            if outcome.status != "submitted":
                raise AssertionError(f"item {item.pk}: {outcome.status}: {outcome.message}")
            with lock:
                submitted[(item.pk, user.pk)] += 1
    except Exception as exc:  # noqa: BLE001 - any error is a failure of the run, reported below
        with lock:
            errors.append(f"{user.username}: {type(exc).__name__}: {exc}")
    finally:
        connection.close()


@pytest.mark.parametrize("overlap", [1, 2])
def test_twenty_reviewers_never_exceed_the_overlap(transactional_db, overlap: int) -> None:
    project, reviewers = _project(overlap, items=ITEMS)
    submitted: Counter = Counter()
    errors: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + SECONDS
    threads = [
        threading.Thread(target=_reviewer, args=(project, user, deadline, submitted, errors, lock))
        for user in reviewers
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=SECONDS + 60)

    assert not any(thread.is_alive() for thread in threads), "a reviewer thread did not stop"
    assert errors == []
    answers = Answer.objects.filter(item__project=project, kind=AnswerKind.TARGET)
    stored = Counter((a.item_id, a.reviewer_id) for a in answers)
    assert stored == submitted  # nothing lost, nothing duplicated
    per_item = Counter(item_id for item_id, _ in stored)
    assert set(per_item.values()) == {overlap}  # the queue drained: every item got exactly `overlap` answers
    assert len(per_item) == ITEMS
    for item in Item.objects.filter(project=project):
        assert (item.final_answers, item.status) == (overlap, ItemStatus.DONE)
