"""Items whose prediction message was lost: the project page says so to admins, one click queues them again, and
the scheduler's sweep queues them again by itself once the workers are idle."""

from __future__ import annotations

from datetime import timedelta

import pytest
from celery import Celery
from django.urls import reverse
from django.utils import timezone

from annotate import broker, tasks
from annotate.models import Item, ItemStatus, Prediction, Project
from tests.conftest import BROKER_KEYPREFIX, REDIS_URL

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


@pytest.fixture
def idle_broker(monkeypatch) -> list:
    """The prediction queue as the sweep sees it: empty unless a test puts a count in the list."""
    waiting = [0]
    monkeypatch.setattr(broker, "waiting_messages", lambda task: waiting[0])
    return waiting


def test_the_sweep_queues_lost_predictions_again_once_per_wait_while_the_workers_are_idle(
        client, project, project_admin, sent, idle_broker, django_capture_on_commit_callbacks) -> None:
    waiting = _waiting(project, minutes=11, n=tasks.PREDICT_BATCH + 1)

    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.resend_stale_work() == 1
        assert tasks.resend_stale_work() == 0  # once per wait

    assert [ids for _, ids, _ in sent] == [[i.pk for i in waiting[:tasks.PREDICT_BATCH]], [waiting[-1].pk]]
    project.refresh_from_db()
    assert timezone.now() - project.predictions_resent_at < timedelta(minutes=1)
    client.force_login(project_admin)
    page = client.get(reverse("project_detail", args=[project.slug])).content.decode()
    assert "The scheduler queues them again once the workers are idle (it last did 0\xa0minutes ago)" in page

    Project.objects.filter(pk=project.pk).update(predictions_resent_at=timezone.now() - timedelta(minutes=11))
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.resend_stale_work() == 1  # still waiting a wait later: sent again
    assert len(sent) == 4


@pytest.mark.parametrize("busy", ["a prediction a moment ago", "messages in the queue", "a broker that cannot say",
                                  "items waiting a short while", "no model"])
def test_the_sweep_leaves_waiting_items_alone_unless_the_workers_are_idle(project, sent, idle_broker, busy) -> None:
    items = _waiting(project, minutes=5 if busy == "items waiting a short while" else 30)
    if busy == "a prediction a moment ago":  # a long queue being worked through, in any project
        Prediction.objects.create(item=items[0], model_version=project.current_version, receipt={},
                                  created_at=timezone.now() - timedelta(minutes=2))
    elif busy == "messages in the queue":  # a worker that is down, or busy with other work
        idle_broker[0] = 3
    elif busy == "a broker that cannot say":
        idle_broker[0] = None
    elif busy == "no model":
        Project.objects.filter(pk=project.pk).update(current_version=None)

    assert tasks.resend_stale_work() == 0

    assert sent == []
    project.refresh_from_db()
    assert project.predictions_resent_at is None


def _count_on(app: Celery) -> None:
    app.conf.task_routes = {"count.elsewhere": {"queue": "other"}}

    @app.task(name="count.predict")
    def predict() -> None: ...

    @app.task(name="count.elsewhere")
    def elsewhere() -> None: ...

    assert broker.waiting_messages(predict) == 0  # a queue the broker has not seen yet holds nothing
    predict.delay()
    predict.delay()
    elsewhere.delay()

    assert broker.waiting_messages(predict) == 2 and broker.waiting_messages(elsewhere) == 1


def test_waiting_messages_counts_what_waits_in_the_task_queue(tmp_path) -> None:
    folder = tmp_path / "queue"
    folder.mkdir()
    app = Celery("count", broker="filesystem://", set_as_current=False)
    app.conf.broker_transport_options = {"data_folder_in": str(folder), "data_folder_out": str(folder)}
    _count_on(app)


@pytest.mark.redis
def test_waiting_messages_counts_a_redis_queue_under_a_key_prefix() -> None:
    import redis

    prefix = f"{BROKER_KEYPREFIX}count-"
    app = Celery("count", broker=REDIS_URL, set_as_current=False)
    app.conf.broker_transport_options = {"global_keyprefix": prefix}
    try:
        _count_on(app)
    finally:
        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(f"{prefix}*"):
            client.delete(key)
