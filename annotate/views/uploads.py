"""An upload's row on a page (experience files on the project page, models on the training page): its check,
polled until a worker accepted or refused it, and its removal, answered in place."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django_htmx.http import HTMX_STOP_POLLING

from annotate.models import UploadState


def upload_row(request: HttpRequest, template: str, upload, project) -> HttpResponse:
    """The row as a fragment; HTTP 286 once the upload is checked, which tells htmx to stop polling."""
    response = render(request, template, {"upload": upload, "project": project})
    if upload.state != UploadState.PENDING:
        response.status_code = HTMX_STOP_POLLING
    return response


def remove_row(request: HttpRequest, project, upload, remove: Callable, refused: type[Exception], *, template: str,
               name: str, page: str) -> HttpResponse:
    """`remove(upload)`, answered for htmx with the line that replaces the row, or with the row again and the
    reason when `remove` raises `refused` (200: htmx leaves the page alone on a 4xx); for a plain request with a
    message and a redirect to `page`."""
    try:
        remove(upload)
    except refused as exc:
        if request.htmx:
            return render(request, template, {"upload": upload, "project": project, "error": str(exc)})
        messages.error(request, f"{name} was not removed. {exc}")
        return redirect(page)
    if request.htmx:
        return render(request, "annotate/_upload_removed.html", {"name": name})
    messages.success(request, f"{name} removed.")
    return redirect(page)
