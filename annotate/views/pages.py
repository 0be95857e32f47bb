"""The home page (the user's projects with progress), a project's page, and what to do about a forgotten
password."""

from __future__ import annotations

from collections import Counter

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count, Max, OuterRef, Subquery
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_http_methods

from annotate import accounts, progress, tasks
from annotate.forms import ExperienceUploadForm, ExportForm, ForgottenForm, ImportForm
from annotate.models import FINAL_KINDS, FINISHED_STATUSES, Answer, Item, ItemStatus, Membership, Project, UploadState
from annotate.views import access


@require_http_methods(["GET", "POST"])
def password_forgotten(request: HttpRequest) -> HttpResponse:
    """A forgotten password: a link by email when the site sends email (`TC_EMAIL_URL`), else whom to ask.

    The answer to a request is the same whether or not the account exists or has an address, so the form
    tells a visitor nothing about who has an account.
    """
    if not settings.TC_EMAIL:
        if request.method == "POST":
            return HttpResponseNotAllowed(["GET"])
        return render(request, "registration/password_forgotten.html")
    form = ForgottenForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        accounts.send_forgotten(request, form.cleaned_data["name"])
        return render(request, "registration/password_forgotten.html", {"sent": True})
    return render(request, "registration/password_forgotten.html", {"form": form},
                  status=400 if form.is_bound else 200)


@require_GET
@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The projects the user reviews in, each with its progress and their own count.

    The items are counted per project and status from the (project, status) index, in one statement for all
    the projects: a join of projects and items counted DISTINCT took 110 ms for three projects of 100,000 items.
    The user's role comes with the projects, not one query each.
    """
    user = request.user
    role = Membership.objects.filter(project=OuterRef("pk"), user=user.pk).values("role")[:1]
    projects = list(Project.objects.for_user(user).annotate(viewer_role=Subquery(role)).order_by("name", "id"))
    total, finished, ready, refused = Counter(), Counter(), Counter(), Counter()
    by_status = Item.objects.filter(project__in=projects).order_by().values_list("project", "status")
    for project_id, status, count in by_status.annotate(n=Count("*")):
        total[project_id] += count
        finished[project_id] += count if status in FINISHED_STATUSES else 0
        ready[project_id] += count if status == ItemStatus.READY else 0
        refused[project_id] += count if status == ItemStatus.REFUSED else 0
    mine = dict(
        Answer.objects.filter(reviewer=user, kind__in=FINAL_KINDS)
        .values_list("project")
        .annotate(n=Count("id"))
        .values_list("project", "n")
    )
    rows = []
    for project in projects:
        project.remember_role(user, project.viewer_role)
        pk = project.pk
        rows.append({"project": project, "total": total[pk], "finished": finished[pk], "ready": ready[pk],
                     "waiting": total[pk] - finished[pk] - ready[pk] - refused[pk], "refused": refused[pk],
                     "mine": mine.get(pk, 0),
                     "role": project.role_of(user), "is_admin": project.is_admin(user)})
    administers, can_create = any(row["is_admin"] for row in rows), access.can_create_projects(user)
    access.remember_roles(request, administers=administers, can_create=can_create)
    return render(request, "annotate/home.html", {"rows": rows, "can_create": can_create,
                                                  "administers": administers})


@require_GET
@login_required
def project_detail(request: HttpRequest, slug: str) -> HttpResponse:
    """Guidelines, counts, Start reviewing; import and export for the project's admins."""
    return project_page(request, access.member_project(request, slug))


def project_page(request: HttpRequest, project: Project, *, export_form: ExportForm | None = None,
                 status: int = 200) -> HttpResponse:
    """The project's page; with `export_form`, the export form as sent, with its errors beside its fields."""
    user = request.user
    counts = project.item_counts()
    total = sum(counts.values())
    finished = sum(counts.get(s, 0) for s in FINISHED_STATUSES)
    mine = Answer.objects.filter(project=project, reviewer=user).values_list("kind").annotate(n=Count("id"))
    context = {
        "project": project,
        "is_admin": project.is_admin(user),
        "counts": [(label, n) for _, label, n in ItemStatus.counted(counts)],
        "total": total,
        "finished": finished,
        "ready": counts.get(ItemStatus.READY, 0),
        "waiting": counts.get(ItemStatus.PENDING, 0),
        "refused": counts.get(ItemStatus.REFUSED, 0),
        "mine": dict(mine),
        "version": project.current_version,
    }
    if context["is_admin"]:
        context["import_form"] = ImportForm()
        context["export_form"] = export_form or ExportForm(project=project)
        # Five a page, newest first: past the fifth, an older export could not be downloaded here, nor an older
        # upload removed (each accepted one goes on being trained on).
        context["exports"] = Paginator(project.exports.all(), 5).get_page(request.GET.get("exports"))
        context["upload_form"] = ExperienceUploadForm()
        context["uploads"] = Paginator(project.experience_uploads.all(), 5).get_page(request.GET.get("uploads"))
        context["imports"] = list(project.item_imports.recent())
        context["importing"] = any(row.state == UploadState.PENDING for row in context["imports"])
        context["reviewers"] = _reviewer_progress(project)
        context["open_disagreements"] = project.items.filter(disagreement=True, adjudication__isnull=True).count()
        context["waited_too_long"] = bool(context["waiting"]) and tasks.waited_too_long(project)
        if context["refused"]:
            context["latest_refusal"] = (project.items.filter(status=ItemStatus.REFUSED).order_by("-id")
                                         .values_list("refusal", flat=True).first())
    return render(request, "annotate/project_detail.html", context, status=status)


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
    return sorted(rows.values(), key=lambda r: progress.name_order(r["name"]))
