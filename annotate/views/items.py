"""The item list of a project: filters in a GET form, a table updated in place by htmx, keyset pages.

The address carries every filter (htmx pushes it), so a filtered list can be bookmarked and shared. Impossible
filters are answered with 400 and the list's error summary, never ignored.
"""

from __future__ import annotations

import logging
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRedirect

from annotate import deletion, itemlist
from annotate.models import Answer, Item, ItemStatus
from annotate.views import access

logger = logging.getLogger(__name__)


@require_GET
@login_required
@vary_on_headers("HX-Request")
def item_list(request: HttpRequest, slug: str) -> HttpResponse:
    """Members' list of the project's items, filtered and paged; the table alone for htmx requests."""
    project = access.member_project(request, slug)
    context = {"project": project, "errors": {}, "page": None}
    try:
        filters = itemlist.ItemFilters.parse(project, request.GET, user=request.user)
    except itemlist.InvalidFilters as exc:
        context.update(errors=exc.errors, error_rows=exc.labelled,
                       values={**itemlist.ItemFilters().values(), **exc.values})
    else:
        results = itemlist.page(project, filters, size=itemlist.PAGE_SIZE)
        context.update(page=results, values=filters.values(), filters=filters)
        if results.rows and project.is_admin(request.user):
            query = filters.query_string(sort="")
            context["delete_url"] = reverse("items_delete", args=[project.slug]) + (query if query != "?" else "")
    status = 400 if context["errors"] else 200
    if request.htmx:
        response = render(request, "annotate/_item_results.html", context, status=status)
        # The address bar gets the filters without the form's empty fields, so a shared link stays readable.
        shown = urlencode([(name, value) for name, value in request.GET.items() if value])
        response["HX-Push-Url"] = "false" if status != 200 else request.path + (f"?{shown}" if shown else "")
        return response
    context.update(
        statuses=ItemStatus.choices,
        reviewers=itemlist.reviewer_choices(project, request.user),
        versions=project.versions.order_by("-id").values("id", "label"),
        sorts=itemlist.SORTS,
    )
    return render(request, "annotate/item_list.html", context, status=status)


@require_http_methods(["GET", "POST"])
@login_required
def items_delete(request: HttpRequest, slug: str) -> HttpResponse:
    """What deleting the items that the list's filters match would remove, and (POST) deleting them.

    The page counts the items it shows (`expected`, the newest of them `through`). The POST deletes those that
    still match, and none if that count changed meanwhile: nobody deletes more, or other, items than they saw.
    """
    project = access.admin_project(request, slug)
    params = request.POST if request.method == "POST" else request.GET
    given = {name: params[name] for name in itemlist.FILTER_PARAMS if params.get(name)}
    query = f"?{urlencode(given)}" if given else ""
    list_url = reverse("item_list", args=[project.slug]) + query
    try:
        filters = itemlist.ItemFilters.parse(project, given, user=request.user)
    except itemlist.InvalidFilters:
        return redirect(list_url)  # the list names what is wrong with them
    blockers, warning, status = None, "", 200
    if request.method == "POST":
        deleted, warning, blockers, status = _delete(project, filters, params)
        if deleted:
            logger.info("project %s: %s deleted by %s (filters %s)", project.slug, deletion.counted(deleted),
                        request.user, given)
            if deleted[Item]:
                messages.success(request, f"Deleted {deletion.counted(deleted)}.")
            else:
                messages.info(request, "No item matched these filters: nothing was deleted.")
            return HttpResponseClientRedirect(list_url) if request.htmx else redirect(list_url)
        if request.htmx:  # the page again, counted afresh, with the reason on top
            if warning:
                messages.warning(request, warning)
            return HttpResponseClientRedirect(reverse("items_delete", args=[project.slug]) + query)
    if blockers is None:
        blockers = deletion.blockers(project)
    through, items = deletion.matching(project, filters)
    rows = deletion.item_summary(items)
    described = [(_NAMES.get(name, itemlist.LABELS.get(name, name)), value) for name, value in given.items()]
    context = {"project": project, "described": described, "list_url": list_url, "given": given, "through": through,
               "count": rows[Item], "answers": rows.get(Answer, 0), "blockers": blockers, "warning": warning,
               "in_progress": deletion.in_progress(project, items),
               "rows": [(deletion.name(model, count), count) for model, count in rows.items() if count]}
    return render(request, "annotate/items_delete.html", context, status=status)


_NAMES = {"confidence_min": "Confidence at least", "confidence_max": "Confidence at most", "reviewer": "Answered by"}


def _delete(project, filters: itemlist.ItemFilters, params) -> tuple[dict | None, str, list[str] | None, int]:
    """Delete what the confirmation counted: the rows deleted (None if not), a warning, what blocks it (None if
    nothing was asked), and the status of the page shown again otherwise."""
    through, expected = _whole(params.get("through")), _whole(params.get("expected"))
    if through is None or expected is None:
        return None, ("Nothing was deleted: the request did not say which items it counted. Check what goes below "
                      "and confirm."), None, 400
    try:
        return deletion.delete_matching(project, filters.apply, through=through, expected=expected), "", None, 200
    except deletion.CountChanged as exc:
        return None, (f"Nothing was deleted: the filters now match {exc.found:,} of the items counted here before, "
                      f"not {exc.expected:,}. Check what goes below and confirm again."), None, 409
    except deletion.ProjectBusy as exc:
        # A job launched midway stops the deletion at its next batch: say what went before it.
        stopped = (f"Deleted {deletion.counted(exc.deleted)} before the deletion stopped: {'; '.join(exc.reasons)}. "
                   "The rest below stays.") if exc.deleted else ""
        return None, stopped, exc.reasons, 409


def _whole(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() and len(text) < 19 else None
