"""The JSON API (under `/api/`), authenticated by API tokens only: `Authorization: Bearer <key>`.

Session cookies are not accepted here, which is why these views are exempt from CSRF: a cross-site page cannot
make the browser add the header. A token reaches the projects its user is a member of (or only the one project
it is limited to); importing, exporting, model versions and training jobs (`trainingjobs.api`) need the
project's admin role.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from django.http import FileResponse, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import reverse
from django.utils.http import content_disposition_header
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from annotate import deletion, imports, itemlist
from annotate import export as exports
from annotate import versions as model_versions
from annotate.models import (
    Answer,
    ApiToken,
    Export,
    ExportState,
    Item,
    ItemDeletion,
    ItemImport,
    ModelUpload,
    ModelVersion,
    Project,
    Role,
)

logger = logging.getLogger(__name__)


def unknown_address(request: HttpRequest) -> JsonResponse:
    return _error(404, f"no API address {request.path} (the README's \"JSON API\" lists them)")


def _error(status: int, message: str, **extra) -> JsonResponse:
    response = JsonResponse({"error": message, **extra}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="api"'
    return response


def token_required(view: Callable) -> Callable:
    """Authenticate the request's bearer token (401 otherwise) and pass the token to the view."""

    @csrf_exempt
    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args, **kwargs):
        scheme, _, key = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() not in ("bearer", "token") or not key.strip():
            return _error(401, "authentication required: send 'Authorization: Bearer <API token>'")
        token = ApiToken.objects.authenticate(key.strip())
        if token is None:
            return _error(401, "invalid or revoked API token")
        return view(request, token, *args, **kwargs)

    return wrapped


def _reachable(token: ApiToken, slug: str) -> Project | None:
    project = Project.objects.filter(slug=slug).first()
    if project is None or not token.reaches(project):
        return None
    return project


def _admin_project(token: ApiToken, slug: str, doing: str) -> Project | JsonResponse:
    """The project, or 404 where the token cannot reach it and 403 where its user is not an admin there
    ("exporting from 'outages' needs the project's admin role", for `doing` "exporting from")."""
    project = _reachable(token, slug)
    if project is None:
        return _not_reachable(slug)
    if not project.is_admin(token.user):
        return _error(403, f"{doing} {slug!r} needs the project's admin role")
    return project


def _administered(token: ApiToken, model: type[Export | ItemImport | ItemDeletion | ModelVersion | ModelUpload],
                  pk: int, *, defer=()):
    """The `model` row `pk` when the token reaches its project with the admin role; None otherwise."""
    row = model.objects.filter(pk=pk).select_related("project").defer(*defer).first()
    if row is None or not token.reaches(row.project) or row.project.role_of(token.user) != Role.ADMIN:
        return None
    return row


def _iso(at) -> str | None:
    """A time as the API gives it (ISO 8601), or None for one not reached yet."""
    return at.isoformat() if at else None


def _accepted(body: dict, location: str) -> JsonResponse:
    """202: queued for a worker; `Location` is where to poll its state."""
    response = JsonResponse(body, status=202)
    response["Location"] = location
    return response


def _not_reachable(slug: str) -> JsonResponse:
    return _error(404, f"no project {slug!r} that this token can reach")


def _json_body(request: HttpRequest, limit: int, too_large: str = ""):
    """The parsed body, or a JsonResponse error (413 over `limit` bytes, 400 for bad JSON).

    `too_large` is the 413 message.
    """
    too_large = too_large or f"request body larger than {limit} bytes"
    length = request.headers.get("Content-Length", "")
    if length.isdigit() and int(length) > limit:
        return _error(413, too_large)
    if not length and "chunked" in request.headers.get("Transfer-Encoding", "").lower():
        # Django reads a body by its Content-Length: a chunked one would read as empty, "not valid JSON".
        return _error(411, "send the body with a Content-Length; a chunked body is not read")
    try:
        raw = imports.read_limited(request, limit)
    except imports.ImportRejected:
        return _error(413, too_large)
    try:
        return imports.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return _error(400, f"the body is not valid JSON: {exc}")


