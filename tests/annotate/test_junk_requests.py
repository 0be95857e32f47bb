"""Every page and API endpoint, sent junk by every kind of visitor: a clear 4xx (or the page), never a 5xx.

Junk is what people and scripts really send: numbers out of range, `nan`, a NUL character, a huge value, broken
and deeply nested JSON, files that are not what the form asks for. Each (tool, mode) gets a project whose item
the reviewer holds, so submitting goes through that mode's target editor. A 5xx found here was a crash: a NUL
reaching PostgreSQL, nested JSON exhausting the parser's stack, a model check filed under a field the project
form does not have.
"""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import URLResolver, get_resolver

from annotate import queue
from annotate.models import (
    ApiToken,
    Item,
    ItemDeletion,
    ItemStatus,
    Membership,
    ModelUpload,
    ModelVersion,
    Prediction,
    Project,
    Role,
)
from tests.annotate.ui_samples import SAMPLES

pytestmark = pytest.mark.django_db

VALUES = ["-1", "99999999999999999999", "nan", "x" * 3000, "a\x00b", "{"]
QUERY_KEYS = ["status", "reviewer", "q", "page", "after", "before", "sort", "version", "confidence_min",
              "confidence_max", "disagreement"]
FORM_KEYS = ["choice", "split", "share-0", "label", "relevant", "scope", "plan", "outcome", "outcome-0", "text",
             "reason", "note", "answer", "distribution", "name", "slug", "kind", "configuration", "guidelines",
             "overlap", "lease_seconds", "username", "role", "version", "format", "minibatch_size", "reviewers",
             "extra_epochs", "job", "confidence_min", "confidence_max", "status"]
DEEP = "[" * 50_000 + "]" * 50_000
BODIES = ["{", "null", "[]", DEEP, json.dumps({"items": [{"inputs": {"question": "q\x00"}}]}),
          json.dumps({"items": "x"}), json.dumps({"target": "db", "note": "a\x00"}), json.dumps({"answer": 1e308}),
          json.dumps({"distribution": "yes"}), json.dumps({"format": ["x"], "minibatch_size": -1})]


def _routes(resolver=None, prefix: str = ""):
    """Every URL pattern of the site except Django's own admin and sign-in pages."""
    for pattern in (resolver or get_resolver()).url_patterns:
        text = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            if not text.startswith(("admin/", "accounts/")):
                yield from _routes(pattern, text)
        else:
            yield text


def _fill(route: str, slug: str, ident: int | dict) -> str:
    """`route` for project `slug`, its id argument `ident`, or the id of the kind of object the route names."""
    if isinstance(ident, dict):
        ident = next((pk for word, pk in ident.items() if word in route), ident["items"])
    path = "/" + route.replace("<slug:slug>", slug)
    for name in ("<int:pk>", "<int:item_id>", "<int:export_id>", "<int:import_id>", "<int:deletion_id>",
                 "<int:version_id>", "<int:upload_id>", "<int:job_id>"):
        path = path.replace(name, str(ident))
    assert "<" not in path, f"a URL argument this test does not fill: {route}"
    return path


def _objects(project: Project, item: Item, admin, reviewer) -> dict[str, int]:
    """An object of each kind the routes name by id, so their pages and actions run, not just their 404s."""
    from annotate import export, imports
    from trainingjobs import services

    queue.submit(item, reviewer, SAMPLES[(project.tool, project.mode)]["target"])
    made = export.create_export(project, admin, enqueue=False)
    upload = imports.upload_experience(project, admin, [b'{"format": "tensorcode-experience"}'], name="e.json")
    job = services.launch(project, base_version=project.current_version, enqueue=False, epochs=1, minibatch_size=4)
    member = Membership.objects.get(project=project, user=reviewer)
    queued = imports.queue_import(project, admin, [b"{}\n"], name="items.jsonl")
    deleting = ItemDeletion.objects.create(project=project, requested_by=admin, item_ids=[item.pk], total=1)
    model_upload = ModelUpload.objects.create(project=project, uploaded_by=admin, label="from elsewhere")
    return {"model-uploads": model_upload.pk, "deletions": deleting.pk, "exports": made.pk,
            "experience": upload.pk, "import": queued.pk,
            "versions": project.current_version_id, "members": member.pk, "jobs/": job.pk, "items": item.pk}


