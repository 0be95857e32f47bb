"""Twenty reviewers claiming and submitting at once on PostgreSQL: never more claims than the overlap allows.

Each simulated reviewer is a thread with its own session (a signed-in `Client`) and its own database connection,
going through the site's views as the browser does: `review/next`, then submit, whose answer is the next item;
every third item is kept first (its lease renewed, as the page does for a reviewer still working on it).
They loop for `TC_CONCURRENCY_SECONDS` (default 5 s, so the suite stays quick; the proof of issue 11 is
`TC_CONCURRENCY_SECONDS=60`), or until the queue is empty, and then stop by themselves. Meanwhile a monitor
checks, over and over, that no item has more active claims than its overlap leaves open. Afterwards: every
submission a reviewer saw succeed is stored exactly once and nothing else is, no item has more answers than the
overlap, every item with `overlap` answers is done, and no request was answered with a 5xx. A third run starts
at overlap 2 and has the project's admin raise it to 3 on the settings page while the reviewers work: the same
checks hold for the new overlap.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Count, F, Q
from django.db.models.functions import Now
from django.test import Client
from django.urls import reverse

from annotate.models import Answer, AnswerKind, Item, ItemStatus, Membership, Prediction, Project, Role
from tests.conftest import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

REVIEWERS = 20
SECONDS = float(os.environ.get("TC_CONCURRENCY_SECONDS", "5"))
# Enough items that the queue normally outlasts the run (the run stops early, and still checks, if it drains).
ITEMS = int(os.environ.get("TC_CONCURRENCY_ITEMS", str(max(100, int(80 * SECONDS)))))
INPUTS = {
    "question": "Why did the service fail?",
    "evidence": [{"source_id": "log", "text": "The disk filled up."}],
    "hypotheses": [{"id": "disk", "text": "The disk filled up."}, {"id": "dns", "text": "DNS broke."}],
}


class Run:
    """What the reviewers saw, shared between their threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.submitted: Counter = Counter()  # (item id, reviewer id) -> submits seen to succeed
        self.errors: list[str] = []
        self.server_errors: list[str] = []
        self.too_many_claims: list[tuple] = []
        self.requests = 0

    def record(self, response, what: str) -> None:
        with self.lock:
            self.requests += 1
            if response.status_code >= 500:
                self.server_errors.append(f"{what}: HTTP {response.status_code}")


def _project(overlap: int, items: int) -> tuple[Project, list]:
    users = get_user_model()
    owner = users.objects.create_user(f"owner{overlap}")
    project = Project.objects.create(
        slug=f"load-{overlap}", name="load", tool="decision", mode="rank", overlap=overlap, created_by=owner
    )
    reviewers = [users.objects.create_user(f"r{overlap}-{k}") for k in range(REVIEWERS)]
    Membership.objects.bulk_create(Membership(project=project, user=u, role=Role.REVIEWER) for u in reviewers)
    Membership.objects.create(project=project, user=owner, role=Role.ADMIN)
    made = Item.objects.bulk_create(
        Item(project=project, inputs=INPUTS, status=ItemStatus.READY, confidence=(k % 97) / 97) for k in range(items)
    )
    predictions = Prediction.objects.bulk_create(
        Prediction(item=item, confidence=item.confidence,
                   receipt={"kind": "ranking", "selected_id": "disk", "confidence": item.confidence})
        for item in made
    )
    for item, prediction in zip(made, predictions, strict=True):
        item.prediction = prediction
    Item.objects.bulk_update(made, ["prediction"])
    return project, reviewers


def _reviewer(project: Project, user, deadline: float, run: Run) -> None:
    """Claim, then submit each item shown until the time is up or the queue is empty."""
    client = Client(raise_request_exception=False)
    try:
        client.force_login(user)
        response = client.post(reverse("review_next", args=[project.slug]), HTTP_HX_REQUEST="true")
        run.record(response, "review/next")
        url = response.headers.get("HX-Push-Url")
        while url and time.monotonic() < deadline:
            item_id = int(url.rstrip("/").rsplit("/", 1)[1])
            if item_id % 3 == 0:  # their lease is active: keeping it must succeed, and take no one's place
                response = client.post(url + "keep/", HTTP_HX_REQUEST="true")
                run.record(response, f"keep item {item_id}")
                if response.status_code != 200:
                    raise AssertionError(f"keep item {item_id}: HTTP {response.status_code}: "
                                         f"{response.content[:300]!r}")
            response = client.post(url + "submit/", {"choice": "disk" if item_id % 3 else "dns"},
                                   HTTP_HX_REQUEST="true")
            run.record(response, f"submit item {item_id}")
            following = response.headers.get("HX-Push-Url")
            if response.status_code != 200 or following == url:  # a lease lost, or an error page
                raise AssertionError(f"item {item_id}: HTTP {response.status_code}: {response.content[:300]!r}")
            with run.lock:
                run.submitted[(item_id, user.pk)] += 1
            url = following  # the submit's answer is the next item, or the empty queue
    except Exception as exc:  # noqa: BLE001 - any error is a failure of the run, reported below
        with run.lock:
            run.errors.append(f"{user.username}: {type(exc).__name__}: {exc}")
    finally:
        connection.close()