def project_json(project: Project) -> dict:
    counts = project.item_counts()
    return {
        "slug": project.slug,
        "name": project.name,
        "tool": project.tool,
        "mode": project.mode,
        "overlap": project.overlap,
        "current_version": project.current_version_id,
        "items": counts,
    }


@require_GET
@token_required
def projects(request: HttpRequest, token: ApiToken) -> JsonResponse:
    """`GET /api/projects`: the projects this token reaches."""
    reachable = Project.objects.for_user(token.user)
    if token.project_id:
        reachable = reachable.filter(pk=token.project_id)
    return JsonResponse({"projects": [project_json(p) for p in reachable]})


@require_GET
@token_required
def project_detail(request: HttpRequest, token: ApiToken, slug: str) -> JsonResponse:
    """`GET /api/projects/<slug>`: the project, its tool and mode, and item counts by status."""
    project = _reachable(token, slug)
    if project is None:
        return _not_reachable(slug)
    return JsonResponse(project_json(project))


@require_http_methods(["GET", "POST", "DELETE"])
@token_required
def items(request: HttpRequest, token: ApiToken, slug: str) -> JsonResponse:
    """`POST /api/projects/<slug>/items` with `{"items": [{"inputs": ...}, ...]}`: import them, all or nothing.

    201 with the new item ids; 400 with `errors` (each naming `items[i]`) and nothing imported.
    `GET` lists the items instead (see `list_items`), `DELETE` deletes those the filters match (`delete_items`).
    """
    project = _reachable(token, slug)
    if project is None:
        return _not_reachable(slug)
    if request.method == "GET":
        return list_items(request, token, project)
    if request.method == "DELETE":
        return delete_items(request, token, project)
    if project.role_of(token.user) != Role.ADMIN:
        return _error(403, f"importing into {slug!r} needs the project's admin role")
    limit = imports.max_api_items_bytes()
    body = _json_body(request, limit, too_large=(
        f"request body larger than {limit} bytes, the limit of an import while you wait; send fewer items per call, "
        f"or the items as a JSONL file to POST /api/projects/{slug}/imports, which a worker imports"))
    if isinstance(body, JsonResponse):
        return body
    if not isinstance(body, dict) or set(body) != {"items"}:
        return _error(400, "expected a JSON object {\"items\": [{\"inputs\": ...}, ...]}",
                      errors=["body: expected exactly one key 'items'"])
    try:
        result = imports.import_records(project, body["items"])
    except imports.ImportRejected as exc:
        return _error(400, "nothing was imported", errors=exc.errors, total_errors=exc.total)
    return JsonResponse({"created": result.count, "ids": result.item_ids}, status=201)


@require_POST
@token_required
def create_import(request: HttpRequest, token: ApiToken, slug: str) -> JsonResponse:
    """`POST /api/projects/<slug>/imports` with a JSONL file as the body: store it and queue its import (202).

    The import page's path for files of any size: a worker checks and imports the file whole or not at all, and
    `GET /api/imports/<id>` (the `Location`) tells how it went. Importing 64 MiB of small items takes about a
    minute, longer than a proxy waits for `POST .../items`. The body is the file itself
    (`curl --data-binary @items.jsonl`, named on the project page by `?name=`, else "API upload"), or a form
    with the file as its `file` field (`curl -F file=@items.jsonl`).
    """
    project = _admin_project(token, slug, "importing into")
    if isinstance(project, JsonResponse):
        return project
    limit = imports.max_upload_bytes()
    length = request.headers.get("Content-Length", "")
    if length.isdigit() and int(length) > limit:
        return _error(413, imports.too_large(limit))
    name, stream = request.GET.get("name") or "API upload", request
    if request.content_type == "multipart/form-data":
        files = request.FILES.getlist("file")
        if len(files) != 1:
            return _error(400, "a form upload needs exactly one file, in the field 'file'")
        stream, name = files[0], files[0].name
    elif length in ("", "0"):
        return _error(400, "the body is empty: send the JSONL file as the body, one {\"inputs\": ...} per line")
    try:
        row = imports.queue_import(project, token.user, stream, name=name)
    except imports.ImportRejected as exc:  # only ever too large: the lines are checked by the worker
        return _error(413, str(exc))
    return _accepted(import_json(row), reverse("api:import", args=[row.pk]))


