"""The home page (the user's projects with progress) and a project's page."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db.models import Count, Max, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from annotate.forms import ExperienceUploadForm, ExportForm, ImportForm
from annotate.models import FINAL_KINDS, Answer, ItemStatus, Project
from annotate.views import access

_FINISHED = (ItemStatus.DONE, ItemStatus.SKIPPED)


@require_GET
@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The projects the user reviews in, each with its progress and their own count."""
    user = request.user
    projects = (
        Project.objects.for_user(user)
        .annotate(
            total=Count("items", distinct=True),
            finished=Count("items", filter=Q(items__status__in=_FINISHED), distinct=True),
        )
        .order_by("name", "id")
    )
    mine = dict(
        Answer.objects.filter(reviewer=user, kind__in=FINAL_KINDS)
        .values_list("project")
        .annotate(n=Count("id"))
        .values_list("project", "n")
    )
    rows = [
        {"project": p, "total": p.total, "finished": p.finished, "mine": mine.get(p.pk, 0),
         "role": p.role_of(user)}
        for p in projects
    ]
    return render(request, "annotate/home.html", {"rows": rows, "can_create": access.can_create_projects(user)})


@require_GET
@login_required
def project_detail(request: HttpRequest, slug: str) -> HttpResponse:
    """Guidelines, counts, Start reviewing; import and export for the project's admins."""
    project = access.member_project(request, slug)
    user = request.user
    counts = dict(project.items.order_by().values_list("status").annotate(n=Count("id")).values_list("status", "n"))
    total = sum(counts.values())
    finished = sum(counts.get(s, 0) for s in _FINISHED)
    mine = Answer.objects.filter(project=project, reviewer=user).values_list("kind").annotate(n=Count("id"))
    context = {
        "project": project,
        "is_admin": project.is_admin(user),
        "counts": [(label, counts.get(value, 0)) for value, label in ItemStatus.choices],
        "total": total,
        "finished": finished,
        "mine": dict(mine),
        "version": project.current_version,
    }
    if context["is_admin"]:
        context["import_form"] = ImportForm()
        context["export_form"] = ExportForm(project=project)
        context["exports"] = project.exports.all()[:5]
        context["upload_form"] = ExperienceUploadForm()
        context["uploads"] = project.experience_uploads.all()[:5]
        context["reviewers"] = _reviewer_progress(project)
        context["open_disagreements"] = project.items.filter(disagreement=True, adjudication__isnull=True).count()
    return render(request, "annotate/project_detail.html", context)


def _reviewer_progress(project: Project) -> list[dict]:
    """Per reviewer: answers, skips and drafts in this project, and when they last changed one."""
    rows: dict[str, dict] = {}
    counts = (
        Answer.objects.filter(project=project).order_by()
        .values("reviewer__username", "kind").annotate(n=Count("id"), last=Max("updated_at"))
    )
    for entry in counts:
        row = rows.setdefault(entry["reviewer__username"], {"name": entry["reviewer__username"], "target": 0,
                                                            "skip": 0, "draft": 0, "last": None})
        row[entry["kind"]] = entry["n"]
        row["last"] = max(filter(None, [row["last"], entry["last"]]))
    return sorted(rows.values(), key=lambda r: r["name"])
