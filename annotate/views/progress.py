"""A project's progress page: items by status, each reviewer's pace, throughput charts, agreement.

Members see the project's figures and their own row; project admins see every reviewer (as on the project
page). Agreement reads every final target, so it is a separate fragment the page loads after it is shown.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from annotate import agreement
from annotate.progress import GLANCE_CACHED_FROM, GLANCE_SECONDS, glance, project_progress
from annotate.views import access

PROGRESS_CACHE_SECONDS = 30


@require_GET
@login_required
def progress(request: HttpRequest, slug: str) -> HttpResponse:
    """Progress of the project and its reviewers, with small charts."""
    project = access.member_project(request, slug)
    # Reading every answer of a 100,000-item project takes a few hundred milliseconds: the figures are shared
    # for PROGRESS_CACHE_SECONDS, which the page states.
    key = f"annotate:progress:{project.pk}:{timezone.get_current_timezone_name()}"  # days are the viewer's
    figures = cache.get(key)
    if figures is None:
        figures = project_progress(project)
        cache.set(key, figures, PROGRESS_CACHE_SECONDS)
    is_admin = project.is_admin(request.user)
    if not is_admin:
        figures.reviewers = [r for r in figures.reviewers if r.name == request.user.get_username()]
    top = max((r.finished for r in figures.reviewers), default=0) or 1
    rows = [{"r": r, "done_width": round(100 * r.done / top, 2), "skip_width": round(100 * r.skipped / top, 2)}
            for r in figures.reviewers]
    return render(request, "annotate/progress.html", {"project": project, "figures": figures, "rows": rows,
                                                      "is_admin": is_admin, "cache_seconds": PROGRESS_CACHE_SECONDS})


@require_GET
@login_required
@vary_on_headers("HX-Request")
def progress_agreement(request: HttpRequest, slug: str) -> HttpResponse:
    """Agreement between reviewers: the agreement page's report and cache (one computation serves both)."""
    project = access.member_project(request, slug)
    report = agreement.cached_project_report(project)
    context = {"project": project, "report": report, "is_admin": project.is_admin(request.user)}
    template = "annotate/_progress_agreement.html" if request.htmx else "annotate/progress_agreement.html"
    return render(request, template, context)


@require_GET
@login_required
def my_progress(request: HttpRequest, slug: str) -> HttpResponse:
    """The item page's progress line, which the page asks for once it is shown (and again with each item it
    swaps in), so counting never slows the item itself."""
    project = access.member_project(request, slug)
    context = {"glance": glance(project, request.user), "cached_from": GLANCE_CACHED_FROM,
               "cache_seconds": GLANCE_SECONDS}
    return render(request, "annotate/_my_progress.html", context)

