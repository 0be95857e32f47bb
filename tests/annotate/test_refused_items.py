"""Items whose inputs the model refuses: recorded with the model's reason, shown where people look, never sent to
the same model again by the sweep, and tried by the next version promoted."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from annotate import tasks
from annotate.models import ApiToken, Item, ItemStatus
from annotate.progress import project_progress
from tests.annotate.conftest import decision_input

pytestmark = pytest.mark.django_db

# Stored before a schema change, say: the tool now needs hypotheses to rank.
NO_HYPOTHESES = {"question": "Why did the cache stop?", "evidence": [{"source_id": "log", "text": "evicted"}]}
REASON = "inputs: missing 'hypotheses'"


@pytest.fixture
def refused(project) -> Item:
    """An item the project's model refused 11 minutes ago (older than the sweep's wait)."""
    made = timezone.now() - timedelta(minutes=11)
    item = Item.objects.create(project=project, inputs=NO_HYPOTHESES, created_at=made)
    tasks.predict_items(project.pk, [item.pk])
    item.refresh_from_db()
    return item


def test_a_refused_item_keeps_the_models_reason_and_the_others_in_its_batch_are_predicted(project) -> None:
    good = [Item.objects.create(project=project, inputs=decision_input(n)) for n in range(2)]
    bad = Item.objects.create(project=project, inputs=NO_HYPOTHESES)

    made = tasks.predict_items(project.pk, [good[0].pk, bad.pk, good[1].pk])

    assert made == 2
    bad.refresh_from_db()
    assert bad.status == ItemStatus.REFUSED and bad.prediction is None
    assert bad.refusal == f"version {project.current_version_id} (untrained): {REASON}"
    assert set(Item.objects.filter(pk__in=[g.pk for g in good]).values_list("status", flat=True)) == {"ready"}


def test_predicting_a_refused_item_again_changes_nothing(project, refused) -> None:
    assert tasks.predict_items(project.pk, [refused.pk]) == 0

    again = Item.objects.get(pk=refused.pk)
    assert (again.status, again.refusal) == (ItemStatus.REFUSED, refused.refusal)


def test_a_refused_item_that_a_model_accepts_becomes_ready_and_forgets_the_refusal(project, refused) -> None:
    Item.objects.filter(pk=refused.pk).update(inputs=decision_input(7))  # as a version that accepts it would see it

    assert tasks.predict_items(project.pk, [refused.pk]) == 1

    item = Item.objects.get(pk=refused.pk)
    assert (item.status, item.refusal) == (ItemStatus.READY, "") and item.prediction is not None


def test_an_item_an_earlier_version_predicted_stays_ready_when_refused(project) -> None:
    item = Item.objects.create(project=project, inputs=NO_HYPOTHESES, status=ItemStatus.READY)

    assert tasks.predict_items(project.pk, [item.pk]) == 0

    item.refresh_from_db()
    assert (item.status, item.refusal) == (ItemStatus.READY, "")


def test_a_very_long_reason_is_cut_to_the_field(project) -> None:
    item = Item.objects.create(project=project, inputs={**NO_HYPOTHESES, "hypotheses": "x" * 2000})

    tasks.predict_items(project.pk, [item.pk])

    item.refresh_from_db()
    assert item.status == ItemStatus.REFUSED and 0 < len(item.refusal) <= Item._meta.get_field("refusal").max_length


def test_the_sweep_does_not_send_refused_items_again(project, refused, monkeypatch) -> None:
    sent = []
    monkeypatch.setattr(tasks.predict_items, "delay", lambda *args: sent.append(args))
    monkeypatch.setattr(tasks.broker, "waiting_messages", lambda task: 0)

    assert not tasks.waited_too_long(project)
    assert tasks.resend_lost_predictions(timezone.now()) == 0
    assert tasks.requeue_waiting(project) == 0 and sent == []


def test_admins_see_how_many_were_refused_why_and_where(client, project, project_admin, refused) -> None:
    client.force_login(project_admin)

    page = client.get(reverse("project_detail", args=[project.slug])).content.decode()

    assert (f"The model refused the inputs of 1 item (the latest: <q>version {project.current_version_id} "
            "(untrained): inputs: missing &#x27;hypotheses&#x27;</q>)") in page
    assert f'{reverse("item_list", args=[project.slug])}?status=refused' in page
    assert "None ready for review: the model refused the inputs of 1 item." in page
    assert "refused by the model" in page  # the count among the statuses


def test_reviewers_see_the_count_but_not_the_admins_notice(client, project, reviewer, refused) -> None:
    Item.objects.create(project=project, inputs=decision_input(1))  # and one still waiting
    client.force_login(reviewer)

    page = client.get(reverse("project_detail", args=[project.slug])).content.decode()
    home = client.get(reverse("home")).content.decode()

    assert "the latest:" not in page
    for shown in (page, home):
        assert "None ready for review: 1 waits for a prediction, and the model refused the inputs of 1 item." in shown


def test_a_project_without_refusals_does_not_list_the_status(client, project, reviewer) -> None:
    Item.objects.create(project=project, inputs=decision_input(1))
    client.force_login(reviewer)

    page = client.get(reverse("project_detail", args=[project.slug])).content.decode()

    assert "refused by the model" not in page
    assert [status for status, _, _ in project_progress(project).counts] == ["pending", "ready", "done", "skipped"]


def test_progress_counts_refused_items_with_their_own_colour(client, project, reviewer, refused) -> None:
    client.force_login(reviewer)

    assert ("refused", "Refused by the model", 1) in project_progress(project).counts
    page = client.get(reverse("project_progress", args=[project.slug])).content.decode()
    assert "status-refused" in page


def test_the_item_page_says_why_it_cannot_be_reviewed(client, project, reviewer, refused) -> None:
    client.force_login(reviewer)

    page = client.get(reverse("item_detail", args=[project.slug, refused.pk])).content.decode()

    assert (f"The model refused this item&#x27;s inputs (version {project.current_version_id} (untrained): inputs: "
            "missing &#x27;hypotheses&#x27;). The next model version promoted tries them again.") in page
    assert "No prediction: the model refused this item's inputs." in page and "No prediction yet" not in page


def test_the_item_list_filters_refused_items_and_shows_the_reason(client, project, reviewer, refused) -> None:
    Item.objects.create(project=project, inputs=decision_input(1))
    client.force_login(reviewer)

    page = client.get(reverse("item_list", args=[project.slug]), {"status": "refused"}).content.decode()

    assert "1 matching item (filtered)" in page
    assert (f'class="refusal">version {project.current_version_id} (untrained): inputs: missing '
            '&#x27;hypotheses&#x27;</span>') in page


def test_the_api_gives_a_refused_items_status_and_reason(client, project, reviewer, refused) -> None:
    key = ApiToken.objects.issue(reviewer)[1]

    body = client.get(f"/api/projects/{project.slug}/items/{refused.pk}", HTTP_AUTHORIZATION=f"Bearer {key}").json()

    assert body["status"] == "refused"
    assert body["refusal"] == f"version {project.current_version_id} (untrained): {REASON}"