@require_GET
@token_required
def import_detail(request: HttpRequest, token: ApiToken, import_id: int) -> JsonResponse:
    """`GET /api/imports/<id>`: an import's state (`PENDING`, `ACCEPTED`, `REFUSED`), its count or its problems."""
    row = _administered(token, ItemImport, import_id)
    if row is None:
        return _error(404, f"no import {import_id} that this token can reach")
    return JsonResponse(import_json(row))


def import_json(row: ItemImport) -> dict:
    return {
        "id": row.pk,
        "project": row.project.slug,
        "state": row.state,
        "name": row.original_name,
        "size": row.size,
        "created": row.count,
        "errors": row.problems,
        "total_errors": row.problem_total,
        "reason": row.reason,
        "created_at": row.created_at.isoformat(),
        "checked_at": _iso(row.checked_at),
    }


def list_items(request: HttpRequest, token: ApiToken, project: Project) -> JsonResponse:
    """`GET /api/projects/<slug>/items?<filters>`: one page of items, as the item list page filters them.

    200 with `items`, `next` (pass it as `after` for the following page, null on the last), `previous` (as
    `before`), `matching` (up to 1,000, on the first page only; null on later pages) and `capped`; 400 with
    `errors` (one message per bad parameter) for impossible filters.
    """
    try:
        filters = itemlist.ItemFilters.parse(project, request.GET, user=token.user)
    except itemlist.InvalidFilters as exc:
        return _error(400, "invalid filters", errors=exc.errors)
    result = itemlist.page(project, filters, size=itemlist.PAGE_SIZE)
    return JsonResponse({
        "items": [
            {"id": row["id"], "status": row["status"], "confidence": row["confidence"],
             "calibrated": row["calibrated"] is not None, "version": row["version_id"],
             "final_answers": row["final_answers"], "disagreement": row["disagreement"], "preview": row["preview"],
             "refusal": row["refusal"]}
            for row in result.rows
        ],
        "next": result.next_after,
        "previous": result.previous_before,
        "matching": result.matching,
        "capped": result.capped,
    })


def delete_items(request: HttpRequest, token: ApiToken, project: Project) -> JsonResponse:
    """`DELETE /api/projects/<slug>/items?<filters>&expected=<count>[&through=<id>]`: delete the items that the
    item list's filters match, with their predictions, claims, answers and adjudications (admins).

    A deletion says how many items it means: without `expected`, 428 with what would go (`expected`, `through`,
    `rows`) and nothing deleted; send the request again with them. Then 202: a worker deletes them, and
    `GET /api/deletions/<id>` (the `Location`) says how it goes; 200 `{"deleted": {"items": 0}}` when no item
    matches. 412 when the filters now match another number of items up to `through`, 409 while a training job
    or an export blocks it; nothing is deleted either way. A parameter that is not a filter is refused (400), so
    a misspelt filter never widens a deletion to every item.
    """
    if project.role_of(token.user) != Role.ADMIN:
        return _error(403, f"deleting items of {project.slug!r} needs the project's admin role")
    unknown = sorted(set(request.GET) - {*itemlist.FILTER_PARAMS, "expected", "through"})
    if unknown:
        return _error(400, "nothing was deleted", errors={name: (
            f"not a filter of a deletion; use {', '.join(itemlist.FILTER_PARAMS)}, expected and through")
            for name in unknown})
    given = {name: request.GET[name] for name in itemlist.FILTER_PARAMS if request.GET.get(name)}
    try:
        filters = itemlist.ItemFilters.parse(project, given, user=token.user)
    except itemlist.InvalidFilters as exc:
        return _error(400, "nothing was deleted: invalid filters", errors=exc.errors)
    counts = {name: request.GET.get(name, "") for name in ("expected", "through")}
    bad = {name: f"expected a whole number, not {value!r}" for name, value in counts.items()
           if value and itemlist.whole(value) is None}
    if bad:
        return _error(400, "nothing was deleted", errors=bad)
    if not counts["expected"]:
        through, matching = deletion.matching(project, filters)
        rows = deletion.rows_summary(matching)
        return _error(428, "nothing was deleted: say how many items you mean to delete; send the request again "
                      f"with expected={rows[Item]}&through={through}", expected=rows[Item], through=through,
                      rows=_rows_json(rows))
    try:
        row = deletion.queue_matching(project, filters, expected=int(counts["expected"]),
                                      through=int(counts["through"] or 2**62), user=token.user)
    except deletion.CountChanged as exc:
        return _error(412, f"nothing was deleted: {exc}", matching=exc.found)
    except deletion.ProjectBusy as exc:
        return _error(409, str(exc), blockers=exc.reasons)
    if row is None:
        return JsonResponse({"deleted": {"items": 0}})
    logger.info("project %s: deletion %s of %s items queued by token %s of %s (filters %s)", project.slug, row.pk,
                row.total, token.pk, token.user, given)
    return _accepted(deletion_json(row), reverse("api:deletion", args=[row.pk]))


