"""A form's body over what its address takes is refused with 413 before anything reads it (the CSRF check would
parse it, writing its files to disk, before any view checks who sent it)."""

from __future__ import annotations

import html

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart

from annotate.models import ApiToken, ItemImport

pytestmark = pytest.mark.django_db
MiB = 2**20


def claimed(client, path: str, length: int, *, content_type: str = MULTIPART_CONTENT, **extra):
    """A POST whose Content-Length says `length` but whose body is a few bytes: anything reading it would fail."""
    body = encode_multipart(BOUNDARY, {"note": "x"}) if content_type == MULTIPART_CONTENT else b"note=x"
    return client.generic("POST", path, body, content_type=content_type, CONTENT_LENGTH=str(length), **extra)


def text(response) -> str:
    return html.unescape(response.content.decode())


def test_a_visitor_cannot_make_the_site_read_a_huge_form(client) -> None:
    client.get("/accounts/login/")  # the CSRF cookie a visitor has, with which the check would parse the body

    response = claimed(client, "/accounts/login/", 3 * 1024 * MiB)

    assert response.status_code == 413
    assert "This request is 3072.0 MiB: a form here may send at most 2.5 MiB. Nothing was read or kept." in text(
        response)


def test_an_ordinary_form_takes_up_to_djangos_limit(client, project, reviewer) -> None:
    client.force_login(reviewer)

    over = claimed(client, "/projects/outages/items/1/submit/", 3 * MiB,
                   content_type="application/x-www-form-urlencoded")

    assert over.status_code == 413 and "a form here may send at most 2.5 MiB" in text(over)


def test_an_upload_address_takes_its_files_limit_and_says_which(client, project, project_admin, settings) -> None:
    settings.TC_IMPORT_MAX_BYTES = 3 * MiB
    client.force_login(project_admin)
    line = b'{"inputs": {"question": "q", "evidence": [], "hypotheses": [{"id": "a", "text": "a"}]}}\n'
    fits = SimpleUploadedFile("items.jsonl", line * (int(2.9 * MiB) // len(line)))

    accepted = client.post("/projects/outages/import/", {"file": fits})
    refused = claimed(client, "/projects/outages/import/", int(3.2 * MiB))

    assert accepted.status_code == 302 and ItemImport.objects.count() == 1  # over Django's 2.5 MiB, under its own
    assert refused.status_code == 413
    assert ("This request is 3.2 MiB: an items file may be at most 3.0 MiB (TC_IMPORT_MAX_BYTES). Nothing was read "
            "or kept.") in text(refused)
    assert ItemImport.objects.count() == 1


def test_the_api_answers_413_as_json_and_its_json_bodies_are_left_to_their_views(client, project,
                                                                                 project_admin) -> None:
    auth = {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.objects.issue(project_admin)[1]}"}

    model = claimed(client, "/api/projects/outages/versions", 600 * MiB, **auth)
    items = claimed(client, "/api/projects/outages/items", 9 * MiB, content_type="application/json", **auth)

    assert model.status_code == 413 and model.json() == {
        "error": "This request is 600.0 MiB: a model's weights may be at most 512.0 MiB (TC_MODEL_MAX_BYTES), its "
                 "tool.json 1 MiB. Nothing was read or kept."}
    assert items.status_code == 413 and "Nothing was read" not in items.json()["error"]  # the view's own limit


def test_items_sent_to_the_api_as_curl_labels_them_take_the_apis_limit(client, project, project_admin) -> None:
    """`curl --data-binary @items.json` calls its body a form: 3.9 MiB of items were refused as one."""
    auth = {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.objects.issue(project_admin)[1]}"}
    item = b'{"inputs": {"question": "q", "evidence": [], "hypotheses": [{"id": "a", "text": "a"}]}},'
    body = b'{"items": [' + item * (int(3.9 * MiB) // len(item)) + item[:-1] + b"]}"

    sent = client.generic("POST", "/api/projects/outages/items", body,
                          content_type="application/x-www-form-urlencoded", **auth)
    over = claimed(client, "/api/projects/outages/items", 9 * MiB, content_type="application/x-www-form-urlencoded",
                   **auth)

    assert sent.status_code == 201, sent.content[:300]
    assert sent.json()["created"] == int(3.9 * MiB) // len(item) + 1
    assert over.status_code == 413 and over.json() == {
        "error": "This request is 9.0 MiB: a body of items may be at most 8.0 MiB (TC_API_ITEMS_MAX_BYTES). Nothing "
                 "was read or kept."}
