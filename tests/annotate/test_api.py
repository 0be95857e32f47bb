"""The JSON API: bearer tokens only, project reach, roles, all-or-nothing imports, exports."""

from __future__ import annotations

import json

import pytest

from annotate.models import ApiToken, Export, Item, Membership, Project, Role

pytestmark = pytest.mark.django_db

GOOD = {"question": "q", "evidence": [{"source_id": "a", "text": "t"}],
        "hypotheses": [{"id": "x", "text": "one"}, {"id": "y", "text": "two"}]}


@pytest.fixture
def admin_key(project, project_admin) -> str:
    return ApiToken.objects.issue(project_admin, name="ci")[1]


@pytest.fixture
def reviewer_key(project, reviewer) -> str:
    return ApiToken.objects.issue(reviewer)[1]


def _post(client, url: str, body, key: str | None, **headers):
    if key is not None:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post(url, data=data, content_type="application/json", **headers)


def test_import_through_api_creates_items(client, project, admin_key) -> None:
    response = _post(client, "/api/projects/outages/items", {"items": [{"inputs": GOOD}, {"inputs": GOOD}]},
                     admin_key)

    assert response.status_code == 201, response.content
    assert response.json()["created"] == 2
    assert list(Item.objects.values_list("pk", flat=True)) == response.json()["ids"]
    assert ApiToken.objects.get().last_used_at is not None


def test_api_without_token_is_unauthorized(client, project) -> None:
    response = _post(client, "/api/projects/outages/items", {"items": [{"inputs": GOOD}]}, None)

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert "Authorization: Bearer" in response.json()["error"]
    assert not Item.objects.exists()


def test_api_with_invalid_token_is_unauthorized(client, project) -> None:
    response = _post(client, "/api/projects/outages/items", {"items": [{"inputs": GOOD}]}, "tca_not-a-real-key")

    assert response.status_code == 401
    assert response.json()["error"] == "invalid or revoked API token"


def test_api_with_revoked_token_is_unauthorized(client, project, admin_key) -> None:
    ApiToken.objects.update(revoked_at="2026-01-01T00:00:00Z")

    assert client.get("/api/projects", HTTP_AUTHORIZATION=f"Bearer {admin_key}").status_code == 401


def test_api_ignores_session_login(client, project, project_admin) -> None:
    client.force_login(project_admin)

    assert client.get("/api/projects").status_code == 401


def test_api_for_a_project_the_token_cannot_reach_is_not_found(client, project, outsider) -> None:
    key = ApiToken.objects.issue(outsider)[1]

    response = _post(client, "/api/projects/outages/items", {"items": [{"inputs": GOOD}]}, key)

    assert response.status_code == 404
    assert response.json()["error"] == "no project 'outages' that this token can reach"
    assert not Item.objects.exists()


def test_token_limited_to_another_project_cannot_reach_this_one(client, project, project_admin) -> None:
    other = Project.objects.create(slug="other", name="Other", tool="decision", mode="rank")
    Membership.objects.create(project=other, user=project_admin, role=Role.ADMIN)
    key = ApiToken.objects.issue(project_admin, project=other)[1]

    assert _post(client, "/api/projects/outages/items", {"items": [{"inputs": GOOD}]}, key).status_code == 404
    listed = client.get("/api/projects", HTTP_AUTHORIZATION=f"Bearer {key}").json()["projects"]
    assert [p["slug"] for p in listed] == ["other"]


def test_reviewer_token_cannot_import(client, project, reviewer_key) -> None:
    response = _post(client, "/api/projects/outages/items", {"items": [{"inputs": GOOD}]}, reviewer_key)

    assert response.status_code == 403
    assert not Item.objects.exists()


def test_api_import_reports_errors_by_index_and_imports_nothing(client, project, admin_key) -> None:
    body = {"items": [{"inputs": GOOD}, {"inputs": {**GOOD, "question": 7}}, {"input": GOOD}]}

    response = _post(client, "/api/projects/outages/items", body, admin_key)

    assert response.status_code == 400
    errors = response.json()["errors"]
    assert [e.split(":")[0] for e in errors] == ["items[1]", "items[2]"]
    assert "unknown field 'input'" in errors[1]
    assert not Item.objects.exists()


def test_api_import_refuses_bad_json(client, project, admin_key) -> None:
    response = _post(client, "/api/projects/outages/items", b'{"items": [', admin_key)

    assert response.status_code == 400
    assert response.json()["error"].startswith("the body is not valid JSON")


def test_api_import_refuses_json_nested_too_deeply(client, project, admin_key) -> None:
    """Python's parser runs out of stack on deep nesting; that is the body's fault, not a server error."""
    response = _post(client, "/api/projects/outages/items", "[" * 100_000 + "]" * 100_000, admin_key)

    assert response.status_code == 400
    assert response.json()["error"] == "the body is not valid JSON: nested too deeply"


def test_api_import_refuses_wrong_body_shape(client, project, admin_key) -> None:
    response = _post(client, "/api/projects/outages/items", [{"inputs": GOOD}], admin_key)

    assert response.status_code == 400
    assert response.json()["errors"] == ["body: expected exactly one key 'items'"]


def test_api_import_refuses_oversize_body(client, project, admin_key, settings) -> None:
    settings.TC_IMPORT_MAX_BYTES = 100

    response = _post(client, "/api/projects/outages/items", {"items": [{"inputs": GOOD}] * 10}, admin_key)

    assert response.status_code == 413
    assert not Item.objects.exists()


def test_api_get_item_and_project(client, project, admin_key, ready_items) -> None:
    (item,) = ready_items(project, [0.4])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {admin_key}"}

    detail = client.get(f"/api/projects/outages/items/{item.pk}", **auth).json()
    summary = client.get("/api/projects/outages", **auth).json()

    assert detail["inputs"] == item.inputs and detail["receipt"]["selected_id"] == "db"
    assert summary["tool"] == "decision" and summary["items"] == {"ready": 1}


def test_api_get_rejects_post(client, project, admin_key) -> None:
    response = _post(client, "/api/projects", {}, admin_key)
    assert response.status_code == 405 and response["Allow"] == "GET"
    assert response.json() == {"error": "This address takes only GET. Nothing was changed."}


def test_api_export_with_nothing_selected_is_refused(client, project, admin_key) -> None:
    response = _post(client, "/api/projects/outages/exports", {"minibatch_size": 8}, admin_key)

    assert response.status_code == 400
    assert "nothing to export" in response.json()["error"]
    assert not Export.objects.exists()


def test_api_export_starts_and_reports_progress(client, project, admin_key, ready_items, reviewer) -> None:
    from annotate import queue

    (item,) = ready_items(project, [0.4])
    queue.claim_next(project, reviewer)
    queue.submit(item, reviewer, "db")

    started = _post(client, "/api/projects/outages/exports", {"minibatch_size": 8, "format": "jsonl"}, admin_key)
    status = client.get(f"/api/exports/{started.json()['id']}", HTTP_AUTHORIZATION=f"Bearer {admin_key}")

    assert started.status_code == 202
    assert status.json()["state"] == "PENDING" and status.json()["total"] == 1