@require_GET
@token_required
def deletion_detail(request: HttpRequest, token: ApiToken, deletion_id: int) -> JsonResponse:
    """`GET /api/deletions/<id>`: a deletion's state (`PENDING`, `RUNNING`, `SUCCEEDED`, `STOPPED`, `FAILED`),
    its items counted and deleted so far, its rows deleted per kind, and why it stopped or failed."""
    row = _administered(token, ItemDeletion, deletion_id, defer=["item_ids"])
    if row is None:
        return _error(404, f"no deletion {deletion_id} that this token can reach")
    return JsonResponse(deletion_json(row))


@require_POST
@token_required
def deletion_stop(request: HttpRequest, token: ApiToken, deletion_id: int) -> JsonResponse:
    """`POST /api/deletions/<id>/stop`: stop a deletion now (items deleted stay deleted); the deletion as
    `GET` gives it, `STOPPED`. 409 once it has ended."""
    row = _administered(token, ItemDeletion, deletion_id, defer=["item_ids"])
    if row is None:
        return _error(404, f"no deletion {deletion_id} that this token can reach")
    try:
        row = deletion.stop(row.pk, by=token.user)
    except deletion.AlreadyOver as exc:
        return _error(409, str(exc), state=exc.state)
    except ItemDeletion.DoesNotExist:  # its project was deleted meanwhile
        return _error(404, f"no deletion {deletion_id} that this token can reach")
    return JsonResponse(deletion_json(row))


def deletion_json(row: ItemDeletion) -> dict:
    return {"id": row.pk, "project": row.project.slug, "state": row.state, "filters": row.filters,
            "total": row.total, "deleted_items": row.deleted_items, "deleted": _rows_json(deletion.deleted_rows(row)),
            "reason": row.reason, "created_at": row.created_at.isoformat(),
            "finished_at": _iso(row.finished_at)}


def _rows_json(rows: dict) -> dict[str, int]:
    """Rows per model as JSON: {"items": 3, "answer_revisions": 2}; models with none left out, items always in."""
    return {deletion.name(model).replace(" ", "_"): count for model, count in rows.items()
            if count or model is Item}


@require_http_methods(["GET", "PATCH"])
@token_required
def item_detail(request: HttpRequest, token: ApiToken, slug: str, item_id: int) -> JsonResponse:
    """`GET /api/projects/<slug>/items/<id>`: inputs, status, the latest receipt, and the final answers.

    `PATCH` with `{"inputs": ...}` fixes a refused item's inputs (admins): checked as an import checks them, the
    item waits for a prediction again. 400 naming what is wrong, 409 for an item that is not refused.
    """
    project = _reachable(token, slug)
    if project is None:
        return _not_reachable(slug)
    item = Item.objects.filter(project=project, pk=item_id).select_related("prediction").first()
    if item is None:
        return _error(404, f"no item {item_id} in project {slug!r}")
    if request.method == "PATCH":
        return _fix_inputs(request, token, project, item)
    return _item_json(token, project, item)


