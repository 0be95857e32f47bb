"""Import (a JSONL upload a worker imports, its row polling until done) and export (a Celery task with a progress
bar and a download) for project admins."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HTMX_STOP_POLLING

from annotate.forms import ExperienceUploadForm, ExportForm, ImportForm
from annotate.models import ExperienceUpload, Export, ItemImport
from annotate.views import access
from annotate.views.pages import project_page
from annotate.views.uploads import remove_row, upload_row


@require_POST
@login_required
def project_import(request: HttpRequest, slug: str) -> HttpResponse:
    """Store an uploaded JSONL file and queue its import; the project page follows it until a worker is done."""
    project = access.admin_project(request, slug)
    form = ImportForm(request.POST, request.FILES)
    if not form.is_valid():
        for error in form.errors.get("file", []):
            messages.error(request, error)
        return redirect("project_detail", slug=project.slug)
    from annotate import imports

    upload = form.cleaned_data["file"]
    try:
        imports.queue_import(project, request.user, upload, name=upload.name)
    except imports.ImportRejected as exc:
        messages.error(request, f"Nothing was imported: {exc}")
        return redirect("project_detail", slug=project.slug)
    messages.success(request, f"{upload.name} uploaded: every line is being checked, and nothing is imported "
                              "unless all of them are right. Its progress is under the import form.")
    return redirect("project_detail", slug=project.slug)


@require_GET
@login_required
def import_status(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """An item import's row, as a fragment; HTTP 286 once a worker imported the file or refused it."""
    return _row(request, slug, ItemImport, pk, "annotate/_import_status.html")


@require_POST
@login_required
def experience_upload(request: HttpRequest, slug: str) -> HttpResponse:
    """Keep an experience file a user's own program traced; a worker checks it binds to the project's tool."""
    project = access.admin_project(request, slug)
    form = ExperienceUploadForm(request.POST, request.FILES)
    if not form.is_valid():
        for error in form.errors.get("experience", []):
            messages.error(request, error)
        return redirect("project_detail", slug=project.slug)
    from annotate import imports

    upload = form.cleaned_data["experience"]
    try:
        row = imports.upload_experience(project, request.user, upload, name=upload.name)
    except imports.ImportRejected as exc:
        messages.error(request, f"The experience file was not kept: {exc}")
        return redirect("project_detail", slug=project.slug)
    messages.success(request, f"Experience file {row.original_name or row.pk} uploaded; it is being checked.")
    return redirect("project_detail", slug=project.slug)


@require_GET
@login_required
def upload_status(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """An experience upload's check, as a fragment; HTTP 286 once accepted or refused."""
    return _row(request, slug, ExperienceUpload, pk, "annotate/_upload_status.html")


def _row(request: HttpRequest, slug: str, model, pk: int, template: str) -> HttpResponse:
    project = access.admin_project(request, slug)
    return upload_row(request, template, get_object_or_404(model, pk=pk, project=project), project)


@require_POST
@login_required
def upload_remove(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """Remove an experience upload and its file; refused, saying why, while a training job waits to use it."""
    from annotate import imports

    project = access.admin_project(request, slug)
    upload = get_object_or_404(ExperienceUpload, pk=pk, project=project)
    return remove_row(request, project, upload, imports.remove_upload, imports.UploadInUse,
                      template="annotate/_upload_status.html",
                      name=upload.original_name or f"experience upload {upload.pk}",
                      page=reverse("project_detail", args=[project.slug]))


NOTHING_TO_EXPORT = ("No reviewed answer matches these filters, so there is nothing to export: widen one "
                     "(more days, a wider confidence range, every reviewer).")


@require_POST
@login_required
def export_create(request: HttpRequest, slug: str) -> HttpResponse:
    """Start an export of the project's answers (experience files or flat JSONL) as a Celery task.

    A form that cannot be used, or filters that select nothing, show the project's page again with the form as
    sent and the reason beside it, so the admin changes a filter rather than typing them all again."""
    project = access.admin_project(request, slug)
    form = ExportForm(request.POST, project=project)
    if not form.is_valid():
        return project_page(request, project, export_form=form, status=400)
    from annotate import export as exports

    try:
        export = exports.create_export(
            project, request.user, format=form.cleaned_data["format"],
            minibatch_size=form.cleaned_data["minibatch_size"], filters=form.filters(),
        )
    except ValueError as exc:  # nothing selected is said as the page speaks, not as the API's "export: ..."
        form.add_error(None, NOTHING_TO_EXPORT if isinstance(exc, exports.NothingSelected) else str(exc))
        return project_page(request, project, export_form=form, status=400)
    messages.success(request, f"Export {export.pk} started.")
    return redirect("project_detail", slug=project.slug)


@require_GET
@login_required
def export_status(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """The export's progress fragment; HTTP 286 once it is final, so the page stops polling."""
    project = access.admin_project(request, slug)
    export = get_object_or_404(Export, pk=pk, project=project)
    response = render(request, "annotate/_export_status.html", {"export": export})
    if export.is_final:
        response.status_code = HTMX_STOP_POLLING
    return response


@require_GET
@login_required
def export_download(request: HttpRequest, slug: str, pk: int) -> FileResponse:
    """The finished export as one archive (experience files or JSONL, with its manifest)."""
    project = access.admin_project(request, slug)
    export = get_object_or_404(Export, pk=pk, project=project)
    if not export.is_final or export.state != "SUCCEEDED":
        raise Http404("This export has not finished.")
    from annotate import export as exports

    path = exports.archive_path(export)
    return FileResponse(path.open("rb"), as_attachment=True, filename=path.name)
