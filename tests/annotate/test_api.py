"""The JSON API: bearer tokens only, project reach, roles, all-or-nothing imports, exports."""

from __future__ import annotations

import io
import json

import pytest

from annotate import queue, storage
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


@pytest.mark.parametrize("path", ["/api/nothing", "/api/projects/outages/items/abc", "/api/projects/"])
def test_an_unknown_api_address_is_a_json_404_even_with_debug_on(client, project, admin_key, settings, path) -> None:
    """The demo runs with DEBUG on, where Django answers an unmatched address with its HTML debug page."""
    settings.DEBUG = True

    response = client.get(path, HTTP_AUTHORIZATION=f"Bearer {admin_key}")

    assert response.status_code == 404 and response["Content-Type"] == "application/json"
    assert response.json() == {"error": f"no API address {path} (the README's \"JSON API\" lists them)"}


def test_a_chunked_body_is_asked_for_again_with_its_length(client, project, admin_key) -> None:
    """Django reads a body by its Content-Length; a chunked one read as empty and was called invalid JSON."""
    response = client.generic("POST", "/api/projects/outages/items", b"", content_type="application/json",
                              HTTP_AUTHORIZATION=f"Bearer {admin_key}", HTTP_TRANSFER_ENCODING="chunked")

    assert response.status_code == 411
    assert response.json() == {"error": "send the body with a Content-Length; a chunked body is not read"}
    assert not Item.objects.exists()


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


def test_api_import_while_you_wait_has_its_own_smaller_limit_and_names_the_file_import(client, project, admin_key,
                                                                                       settings) -> None:
    """The request holds the whole parsed body; the file import below it reads a line at a time on a worker."""
    settings.TC_API_ITEMS_MAX_BYTES = 200

    response = _post(client, "/api/projects/outages/items", {"items": [{"inputs": GOOD}] * 2}, admin_key)
    accepted = client.post("/api/projects/outages/imports", data=_jsonl({"inputs": GOOD}, {"inputs": GOOD}),
                           content_type="application/x-ndjson", HTTP_AUTHORIZATION=f"Bearer {admin_key}")

    assert response.status_code == 413 and not Item.objects.exists()
    assert response.json()["error"] == (
        "request body larger than 200 bytes, the limit of an import while you wait; send fewer items per call, or "
        "the items as a JSONL file to POST /api/projects/outages/imports, which a worker imports")
    assert accepted.status_code == 202  # the same items as a file: queued for a worker


def test_api_get_item_and_project(client, project, admin_key, ready_items) -> None:
    (item,) = ready_items(project, [0.4])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {admin_key}"}

    detail = client.get(f"/api/projects/outages/items/{item.pk}", **auth).json()
    summary = client.get("/api/projects/outages", **auth).json()

    assert detail["inputs"] == item.inputs and detail["receipt"]["selected_id"] == "db"
    assert summary["tool"] == "decision" and summary["items"] == {"ready": 1}


def test_api_item_gives_each_answers_revisions_to_admins_and_a_reviewer_their_own(
        client, project, admin_key, reviewer_key, ready_items, reviewer, second_reviewer) -> None:
    Project.objects.filter(pk=project.pk).update(overlap=2)
    project.refresh_from_db()
    (item,) = ready_items(project, [0.4])
    for user in (reviewer, second_reviewer):
        queue.claim_next(project, user)
    queue.submit(item, reviewer, "db")
    queue.skip(item, reviewer, "not sure")
    queue.submit(item, reviewer, "dns")
    queue.submit(item, second_reviewer, "db")
    url = f"/api/projects/outages/items/{item.pk}"

    as_admin = client.get(url, HTTP_AUTHORIZATION=f"Bearer {admin_key}").json()["answers"]
    as_rita = client.get(url, HTTP_AUTHORIZATION=f"Bearer {reviewer_key}").json()["answers"]

    ritas = next(a for a in as_admin if a["reviewer"] == "rita")
    assert [(r["kind"], r["target"], r["skip_reason"], r["note"]) for r in ritas["revisions"]] == [
        ("target", "db", "", ""), ("skip", None, "not sure", "edited"), ("target", "dns", "", "edited")]
    assert ritas["revisions"][0]["created_at"] <= ritas["revisions"][-1]["created_at"]
    assert [len(a["revisions"]) for a in as_admin] == [3, 1]
    assert [a["reviewer"] for a in as_rita] == ["rita"] and as_rita[0]["revisions"] == ritas["revisions"]


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
    status = client.get(started["Location"], HTTP_AUTHORIZATION=f"Bearer {admin_key}")

    assert started.status_code == 202 and started["Location"] == f"/api/exports/{started.json()['id']}"
    assert status.json()["state"] == "PENDING" and status.json()["total"] == 1


def _jsonl(*records) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" if not isinstance(r, bytes) else r + b"\n" for r in records)


