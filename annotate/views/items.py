"""The item list of a project: filters in a GET form, a table updated in place by htmx, keyset pages.

The address carries every filter (htmx pushes it), so a filtered list can be bookmarked and shared. Impossible
filters are answered with 400 and the list's error summary, never ignored.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from annotate import itemlist
from annotate.models import ItemStatus
from annotate.views import access


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
