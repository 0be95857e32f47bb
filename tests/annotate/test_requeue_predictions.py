"""Items whose prediction message was lost: the project page says so to admins, and one click queues them again."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from annotate import tasks
from annotate.models import Item, ItemStatus

pytestmark = pytest.mark.django_db

INPUTS = {"question": "q", "evidence": [{"source_id": "a", "text": "t"}],
          "hypotheses": [{"id": "x", "text": "one"}, {"id": "y", "text": "two"}]}


@pytest.fixture
def sent(monkeypatch) -> list:
    sent = []
    monkeypatch.setattr(tasks.predict_items, "delay", lambda *args: sent.append(args))
    return sent


def _waiting(project, minutes: float, n: int = 2) -> list[Item]:
    made = timezone.now() - timedelta(minutes=minutes)
    return [Item.objects.create(project=project, inputs=INPUTS, status=ItemStatus.PENDING, created_at=made)
            for _ in range(n)]


def test_items_waiting_past_ten_minutes_are_shown_to_admins_with_the_way_out(client, project, project_admin,
                                                                             reviewer) -> None:
    _waiting(project, minutes=11)
    client.force_login(project_admin)

    page = client.get(reverse("project_detail", args=[project.slug])).content.decode()

    assert "2 items wait for a prediction, the oldest for more than 10 minutes" in page
    assert reverse("predictions_requeue", args=[project.slug]) in page
    client.force_login(reviewer)
    reviewers_page = client.get(reverse("project_detail", args=[project.slug])).content.decode()
    assert "the oldest for more than 10 minutes" not in reviewers_page


def test_items_waiting_a_short_while_are_not_called_stale(client, project, project_admin) -> None:
    _waiting(project, minutes=9)
    client.force_login(project_admin)

    page = client.get(reverse("project_detail", args=[project.slug])).content.decode()

    assert "None ready for review: 2 wait for a prediction." in page and "the oldest for more than" not in page
    assert not tasks.waited_too_long(project)


def test_requeue_sends_every_waiting_item_once(client, project, project_admin, sent,
                                               django_capture_on_commit_callbacks) -> None:
    waiting = _waiting(project, minutes=30, n=tasks.PREDICT_BATCH + 1)
    Item.objects.create(project=project, inputs=INPUTS, status=ItemStatus.READY)  # predicted: left alone
    client.force_login(project_admin)

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("predictions_requeue", args=[project.slug]), follow=True)

    assert [ids for _, ids, _ in sent] == [[i.pk for i in waiting[:tasks.PREDICT_BATCH]], [waiting[-1].pk]]
    assert f"Predictions queued again for {tasks.PREDICT_BATCH + 1} waiting items" in response.content.decode()


def test_requeue_is_for_admins_and_posts_only(client, project, reviewer, outsider, sent) -> None:
    _waiting(project, minutes=30)
    url = reverse("predictions_requeue", args=[project.slug])

    client.force_login(reviewer)
    assert client.post(url).status_code == 403
    client.force_login(outsider)
    assert client.post(url).status_code == 404
    assert client.get(url).status_code == 405
    assert sent == []


def test_without_a_model_the_page_says_items_wait_for_one(client, project, project_admin, sent) -> None:
    project.current_version = None  # the fixture's project has an untrained version; this one has none
    project.save(update_fields=["current_version"])
    _waiting(project, minutes=30)
    client.force_login(project_admin)

    page = client.get(reverse("project_detail", args=[project.slug])).content.decode()
    response = client.post(reverse("predictions_requeue", args=[project.slug]), follow=True)

    assert "2 wait for a prediction, and the project has no model yet: register or train one" in page
    assert "the oldest for more than" not in page
    assert "nothing was queued" in response.content.decode() and sent == []
