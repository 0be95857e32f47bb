"""The item list of a project: filters in a GET form, a table updated in place by htmx, keyset pages.

The address carries every filter (htmx pushes it), so a filtered list can be bookmarked and shared. Impossible
filters are answered with 400 and the list's error summary, never ignored.
"""

from __future__ import annotations

import logging
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HTMX_STOP_POLLING, HttpResponseClientRedirect

from annotate import deletion, itemlist
from annotate.models import Answer, DeletionState, Item, ItemDeletion, ItemStatus
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
        itemlist.mark_own(results.rows, request.user)
        context.update(page=results, values=filters.values(), filters=filters)
        if results.rows and project.is_admin(request.user):
            itemlist.mark_held(results.rows)
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
    """What deleting the items that the list's filters match would remove, and (POST) queueing their deletion.

    The page counts the items it shows (`expected`, the newest of them `through`). The POST stores those ids for
    a worker, which deletes those that still match, and queues none if that count changed meanwhile: nobody
    deletes more, or other, items than they saw.
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
        queued, warning, blockers, status = _queue(request, project, filters, params)
        if status == 200:
            if queued is None:
                messages.info(request, "No item matched these filters: nothing was deleted.")
                target = list_url
            else:
                logger.info("project %s: deletion %s of %s items queued by %s (filters %s)", project.slug, queued.pk,
                            queued.total, request.user, given)
                target = reverse("items_deletion", args=[project.slug, queued.pk])
            return HttpResponseClientRedirect(target) if request.htmx else redirect(target)
        if request.htmx:  # the page again, counted afresh, with the reason on top
            if warning:
                messages.warning(request, warning)
            return HttpResponseClientRedirect(reverse("items_delete", args=[project.slug]) + query)
    if blockers is None:
        blockers = deletion.blockers(project)
    through, items = deletion.matching(project, filters)
    rows = deletion.rows_summary(items)
    context = {"project": project, "described": _described(given), "list_url": list_url, "given": given,
               "through": through, "count": rows[Item], "answers": rows.get(Answer, 0), "blockers": blockers,
               "warning": warning, "in_progress": deletion.in_progress(project, items),
               "under_way": project.item_deletions.filter(state__in=[DeletionState.PENDING, DeletionState.RUNNING])
               .defer("item_ids").order_by("pk").first(),
               "rows": [(deletion.name(model, count), count) for model, count in rows.items() if count]}
    return render(request, "annotate/items_delete.html", context, status=status)


_NAMES = {"confidence_min": "Confidence at least", "confidence_max": "Confidence at most", "reviewer": "Answered by"}


def _queue(request: HttpRequest, project, filters: itemlist.ItemFilters, params):
    """Queue the deletion of what the confirmation counted: (the deletion, None if nothing matched; a warning;
    what blocks it, None if nothing was asked; the status of the page shown again, 200 if queued)."""
    through, expected = itemlist.whole(params.get("through")), itemlist.whole(params.get("expected"))
    if through is None or expected is None:
        return None, ("Nothing was deleted: the request did not say which items it counted. Check what goes below "
                      "and confirm."), None, 400
    try:
        queued = deletion.queue_matching(project, filters, through=through, expected=expected, user=request.user)
    except deletion.CountChanged as exc:
        return None, (f"Nothing was deleted: the filters now match {exc.found:,} of the items counted here before, "
                      f"not {exc.expected:,}. Check what goes below and confirm again."), None, 409
    except deletion.ProjectBusy as exc:
        return None, "", exc.reasons, 409
    return queued, "", None, 200


@require_GET
@login_required
@vary_on_headers("HX-Request")
def items_deletion(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """How a queued deletion goes: the page, or (htmx, polled every second) its status alone, HTTP 286 once it
    has ended, so the page stops polling."""
    project = access.admin_project(request, slug)
    row = get_object_or_404(ItemDeletion.objects.defer("item_ids"), pk=pk, project=project)  # polled: ids unread
    context = _deletion_context(project, row)
    if not request.htmx:
        return render(request, "annotate/items_deletion.html", context)
    response = render(request, "annotate/_deletion_status.html", context)
    if row.is_final:
        response.status_code = HTMX_STOP_POLLING
    return response


@require_POST
@login_required
def items_deletion_stop(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """Stop a queued deletion: what went stays gone, nothing more goes. htmx gets the status, a form a redirect."""
    project = access.admin_project(request, slug)
    row = get_object_or_404(ItemDeletion.objects.defer("item_ids"), pk=pk, project=project)
    try:
        row = deletion.stop(row.pk, by=request.user)
    except ItemDeletion.DoesNotExist:  # its project was deleted meanwhile
        raise Http404("No such deletion.") from None
    except deletion.AlreadyOver as exc:
        if not request.htmx:  # htmx gets the status as it ended, which says so
            messages.info(request, f"Nothing to stop: {exc}.")
        row.refresh_from_db(fields=["state", "reason", "deleted_items", "deleted", "finished_at"])
    else:
        logger.info("project %s: deletion %s stopped by %s after %s items", project.slug, row.pk, request.user,
                    row.deleted_items)
    if request.htmx:
        return render(request, "annotate/_deletion_status.html", _deletion_context(project, row))
    return redirect("items_deletion", project.slug, row.pk)


def _deletion_context(project, row: ItemDeletion) -> dict:
    given = {name: value for name, value in row.filters.items() if name in itemlist.FILTER_PARAMS}
    rows = deletion.deleted_rows(row)
    return {"project": project, "deletion": row, "list_url": reverse("item_list", args=[project.slug]) + (
        f"?{urlencode(given)}" if given else ""), "described": _described(given),
        "rows": [(deletion.name(model, count), count) for model, count in rows.items()],
        "deleted_text": deletion.counted(rows), "kept": max(0, row.total - row.deleted_items)}


def _described(given: dict[str, str]) -> list[tuple[str, str]]:
    """(the filter's name for people, its value) of each filter given."""
    return [(_NAMES.get(name, itemlist.LABELS.get(name, name)), value) for name, value in given.items()]

