"""Deletions of items queued from the delete page or the API (`ItemDeletion`): the request counts and stores the
ids, a worker deletes them in batches and writes its progress with each, the page follows it, and a run cut short,
sent twice or lost goes on where it ended, deleting nothing it did not count."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.urls import reverse
from django.utils import timezone

from annotate import deletion, tasks
from annotate.models import Answer, ApiToken, Item, ItemDeletion, Membership
from tests.conftest import start_in_thread
from trainingjobs.models import JobState, TrainingJob

pytestmark = pytest.mark.django_db


@pytest.fixture
def items(deletable_items) -> list[Item]:
    return deletable_items


@pytest.fixture
def queued(monkeypatch) -> list[int]:
    """The deletions sent to the workers: none runs until the test runs it."""
    sent: list[int] = []
    monkeypatch.setattr(tasks.delete_matching_items, "delay_on_commit", sent.append)
    return sent


def _confirm(client, project, items, **filters):
    return client.post(reverse("items_delete", args=[project.slug]),
                       {**filters, "through": items[-1].pk, "expected": len(items)})


def _page(client, row: ItemDeletion, **headers):
    return client.get(reverse("items_deletion", args=[row.project.slug, row.pk]), **headers)


def test_confirming_queues_the_deletion_and_its_page_follows_it(client, project, project_admin, items,
                                                                queued) -> None:
    client.force_login(project_admin)

    response = _confirm(client, project, items)

    row = ItemDeletion.objects.get()
    assert queued == [row.pk] and project.items.count() == 4  # the request deletes nothing itself
    assert row.item_ids == [item.pk for item in items] and row.total == 4 and row.requested_by == project_admin
    assert response["Location"] == reverse("items_deletion", args=[project.slug, row.pk])
    page = _page(client, row).content.decode()
    assert "Delete 4 items of Outages" in page and 'id="deletion-count">0 of 4 items deleted<' in page
    assert "Waiting for a worker" in page and 'hx-trigger="every 1s"' in page
    assert _page(client, row, HTTP_HX_REQUEST="true").status_code == 200  # the page keeps polling

    assert tasks.delete_matching_items(row.pk) == "SUCCEEDED"

    polled = _page(client, row, HTTP_HX_REQUEST="true")
    assert polled.status_code == 286  # done: htmx stops polling
    text = polled.content.decode()
    assert 'id="deletion-count">4 of 4 items deleted<' in text and "hx-trigger" not in text
    assert 'id="deletion-done">Deleted 4 items, 4 predictions, 1 claim, 1 answer, 1 answer revision.' in text
    assert not project.items.exists()


def test_sent_twice_it_deletes_once_and_counts_once(project, project_admin, items, queued) -> None:
    row = deletion.queue_matching(project, _all(project), through=items[-1].pk, expected=4, user=project_admin)

    assert tasks.delete_matching_items(row.pk) == "SUCCEEDED"
    assert tasks.delete_matching_items(row.pk) == "skipped"

    row.refresh_from_db()
    assert row.deleted_items == 4 and row.deleted == {"annotate.item": 4, "annotate.prediction": 4,
                                                      "annotate.answer": 1, "annotate.answerrevision": 1,
                                                      "annotate.claim": 1}


def test_a_run_cut_short_goes_on_where_its_last_batch_ended(project, project_admin, items, queued,
                                                            monkeypatch) -> None:
    row = deletion.queue_matching(project, _all(project), through=items[-1].pk, expected=4, user=project_admin)
    real, calls = deletion.delete_rows, []

    def dropping(rows):  # the database goes away during the second batch
        calls.append(1)
        if len(calls) == 2:
            raise OperationalError("server closed the connection unexpectedly")
        return real(rows)

    monkeypatch.setattr(deletion, "delete_rows", dropping)
    monkeypatch.setattr(deletion, "run_deletion", lambda pk, _real=deletion.run_deletion: _real(pk, batch=1))
    with pytest.raises(OperationalError):  # raised for the task's retry
        tasks.delete_matching_items.run(row.pk)
    row.refresh_from_db()
    assert row.state == "RUNNING" and row.deleted_items == 1 and project.items.count() == 3

    assert tasks.delete_matching_items(row.pk) == "SUCCEEDED"

    row.refresh_from_db()
    assert row.deleted_items == 4 and row.deleted["annotate.prediction"] == 4 and not project.items.exists()


def test_items_that_stop_matching_or_are_imported_later_stay(project, project_admin, items, queued,
                                                              ready_items) -> None:
    filters = _all(project, confidence_max="0.2")
    row = deletion.queue_matching(project, filters, through=items[1].pk, expected=2, user=project_admin)
    Item.objects.filter(pk=items[0].pk).update(confidence=0.9)  # predicted again meanwhile: no longer matches
    later = ready_items(project, [0.1])

    tasks.delete_matching_items(row.pk)

    row.refresh_from_db()
    assert row.state == "SUCCEEDED" and row.deleted_items == 1
    assert set(project.items.values_list("pk", flat=True)) == {items[0].pk, items[2].pk, items[3].pk, later[0].pk}


def test_the_page_says_that_items_which_stopped_matching_stay(client, project, project_admin, items, queued) -> None:
    row = deletion.queue_matching(project, _all(project), through=items[-1].pk, expected=4, user=project_admin)
    Item.objects.filter(pk=items[0].pk).delete()  # deleted meanwhile, by another admin
    tasks.delete_matching_items(row.pk)
    client.force_login(project_admin)

    page = _page(client, row).content.decode()

    assert ("Deleted 3 items, 3 predictions, 1 claim. 1 of the items counted was not deleted: it no longer matched the "
            "filters, or was gone already.") in page


def test_a_job_launched_after_the_confirmation_stops_it_before_the_first_batch(client, project, project_admin,
                                                                               items, queued) -> None:
    row = deletion.queue_matching(project, _all(project), through=items[-1].pk, expected=4, user=project_admin)
    job = TrainingJob.objects.create(project=project, state=JobState.PENDING)

    assert tasks.delete_matching_items(row.pk) == "STOPPED"

    row.refresh_from_db()
    assert row.reason == f"Stopped: training job {job.pk} is waiting (cancel it on the training page)."
    assert project.items.count() == 4 and row.deleted_items == 0
    client.force_login(project_admin)
    assert f"Stopped: training job {job.pk} is waiting" in _page(client, row).content.decode()


def test_filters_that_no_longer_apply_fail_it_and_delete_nothing(project, project_admin, reviewer, items,
                                                                  queued) -> None:
    row = deletion.queue_matching(project, _all(project, reviewer="rita"), through=items[0].pk, expected=1,
                                  user=project_admin)
    Membership.objects.filter(project=project, user=reviewer).delete()
    Answer.objects.filter(reviewer=reviewer).delete()  # the reviewer is gone from the project

    assert tasks.delete_matching_items(row.pk) == "FAILED"

    row.refresh_from_db()
    assert row.reason.startswith("Its filters no longer apply (reviewer: no reviewer 'rita' in this project)")
    assert project.items.count() == 4


def test_an_unexpected_error_fails_it_with_the_reason_and_keeps_what_went(client, project, project_admin, items,
                                                                          queued, monkeypatch) -> None:
    row = deletion.queue_matching(project, _all(project), through=items[-1].pk, expected=4, user=project_admin)
    monkeypatch.setattr(deletion, "delete_rows", lambda rows: 1 / 0)

    assert tasks.delete_matching_items(row.pk) == "FAILED"

    client.force_login(project_admin)
    page = _page(client, row).content.decode()
    assert "The deletion failed (ZeroDivisionError); what it deleted is counted here." in page
    assert project.items.count() == 4


def test_a_deletion_waiting_or_silent_too_long_is_sent_again(client, project, project_admin, items,
                                                             monkeypatch) -> None:
    sent = []
    for _, _, task in tasks._resendable(timezone.now()):
        monkeypatch.setattr(task, "delay", lambda pk, _name=task.name: sent.append((_name, pk)))
    old = timezone.now() - timedelta(minutes=30)
    lost = ItemDeletion.objects.create(project=project, total=1, created_at=old, sent_at=old)
    silent = ItemDeletion.objects.create(project=project, total=1, state="RUNNING", created_at=old, sent_at=old,
                                         heartbeat_at=old)
    ItemDeletion.objects.create(project=project, total=1, state="RUNNING", created_at=old, sent_at=old,
                                heartbeat_at=timezone.now())  # alive
    ItemDeletion.objects.create(project=project, total=1, state="SUCCEEDED", created_at=old, sent_at=old)

    assert tasks.resend_stale_work() == 2

    assert sent == [(tasks.delete_matching_items.name, lost.pk), (tasks.delete_matching_items.name, silent.pk)]
    client.force_login(project_admin)
    assert "Not done after more than 10 minutes. Is a worker running" in _page(client, lost).content.decode()
    assert "Its worker has written no progress since" in _page(client, silent).content.decode()


def test_the_delete_page_says_a_deletion_is_under_way(client, project, project_admin, items, queued) -> None:
    row = deletion.queue_matching(project, _all(project), through=items[1].pk, expected=2, user=project_admin)
    client.force_login(project_admin)

    page = client.get(reverse("items_delete", args=[project.slug])).content.decode()

    assert "A deletion of 2 items is under way" in page
    assert reverse("items_deletion", args=[project.slug, row.pk]) in page


def test_only_the_projects_admins_see_a_deletion(client, project, project_admin, reviewer, outsider, items,
                                                 queued) -> None:
    row = deletion.queue_matching(project, _all(project), through=items[-1].pk, expected=4, user=project_admin)

    client.force_login(reviewer)
    assert _page(client, row).status_code == 403
    client.force_login(outsider)
    assert _page(client, row).status_code == 404


def test_the_api_queues_it_and_says_how_it_goes(client, project, project_admin, reviewer, items, queued) -> None:
    key = ApiToken.objects.issue(project_admin)[1]
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"}

    response = client.delete(f"/api/projects/outages/items?expected=4&through={items[-1].pk}", **headers)

    row = ItemDeletion.objects.get()
    assert response.status_code == 202 and response["Location"] == f"/api/deletions/{row.pk}"
    assert response.json()["state"] == "PENDING" and response.json()["total"] == 4 and queued == [row.pk]
    tasks.delete_matching_items(row.pk)
    detail = client.get(response["Location"], **headers).json()
    assert detail["state"] == "SUCCEEDED" and detail["deleted_items"] == 4
    assert detail["deleted"] == {"items": 4, "predictions": 4, "answers": 1, "answer_revisions": 1, "claims": 1}
    reviewer_key = ApiToken.objects.issue(reviewer)[1]
    assert client.get(response["Location"], HTTP_AUTHORIZATION=f"Bearer {reviewer_key}").status_code == 404


def _stop(client, row: ItemDeletion, **headers):
    return client.post(reverse("items_deletion_stop", args=[row.project.slug, row.pk]), **headers)


def test_a_waiting_deletion_stopped_from_its_page_deletes_nothing(client, project, project_admin, items,
                                                                  queued) -> None:
    row = deletion.queue_matching(project, _all(project), through=items[-1].pk, expected=4, user=project_admin)
    client.force_login(project_admin)
    assert 'id="deletion-stop">Stop deleting<' in _page(client, row).content.decode()

    response = _stop(client, row, HTTP_HX_REQUEST="true")

    text = response.content.decode()
    assert response.status_code == 200 and 'id="deletion-state">Stopped<' in text
    assert "Stopped by ada before any item was deleted." in text
    assert "deletion-stop" not in text and "hx-trigger" not in text  # nothing left to stop or follow
    assert tasks.delete_matching_items(row.pk) == "skipped"  # the worker that takes it later deletes nothing
    assert project.items.count() == 4
    assert _page(client, row, HTTP_HX_REQUEST="true").status_code == 286


def test_stopping_without_javascript_redirects_to_the_page_and_says_when_it_had_ended(client, project,
                                                                                      project_admin, items,
                                                                                      queued) -> None:
    row = deletion.queue_matching(project, _all(project), through=items[-1].pk, expected=4, user=project_admin)
    client.force_login(project_admin)
    page = reverse("items_deletion", args=[project.slug, row.pk])

    assert _stop(client, row)["Location"] == page
    again = client.post(reverse("items_deletion_stop", args=[project.slug, row.pk]), follow=True)

    assert "Nothing to stop: this deletion has already ended (stopped)." in again.content.decode()
    row.refresh_from_db()
    assert row.state == "STOPPED" and row.reason == "Stopped by ada before any item was deleted."
    late = _stop(client, row, HTTP_HX_REQUEST="true")  # a second tab: it gets the status as it ended
    assert late.status_code == 200 and 'id="deletion-state">Stopped<' in late.content.decode()
    assert "Nothing to stop" not in client.get(reverse("item_list", args=[project.slug])).content.decode()


def test_only_the_projects_admins_stop_a_deletion(client, project, project_admin, reviewer, outsider, items,
                                                 queued) -> None:
    row = deletion.queue_matching(project, _all(project), through=items[-1].pk, expected=4, user=project_admin)

    assert _stop(client, row).status_code == 302 and "/accounts/login/" in _stop(client, row)["Location"]
    client.force_login(reviewer)
    assert _stop(client, row).status_code == 403
    client.force_login(outsider)
    assert _stop(client, row).status_code == 404
    client.force_login(project_admin)
    assert client.get(reverse("items_deletion_stop", args=[project.slug, row.pk])).status_code == 405
    row.refresh_from_db()
    assert row.state == "PENDING"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_stopped_midway_the_batch_in_flight_is_undone_and_what_went_stays_gone(project, project_admin, items,
                                                                               queued, monkeypatch) -> None:
    """The stop commits at once; the batch a worker is deleting then finds its deletion stopped when it writes
    its progress, and rolls back: the counts stay exactly what went."""
    row = deletion.queue_matching(project, _all(project), through=items[-1].pk, expected=4, user=project_admin)
    deleting, go_on = threading.Event(), threading.Event()
    real, calls = deletion.delete_rows, []

    def second_batch_waits(rows):
        counts = real(rows)
        calls.append(1)
        if len(calls) == 2:
            deleting.set()
            go_on.wait(timeout=60)
        return counts

    monkeypatch.setattr(deletion, "delete_rows", second_batch_waits)
    outcome: dict = {}
    worker = start_in_thread(outcome, "worker", lambda: deletion.run_deletion(row.pk, batch=1))
    assert deleting.wait(timeout=60)
    stopped = deletion.stop(row.pk, by=project_admin)  # not held up by the batch: it has not written yet
    go_on.set()
    worker.join(timeout=60)

    assert stopped.state == "STOPPED" and stopped.reason == "Stopped by ada."
    assert outcome["worker"] == "STOPPED"
    row.refresh_from_db()
    assert (row.state, row.deleted_items, row.reason) == ("STOPPED", 1, "Stopped by ada.")
    assert list(project.items.order_by("pk").values_list("pk", flat=True)) == [item.pk for item in items[1:]]
    with pytest.raises(deletion.AlreadyOver, match=r"already ended \(stopped\)"):
        deletion.stop(row.pk, by=project_admin)


def test_the_api_stops_a_deletion(client, project, project_admin, reviewer, items, queued) -> None:
    row = deletion.queue_matching(project, _all(project), through=items[-1].pk, expected=4, user=project_admin)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.objects.issue(project_admin)[1]}"}
    url = f"/api/deletions/{row.pk}/stop"
    reviewer_key = ApiToken.objects.issue(reviewer)[1]

    assert client.post(url, HTTP_AUTHORIZATION=f"Bearer {reviewer_key}").status_code == 404
    assert client.get(url, **headers).status_code == 405
    response = client.post(url, **headers)

    assert response.status_code == 200
    body = response.json()
    assert body["state"] == "STOPPED" and body["reason"] == "Stopped by ada before any item was deleted."
    again = client.post(url, **headers)
    assert again.status_code == 409 and again.json() == {
        "error": "this deletion has already ended (stopped)", "state": "STOPPED"}
    assert tasks.delete_matching_items(row.pk) == "skipped" and project.items.count() == 4


def _all(project, **given):
    from annotate import itemlist

    return itemlist.ItemFilters.parse(project, given)