def _project(tool: str, mode: str, admin, reviewer) -> tuple[Project, Item]:
    """A project of (tool, mode) with one item, its prediction from the UI samples, claimed by `reviewer`."""
    data = SAMPLES[(tool, mode)]
    project = Project.objects.create(slug=f"{tool}-{mode}", name=f"{tool} {mode}", tool=tool, mode=mode)
    Membership.objects.create(project=project, user=admin, role=Role.ADMIN)
    Membership.objects.create(project=project, user=reviewer, role=Role.REVIEWER)
    project.current_version = ModelVersion.objects.allocate(project, label="untrained", trained=False)
    project.save(update_fields=["current_version"])
    item = Item.objects.create(project=project, inputs=data["inputs"], status=ItemStatus.READY, confidence=0.5)
    item.prediction = Prediction.objects.create(item=item, model_version=project.current_version, confidence=0.5,
                                                receipt=data["receipt"], trace={})
    item.save(update_fields=["prediction"])
    assert queue.claim_next(project, reviewer).pk == item.pk
    return project, item


def _form(value: str) -> dict:
    form = {key: value for key in FORM_KEYS}
    form["file"] = SimpleUploadedFile("items\x00.jsonl", f"{value}\n{DEEP}\n".encode())
    form["experience"] = SimpleUploadedFile("experience.json", DEEP.encode())
    return form


def _send(client, verb: str, path: str, failures: list, who: str, **kwargs) -> None:
    if verb == "json":
        response = client.generic(kwargs.pop("method"), path, **kwargs)
    else:
        response = getattr(client, verb)(path, **kwargs)
    if response.status_code >= 500:
        failures.append(f"{who} {verb.upper()} {path} {str(kwargs.get('data', ''))[:60]!r}: {response.status_code}")


@pytest.fixture
def site(client, django_user_model) -> dict:
    """The users, a project of each (tool, mode) whose item the reviewer holds, an admin's API token, the routes."""
    client.raise_request_exception = False  # a crash must show as the 500 a visitor would get
    admin = django_user_model.objects.create_user("ada", password="a-long-password", is_staff=True)
    reviewer = django_user_model.objects.create_user("rita", password="a-long-password")
    outsider = django_user_model.objects.create_user("olga", password="a-long-password")
    _, key = ApiToken.objects.issue(admin)
    return {"users": {"outsider": outsider, "anonymous": None, "reviewer": reviewer, "admin": admin},
            "made": [_project(tool, mode, admin, reviewer) for tool, mode in sorted(SAMPLES)],
            "api": {"HTTP_AUTHORIZATION": f"Bearer {key}"}, "routes": list(_routes())}


@pytest.mark.parametrize("who", ["outsider", "anonymous", "reviewer", "admin"])
def test_no_junk_request_gets_a_server_error(client, site, who) -> None:
    """Every route of the first project, as each kind of visitor (one test each, so the test processes share
    them), for objects that exist and ids that do not."""
    users, api, failures = site["users"], site["api"], []
    project, item = site["made"][0]
    existing = _objects(project, item, users["admin"], users["reviewer"])
    if users[who] is not None:
        client.force_login(users[who])
    for route in site["routes"]:
        for ident in (existing, 2**63 - 1):
            path = _fill(route, project.slug, ident)
            extra = api if path.startswith("/api/") else {"HTTP_HX_REQUEST": "true"}
            for value in VALUES:
                _send(client, "get", path, failures, who, data=dict.fromkeys(QUERY_KEYS, value), **extra)
                _send(client, "post", path, failures, who, data=_form(value), **extra)
            if path.startswith("/api/"):
                for body in BODIES:
                    _send(client, "json", path, failures, who, method="POST", data=body,
                          content_type="application/json", **api)

    assert not failures, "\n".join(failures[:30])


def test_no_junk_answer_or_adjudication_gets_a_server_error(client, site) -> None:
    """Each mode's target editor and adjudication, given junk for the item the reviewer holds."""
    users, routes, failures = site["users"], site["routes"], []
    for project, item in site["made"]:
        for who, names in (("reviewer", ("item_submit", "item_skip")), ("admin", ("adjudicate", "item_submit"))):
            client.force_login(users[who])
            for name in names:
                route = next(r for r in routes if r.endswith({"item_submit": "/submit/", "item_skip": "/skip/",
                                                              "adjudicate": "/adjudicate/submit/"}[name])
                             and ("adjudicate" in r) == (name == "adjudicate"))
                for value in VALUES:
                    _send(client, "post", _fill(route, project.slug, item.pk), failures, who, data=_form(value),
                          HTTP_HX_REQUEST="true")

    assert not failures, "\n".join(failures[:30])