def _admin_raises(project: Project, overlap: int, run: Run, deadline: float) -> None:
    """The project's admin raises the overlap on its settings page once the reviewers are well under way."""
    client = Client(raise_request_exception=False)
    try:
        client.force_login(project.created_by)
        def under_way() -> bool:
            with run.lock:
                return sum(run.submitted.values()) >= 2 * REVIEWERS or time.monotonic() > deadline - SECONDS / 2

        wait_for(under_way, timeout=SECONDS + 60, what="the reviewers to get going")
        response = client.post(reverse("project_settings", args=[project.slug]), {
            "name": project.name, "guidelines": "", "configuration": "{}", "overlap": overlap,
            "lease_seconds": project.lease_seconds})
        run.record(response, "settings")
        if response.status_code != 302:
            raise AssertionError(f"settings: HTTP {response.status_code}: {response.content[:300]!r}")
    except Exception as exc:  # noqa: BLE001 - reported below
        with run.lock:
            run.errors.append(f"admin: {type(exc).__name__}: {exc}")
    finally:
        connection.close()


def _crowded(project: Project) -> list[tuple]:
    """Items whose active claims exceed the places their answers leave under the overlap as it is now (one query,
    so one snapshot)."""
    return list(
        Item.objects.filter(project=project)
        .annotate(active=Count("claims", filter=Q(claims__expires_at__gt=Now())))
        .filter(active__gt=F("project__overlap") - F("final_answers"))
        .values_list("pk", "active", "final_answers")
    )


def _monitor(project: Project, stop: threading.Event, run: Run) -> None:
    """Check `_crowded` again and again until `stop`."""
    try:
        while not stop.is_set():
            crowded = _crowded(project)
            if crowded:
                with run.lock:
                    run.too_many_claims.extend(crowded)
            stop.wait(0.01)
    finally:
        connection.close()


@pytest.mark.parametrize(("overlap", "raised"), [(1, None), (2, None), (2, 3)],
                         ids=["overlap 1", "overlap 2", "overlap 2 raised to 3 meanwhile"])
def test_twenty_reviewers_never_exceed_the_overlap(transactional_db, overlap: int, raised: int | None) -> None:
    """With `raised`, the admin raises the overlap halfway: the items finished by then, and those being finished
    as it is applied, go back to the queue, and every item ends as the new overlap says."""
    project, reviewers = _project(overlap, items=ITEMS)
    run = Run()
    stop = threading.Event()
    deadline = time.monotonic() + SECONDS
    threads = [threading.Thread(target=_reviewer, args=(project, user, deadline, run)) for user in reviewers]
    if raised:
        threads.append(threading.Thread(target=_admin_raises, args=(project, raised, run, deadline)))
        overlap = raised
    monitor = threading.Thread(target=_monitor, args=(project, stop, run))
    monitor.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=SECONDS + 60)
    stop.set()
    monitor.join(timeout=60)

    assert not any(thread.is_alive() for thread in [*threads, monitor]), "a reviewer thread did not stop"
    assert run.errors == []
    assert run.server_errors == []
    assert run.too_many_claims == []
    assert sum(run.submitted.values()) > 0
    answers = Answer.objects.filter(item__project=project)
    assert not answers.exclude(kind=AnswerKind.TARGET).exists()  # no draft: no lease was lost
    stored = Counter(answers.values_list("item_id", "reviewer_id"))
    assert stored == run.submitted  # nothing lost, nothing duplicated
    per_item = Counter(item_id for item_id, _ in stored)
    assert max(per_item.values()) <= overlap
    for item in Item.objects.filter(project=project):
        finished = per_item[item.pk] == overlap
        assert item.final_answers == per_item[item.pk]
        assert item.status == (ItemStatus.DONE if finished else ItemStatus.READY)
    assert _crowded(project) == []
