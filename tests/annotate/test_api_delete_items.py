"""`DELETE /api/projects/<slug>/items?<filters>`: a script deletes what the item list's filters match, once it has
said how many items it means, and never more (or, through a misspelt filter, every item)."""

from __future__ import annotations

import pytest

from annotate.models import Answer, ApiToken, Item, ItemStatus
from trainingjobs.models import JobState, TrainingJob

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("deletion_worker")]


@pytest.fixture
def items(deletable_items) -> list[Item]:
    return deletable_items


@pytest.fixture
def admin_key(project, project_admin) -> str:
    return ApiToken.objects.issue(project_admin, name="cleanup")[1]


def _delete(client, key: str, query: str = ""):
    return client.delete(f"/api/projects/outages/items{query}", HTTP_AUTHORIZATION=f"Bearer {key}")


def test_without_a_count_it_says_what_would_go_and_deletes_nothing(client, project, admin_key, items) -> None:
    response = _delete(client, admin_key, "?confidence_max=0.2")

    assert response.status_code == 428 and project.items.count() == 4
    body = response.json()
    assert (body["expected"], body["through"]) == (2, items[1].pk)
    assert body["rows"] == {"items": 2, "predictions": 2, "answers": 1, "answer_revisions": 1, "claims": 1}
    assert f"send the request again with expected=2&through={items[1].pk}" in body["error"]


def test_with_the_count_it_deletes_the_matching_items_and_what_goes_with_them(client, project, admin_key,
                                                                               items) -> None:
    response = _delete(client, admin_key, f"?confidence_max=0.2&expected=2&through={items[1].pk}")

    assert response.status_code == 202, response.content
    detail = client.get(response["Location"], HTTP_AUTHORIZATION=f"Bearer {admin_key}").json()
    assert detail["state"] == "SUCCEEDED" and detail["filters"] == {"confidence_max": "0.2"}
    assert detail["deleted"] == {"items": 2, "predictions": 2, "answers": 1, "answer_revisions": 1, "claims": 1}
    assert list(project.items.order_by("pk")) == items[2:] and not Answer.objects.exists()


def test_nothing_to_delete_is_answered_at_once(client, project, admin_key, items) -> None:
    response = _delete(client, admin_key, "?status=refused&expected=0")

    assert response.status_code == 200 and response.json() == {"deleted": {"items": 0}}


def test_items_imported_after_the_count_stay(client, project, admin_key, items, ready_items) -> None:
    through = _delete(client, admin_key).json()["through"]
    later = ready_items(project, [0.5])

    response = _delete(client, admin_key, f"?expected=4&through={through}")

    assert response.json()["total"] == 4 and list(project.items.all()) == later


def test_another_count_than_expected_deletes_nothing(client, project, admin_key, items) -> None:
    Item.objects.filter(pk=items[0].pk).update(status=ItemStatus.DONE)

    response = _delete(client, admin_key, "?status=ready&expected=4")

    assert response.status_code == 412 and project.items.count() == 4
    assert response.json() == {"error": "nothing was deleted: the filters now match 3 of the items counted before, "
                                        "not 4", "matching": 3}


@pytest.mark.parametrize(("query", "errors"), [
    ("?statu=ready&expected=4", {"statu": "not a filter of a deletion; use status, reviewer, confidence_min, "
                                          "confidence_max, disagreement, version, q, expected and through"}),
    ("?sort=-id&expected=4", {"sort": "not a filter of a deletion; use status, reviewer, confidence_min, "
                                      "confidence_max, disagreement, version, q, expected and through"}),
    ("?status=lost&expected=4", {"status": "unknown status 'lost'; choose one of pending, refused, ready, done, "
                                           "skipped"}),
    ("?expected=-1", {"expected": "expected a whole number, not '-1'"}),
    ("?expected=4&through=x", {"through": "expected a whole number, not 'x'"}),
])
def test_a_misspelt_or_impossible_parameter_deletes_nothing(client, project, admin_key, items, query,
                                                            errors) -> None:
    response = _delete(client, admin_key, query)

    assert response.status_code == 400 and project.items.count() == 4
    assert response.json()["errors"] == errors


def test_a_waiting_training_job_blocks_it(client, project, admin_key, items) -> None:
    job = TrainingJob.objects.create(project=project, state=JobState.PENDING)

    response = _delete(client, admin_key, "?expected=4")

    assert response.status_code == 409 and project.items.count() == 4
    assert response.json()["blockers"] == [f"training job {job.pk} is waiting (cancel it on the training page)"]


def test_only_the_projects_admins_delete_items(client, project, reviewer, outsider, items) -> None:
    reviewer_key = ApiToken.objects.issue(reviewer)[1]
    outsider_key = ApiToken.objects.issue(outsider)[1]

    assert _delete(client, reviewer_key, "?expected=4").status_code == 403
    assert _delete(client, outsider_key, "?expected=4").status_code == 404
    assert client.delete("/api/projects/outages/items?expected=4").status_code == 401
    assert project.items.count() == 4
