"""Deleting the items an admin's item-list filters match: a confirmation that counts what goes, then only those
items (with their answers and the rest), never more than were counted, and not while a job reads the answers."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from annotate import deletion
from annotate.models import Answer, AnswerRevision, Claim, Item, ItemDeletion, ItemStatus, Prediction
from tests.annotate.conftest import decision_input
from trainingjobs.models import JobState, TrainingJob

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("deletion_worker")]


@pytest.fixture
def items(deletable_items) -> list[Item]:
    return deletable_items


def _deletion_url(project) -> str:
    return reverse("items_deletion", args=[project.slug, ItemDeletion.objects.latest("pk").pk])


def _url(project, **filters) -> str:
    query = "&".join(f"{name}={value}" for name, value in filters.items())
    return reverse("items_delete", args=[project.slug]) + (f"?{query}" if query else "")


def _confirm(client, project, through, expected, **filters):
    return client.post(reverse("items_delete", args=[project.slug]),
                       {**filters, "through": through, "expected": expected})


def test_the_item_list_offers_admins_to_delete_what_matches(client, project, project_admin, reviewer, items) -> None:
    client.force_login(project_admin)
    page = client.get(reverse("item_list", args=[project.slug]), {"confidence_max": "0.2"}).content.decode()
    assert f'href="{_url(project, confidence_max="0.2")}" id="delete-matching">Delete the matching items…' in page
    unfiltered = client.get(reverse("item_list", args=[project.slug])).content.decode()
    assert f'href="{_url(project)}" id="delete-matching">Delete all items…' in unfiltered
    client.force_login(reviewer)
    assert "delete-matching" not in client.get(reverse("item_list", args=[project.slug])).content.decode()


def test_the_page_counts_what_goes_and_who_is_labelling_it(client, project, project_admin, items) -> None:
    client.force_login(project_admin)

    page = client.get(_url(project, confidence_max="0.2")).content.decode()

    assert "Delete 2 items of Outages" in page
    assert "<strong>Confidence at most</strong> <code>0.2</code>" in page
    for kind, rows in (("Items", 2), ("Predictions", 2), ("Answer", 1), ("Answer revision", 1), ("Claim", 1)):
        assert f'<tr><td>{kind}</td><td class="num">{rows}</td></tr>' in page
    assert "1 reviewer is labelling 1 item right now" in page
    assert f'name="through" value="{items[1].pk}"' in page and 'name="expected" value="2"' in page
    assert "export them</a> first" in page
    unanswered = client.get(_url(project, confidence_min="0.3")).content.decode()
    assert "Delete 2 items of Outages" in unanswered and "export them" not in unanswered
    assert "is labelling" not in unanswered


def test_confirming_deletes_the_matching_items_and_what_goes_with_them(client, project, project_admin,
                                                                       items) -> None:
    client.force_login(project_admin)

    response = _confirm(client, project, items[1].pk, 2, confidence_max="0.2")

    assert response.status_code == 302 and response["Location"] == _deletion_url(project)
    assert list(project.items.values_list("pk", flat=True)) == [items[2].pk, items[3].pk]
    assert not Answer.objects.exists() and not AnswerRevision.objects.exists() and not Claim.objects.exists()
    assert Prediction.objects.count() == 2
    page = client.get(response["Location"]).content.decode()
    assert "<strong>Confidence at most</strong> <code>0.2</code>" in page
    assert f'href="{reverse("item_list", args=[project.slug])}?confidence_max=0.2" id="deletion-list"' in page
    deleted = page.split('id="deletion-done">Deleted ')[1].split(".")[0].split(", ")
    assert deleted[:2] == ["2 items", "2 predictions"]  # most first
    assert sorted(deleted[2:]) == ["1 answer", "1 answer revision", "1 claim"]


def test_an_item_imported_after_the_page_was_read_stays(client, project, project_admin, items) -> None:
    client.force_login(project_admin)
    later = Item.objects.create(project=project, inputs=decision_input(9))  # pending: matches no filter but this

    response = _confirm(client, project, items[-1].pk, 4)

    assert response.status_code == 302
    assert list(project.items.values_list("pk", flat=True)) == [later.pk]


def test_a_count_that_changed_deletes_nothing_and_counts_again(client, project, project_admin, items) -> None:
    client.force_login(project_admin)
    Item.objects.filter(pk=items[0].pk).update(confidence=0.9)  # a new prediction meanwhile: no longer matches

    response = _confirm(client, project, items[1].pk, 2, confidence_max="0.2")

    assert response.status_code == 409 and project.items.count() == 4
    page = response.content.decode()
    assert "Nothing was deleted: the filters now match 1 of the items counted here before, not 2." in page
    assert 'name="expected" value="1"' in page  # counted afresh, to confirm again
    with_htmx = client.post(reverse("items_delete", args=[project.slug]),
                            {"confidence_max": "0.2", "through": items[1].pk, "expected": 2}, HTTP_HX_REQUEST="true")
    assert with_htmx["HX-Redirect"] == _url(project, confidence_max="0.2") and project.items.count() == 4
    assert "Nothing was deleted" in client.get(with_htmx["HX-Redirect"]).content.decode()


@pytest.mark.parametrize("fields", [{}, {"through": "x", "expected": "-1"}, {"through": "1" * 30, "expected": "4"}])
def test_a_post_without_the_pages_counts_deletes_nothing(client, project, project_admin, items, fields) -> None:
    client.force_login(project_admin)

    response = client.post(reverse("items_delete", args=[project.slug]), fields)

    assert response.status_code == 400 and project.items.count() == 4
    assert "Nothing was deleted: the request did not say which items it counted." in response.content.decode()


def test_a_waiting_training_job_blocks_it(client, project, project_admin, items) -> None:
    TrainingJob.objects.create(project=project, state=JobState.PENDING)
    client.force_login(project_admin)

    page = client.get(_url(project)).content.decode()
    response = _confirm(client, project, items[-1].pk, 4)

    assert "Items cannot be deleted while work still reads the project's answers" in page
    assert 'id="delete-items"' not in page
    assert response.status_code == 409 and project.items.count() == 4


def test_a_job_launched_midway_stops_it_and_the_page_says_what_went(client, project, project_admin, items,
                                                                    monkeypatch) -> None:
    real_run, real_rows = deletion.run_deletion, deletion.delete_rows

    def launching(rows):  # an admin launches a training job as the first batch commits
        done = real_rows(rows)
        TrainingJob.objects.get_or_create(project=project, state=JobState.PENDING)
        return done

    monkeypatch.setattr(deletion, "run_deletion", lambda pk: real_run(pk, batch=2))
    monkeypatch.setattr(deletion, "delete_rows", launching)
    client.force_login(project_admin)

    response = _confirm(client, project, items[-1].pk, 4)

    page = client.get(response["Location"]).content.decode()
    assert project.items.count() == 2 and ItemDeletion.objects.get().state == "STOPPED"
    job = TrainingJob.objects.get()
    assert (f"Stopped: training job {job.pk} is waiting (cancel it on the training page). Deleted before it stopped: "
            "2 items, 2 predictions, ") in page
    assert 'id="deletion-count">2 of 4 items deleted<' in page
    again = client.get(_url(project)).content.decode()
    assert "Items cannot be deleted while work still reads the project's answers" in again
    assert 'id="delete-items"' not in again and '<tr><td>Items</td><td class="num">2</td></tr>' in again


def test_bad_filters_go_back_to_the_list_that_names_them(client, project, project_admin, items) -> None:
    client.force_login(project_admin)

    response = client.get(_url(project, status="lost"))

    assert response.status_code == 302 and response["Location"] == reverse("item_list", args=[project.slug]) + (
        "?status=lost")
    assert "unknown status &#x27;lost&#x27;" in client.get(response["Location"]).content.decode()


def test_only_admins_delete_items_and_only_by_post_with_csrf(client, project, reviewer, outsider, project_admin,
                                                              items) -> None:
    client.force_login(reviewer)
    assert client.get(_url(project)).status_code == 403
    assert _confirm(client, project, items[-1].pk, 4).status_code == 403
    client.force_login(outsider)
    assert client.get(_url(project)).status_code == 404
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(project_admin)
    assert strict.post(reverse("items_delete", args=[project.slug]),
                       {"through": items[-1].pk, "expected": 4}).status_code == 403
    assert project.items.count() == 4 and Item.objects.filter(status=ItemStatus.READY).count() == 4


def test_filters_that_match_nothing_offer_nothing_to_delete(client, project, project_admin, items) -> None:
    client.force_login(project_admin)

    page = client.get(_url(project, status="refused")).content.decode()
    listed = client.get(reverse("item_list", args=[project.slug]), {"status": "refused"}).content.decode()

    assert "No items to delete in Outages" in page and "No item matches these filters now: nothing would go." in page
    assert 'id="delete-items"' not in page and "delete-matching" not in listed
    confirmed = _confirm(client, project, items[-1].pk, 0, status="refused")
    assert confirmed.status_code == 302 and project.items.count() == 4
    assert "No item matched these filters: nothing was deleted." in client.get(confirmed.url).content.decode()


@pytest.mark.parametrize(("name", "value", "gone"), [
    ("status", "ready", 4), ("reviewer", "rita", 1), ("confidence_min", "0.25", 2), ("disagreement", "no", 4),
    ("version", None, 4), ("q", "service 2", 1),
])
def test_each_filter_of_the_list_counts_and_deletes_its_matches(client, project, project_admin, items, name, value,
                                                                 gone) -> None:
    import re

    filters = {name: value if value is not None else str(project.current_version_id)}
    client.force_login(project_admin)

    page = client.get(_url(project, **filters)).content.decode()
    through = int(re.search(r'name="through" value="(\d+)"', page).group(1))
    expected = int(re.search(r'name="expected" value="(\d+)"', page).group(1))
    response = _confirm(client, project, through, expected, **filters)

    assert expected == gone and response.status_code == 302
    assert project.items.count() == 4 - gone