def _fix_inputs(request: HttpRequest, token: ApiToken, project: Project, item: Item) -> JsonResponse:
    if project.role_of(token.user) != Role.ADMIN:
        return _error(403, f"changing items of {project.slug!r} needs the project's admin role")
    body = _json_body(request, imports.max_api_items_bytes())
    if isinstance(body, JsonResponse):
        return body
    if not isinstance(body, dict) or set(body) != {"inputs"}:
        return _error(400, "expected a JSON object {\"inputs\": ...}: only a refused item's inputs can change")
    try:
        imports.fix_refused(project, item.pk, body["inputs"])
    except imports.NotRefused as exc:
        return _error(409, str(exc))
    except ValueError as exc:
        return _error(400, f"nothing was changed: {exc}")
    return _item_json(token, project, Item.objects.select_related("prediction").get(pk=item.pk))


def _item_json(token: ApiToken, project: Project, item: Item) -> JsonResponse:
    answers = (item.answers.filter(kind__in=("target", "skip")).select_related("reviewer")
               .prefetch_related("revisions").order_by("id"))
    is_admin = project.role_of(token.user) == Role.ADMIN
    return JsonResponse({
        "id": item.pk,
        "status": item.status,
        "refusal": item.refusal,
        "inputs": item.inputs,
        "confidence": item.confidence,
        "receipt": item.prediction.receipt if item.prediction else None,
        "answers": [{**answer_json(a), "revisions": [_revision_json(r) for r in a.revisions.all()]}
                    for a in answers if is_admin or a.reviewer_id == token.user_id],
    })


def _revision_json(revision) -> dict:
    """One state of an answer, oldest first in its list: how the reviewer got to it (the site's "Changed N times")."""
    return {"kind": revision.kind, "target": revision.target, "skip_reason": revision.skip_reason,
            "note": revision.note, "created_at": revision.created_at.isoformat()}


def answer_json(answer: Answer) -> dict:
    """A reviewer's answer; `id` is what `POST .../adjudication` takes as `answer`."""
    return {"id": answer.pk, "kind": answer.kind, "target": answer.target, "skip_reason": answer.skip_reason,
            "source": answer.source, "reviewer": answer.reviewer.get_username(),
            "updated_at": answer.updated_at.isoformat()}


@require_POST
@token_required
def create_export(request: HttpRequest, token: ApiToken, slug: str) -> JsonResponse:
    """`POST /api/projects/<slug>/exports` with `{"filters", "minibatch_size", "format"}`: start an export."""
    project = _admin_project(token, slug, "exporting from")
    if isinstance(project, JsonResponse):
        return project
    body = _json_body(request, 1024 * 1024)
    if isinstance(body, JsonResponse):
        return body
    if not isinstance(body, dict):
        return _error(400, "expected a JSON object")
    unknown = sorted(set(body) - {"filters", "minibatch_size", "format"})
    if unknown:
        return _error(400, f"unknown field {unknown[0]!r}; valid fields: filters, format, minibatch_size")
    try:
        export = exports.create_export(
            project, token.user, filters=body.get("filters"), minibatch_size=body.get("minibatch_size", 32),
            format=body.get("format", "experience"),
        )
    except ValueError as exc:
        return _error(400, str(exc))
    return _accepted(export_json(export), reverse("api:export", args=[export.pk]))


@require_GET
@token_required
def export_detail(request: HttpRequest, token: ApiToken, export_id: int) -> JsonResponse:
    """`GET /api/exports/<id>`: state and progress of an export of a project this token administers."""
    export = _administered(token, Export, export_id)
    if export is None:
        return _error(404, f"no export {export_id} that this token can reach")
    return JsonResponse(export_json(export))


@require_GET
@token_required
def export_download(request: HttpRequest, token: ApiToken, export_id: int) -> HttpResponse:
    """`GET /api/exports/<id>/download`: the finished export's archive (its experience files or JSONL, with its
    manifest), as the project page's Download gives it; 409 until the export has succeeded."""
    export = _administered(token, Export, export_id)
    if export is None:
        return _error(404, f"no export {export_id} that this token can reach")
    if export.state != ExportState.SUCCEEDED:
        return _error(409, f"export {export.pk} is {export.state}, not SUCCEEDED: there is nothing to download",
                      state=export.state)
    path = exports.archive_path(export)
    return FileResponse(path.open("rb"), as_attachment=True, filename=path.name)