def test_api_file_import_is_queued_and_its_status_follows_the_worker(
        client, project, admin_key, django_capture_on_commit_callbacks, monkeypatch) -> None:
    from annotate import imports, tasks
    from annotate.models import ItemImport, UploadState

    queued = []
    monkeypatch.setattr(tasks.import_item_file, "delay", lambda pk: queued.append(pk))
    auth = {"HTTP_AUTHORIZATION": f"Bearer {admin_key}"}

    with django_capture_on_commit_callbacks(execute=True):
        started = client.post("/api/projects/outages/imports", data=_jsonl({"inputs": GOOD}, {"inputs": GOOD}),
                              content_type="application/x-ndjson", **auth)

    assert started.status_code == 202, started.content
    row = ItemImport.objects.get()
    assert started["Location"] == f"/api/imports/{row.pk}" and queued == [row.pk]
    assert started.json() | {"created_at": None} == {
        "id": row.pk, "project": "outages", "state": "PENDING", "name": "API upload", "size": row.path.stat().st_size,
        "created": 0, "errors": [], "total_errors": 0, "reason": "", "created_at": None, "checked_at": None}
    assert not Item.objects.exists()  # the worker imports

    assert imports.run_import(row.pk) == UploadState.ACCEPTED
    done = client.get(started["Location"], **auth).json()
    assert done["state"] == "ACCEPTED" and done["created"] == 2 and done["checked_at"]
    assert Item.objects.filter(project=project).count() == 2


def test_api_file_import_takes_a_form_upload_and_reports_problems_by_line(client, project, admin_key) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    from annotate import imports

    upload = SimpleUploadedFile("batch.jsonl", _jsonl({"inputs": GOOD}, b"{not json", {"inputs": {"question": 1}}))
    started = client.post("/api/projects/outages/imports", {"file": upload}, HTTP_AUTHORIZATION=f"Bearer {admin_key}")
    assert started.status_code == 202 and started.json()["name"] == "batch.jsonl"

    imports.run_import(started.json()["id"])

    status = client.get(started["Location"], HTTP_AUTHORIZATION=f"Bearer {admin_key}").json()
    assert status["state"] == "REFUSED" and status["created"] == 0 and status["total_errors"] == 2
    assert status["errors"][0].startswith("line 2: not valid JSON") and status["errors"][1].startswith("line 3: ")
    assert not Item.objects.exists()


@pytest.mark.parametrize("body, status, message", [
    (b"", 400, "the body is empty"),
    (b"x" * 200, 413, "larger than the import limit of 100 bytes"),
])
def test_api_file_import_refuses_an_empty_or_oversize_body(client, project, admin_key, settings,
                                                           body, status, message) -> None:
    from annotate.models import ItemImport

    settings.TC_IMPORT_MAX_BYTES = 100
    response = client.post("/api/projects/outages/imports", data=body, content_type="application/x-ndjson",
                           HTTP_AUTHORIZATION=f"Bearer {admin_key}")

    assert response.status_code == status and message in response.json()["error"]
    assert not ItemImport.objects.exists()


def test_api_file_import_refuses_a_body_that_proves_larger_than_it_said(project, project_admin, settings) -> None:
    """The limit holds while the file is stored, not only against the Content-Length the client sent."""
    from django.http import HttpRequest

    from annotate import api
    from annotate.models import ItemImport

    settings.TC_IMPORT_MAX_BYTES = 100
    request = HttpRequest()
    request.method, request.META["CONTENT_TYPE"], request.META["CONTENT_LENGTH"] = "POST", "application/x-ndjson", "9"
    request._stream = io.BytesIO(b"x" * 500)
    request.META["HTTP_AUTHORIZATION"] = f"Bearer {ApiToken.objects.issue(project_admin)[1]}"

    response = api.create_import(request, slug="outages")

    assert response.status_code == 413 and not ItemImport.objects.exists()
    assert not list((storage.root() / "imports").glob("*/*"))  # nothing half-stored


def test_api_file_import_and_its_status_are_for_the_projects_admins(client, project, admin_key, reviewer_key,
                                                                    project_admin) -> None:
    from annotate import imports

    refused = client.post("/api/projects/outages/imports", data=_jsonl({"inputs": GOOD}),
                          content_type="application/x-ndjson", HTTP_AUTHORIZATION=f"Bearer {reviewer_key}")
    row = imports.queue_import(project, project_admin, io.BytesIO(_jsonl({"inputs": GOOD})))
    hidden = client.get(f"/api/imports/{row.pk}", HTTP_AUTHORIZATION=f"Bearer {reviewer_key}")
    missing = client.get(f"/api/imports/{row.pk + 1}", HTTP_AUTHORIZATION=f"Bearer {admin_key}")

    assert refused.status_code == 403 and "admin role" in refused.json()["error"]
    assert hidden.status_code == 404 and missing.status_code == 404
    assert hidden.json()["error"] == f"no import {row.pk} that this token can reach"


def test_api_file_import_reads_the_body_whatever_its_content_type(client, project, admin_key) -> None:
    """`curl --data-binary` labels the body a URL-encoded form unless told otherwise: it is still the file."""
    from annotate import imports
    from annotate.models import ItemImport

    started = client.post("/api/projects/outages/imports?name=nightly.jsonl", data=_jsonl({"inputs": GOOD}),
                          content_type="application/x-www-form-urlencoded", HTTP_AUTHORIZATION=f"Bearer {admin_key}")

    assert started.status_code == 202 and started.json()["name"] == "nightly.jsonl"
    assert imports.run_import(ItemImport.objects.get().pk) == "ACCEPTED" and Item.objects.count() == 1