def export_json(export: Export) -> dict:
    return {
        "id": export.pk,
        "project": export.project.slug,
        "state": export.state,
        "format": export.format,
        "minibatch_size": export.minibatch_size,
        "filters": export.filters,
        "done": export.done,
        "total": export.total,
        "error": export.error,
        "files": export.files,
        "download": reverse("api:export_download", args=[export.pk]) if export.state == ExportState.SUCCEEDED else None,
    }


@require_http_methods(["GET", "POST"])
@token_required
def versions(request: HttpRequest, token: ApiToken, slug: str) -> JsonResponse:
    """`GET /api/projects/<slug>/versions`: the project's model versions, newest first, and which is current.
    `POST` uploads a model trained elsewhere (`upload_version`)."""
    project = _admin_project(token, slug, "reading or adding the model versions of")
    if isinstance(project, JsonResponse):
        return project
    if request.method == "POST":
        return upload_version(request, token, project)
    rows = project.versions.all()[:MAX_VERSIONS]
    return JsonResponse({"current": project.current_version_id, "versions": [
        {"id": v.pk, "label": str(v), "trained": v.trained, "parent": v.parent_id, "metrics": v.metrics,
         "created_at": v.created_at.isoformat(), "download": reverse("api:version_download", args=[v.pk])}
        for v in rows]})


MAX_VERSIONS = 500


def upload_version(request: HttpRequest, token: ApiToken, project: Project) -> JsonResponse:
    """`POST /api/projects/<slug>/versions` with a form's files `manifest` (`tool.json`) and `weights`
    (`model.safetensors`), and optionally `label`: as the training page's upload, a worker checks them against
    the project's tool and registers a version. 202 with `Location: /api/model-uploads/<id>`."""
    missing = [name for name in ("manifest", "weights") if name not in request.FILES]
    if missing:
        return _error(400, "send the tool as a multipart form with the files 'manifest' (tool.json) and 'weights' "
                           f"(model.safetensors); missing: {', '.join(missing)}")
    try:
        upload = model_versions.upload_model(project, token.user, request.FILES["manifest"],
                                             request.FILES["weights"], label=request.POST.get("label", ""))
    except model_versions.UploadRefused as exc:
        return _error(400, f"the model was not kept: {exc}")
    return _accepted(model_upload_json(upload), reverse("api:model_upload", args=[upload.pk]))


@require_GET
@token_required
def model_upload_detail(request: HttpRequest, token: ApiToken, upload_id: int) -> JsonResponse:
    """`GET /api/model-uploads/<id>`: whether the worker accepted the model (`version`, the version it became) or
    refused it (`reason`)."""
    upload = _administered(token, ModelUpload, upload_id)
    if upload is None:
        return _error(404, f"no model upload {upload_id} that this token can reach")
    return JsonResponse(model_upload_json(upload))


def model_upload_json(upload: ModelUpload) -> dict:
    return {
        "id": upload.pk,
        "project": upload.project.slug,
        "state": upload.state,
        "label": upload.label,
        "size": upload.size,
        "reason": upload.reason,
        "version": upload.version_id,
        "created_at": upload.created_at.isoformat(),
        "checked_at": _iso(upload.checked_at),
    }


@require_GET
@token_required
def version_download(request: HttpRequest, token: ApiToken, version_id: int) -> HttpResponse:
    """`GET /api/versions/<id>/download`: the version's `tool.json` and `model.safetensors` in one zip, sent as
    it is made (`annotate.versions.archive`); 409 when the version has no files yet."""
    version = _administered(token, ModelVersion, version_id)
    if version is None:
        return _error(404, f"no model version {version_id} that this token can reach")
    try:
        chunks = model_versions.archive(version)
    except model_versions.NoFiles as exc:
        return _error(409, str(exc))
    response = StreamingHttpResponse(chunks, content_type="application/zip")
    response["Content-Disposition"] = content_disposition_header(True, model_versions.archive_name(version))
    return response
