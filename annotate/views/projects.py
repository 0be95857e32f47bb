"""Creating and configuring projects (project admins): tool and mode, configuration, guidelines, members,
which model version predicts, and deleting a project."""

from __future__ import annotations

import json
import logging

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import BadRequest, PermissionDenied
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from annotate import accounts, deletion, guidelines, progress, queue, tasks
from annotate.forms import MemberForm, ProjectDeleteForm, ProjectForm, VersionForm
from annotate.models import Claim, Item, ItemStatus, Membership, ModelVersion, Project, Role
from annotate.views import access

logger = logging.getLogger(__name__)


@require_http_methods(["GET", "POST"])
@login_required
def project_create(request: HttpRequest) -> HttpResponse:
    """A new project with a fresh, untrained model of the chosen tool, mode and configuration."""
    if not access.can_create_projects(request.user):
        raise PermissionDenied("Only staff and project admins create projects.")
    form = ProjectForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            project = form.save(commit=False)
            project.created_by = request.user
            project.save()
            Membership.objects.create(project=project, user=request.user, role=Role.ADMIN)
            version = ModelVersion.objects.allocate(project, label="untrained", trained=False)
            project.current_version = version
            project.save(update_fields=["current_version"])
        access.remember_roles(request, administers=True)
        messages.success(request, f"Project {project.name} created with a fresh, untrained {project.tool} model.")
        return redirect("project_detail", slug=project.slug)
    return render(request, "annotate/project_form.html", {"form": form, "creating": True})


@require_http_methods(["GET", "POST"])
@login_required
def project_settings(request: HttpRequest, slug: str) -> HttpResponse:
    """Guidelines, configuration and queue policy; the members; the model version that predicts."""
    project = access.admin_project(request, slug)
    form = ProjectForm(request.POST or None, instance=project)
    if request.method == "POST" and form.is_valid():
        saved = form.save_settings()
        if saved is not None:
            project, kept = saved
            said = ["Project settings saved.", kept] if kept else ["Project settings saved."]
            messages.success(request, " ".join([*said, *_overlap_applied(project)]))
            return redirect("project_settings", slug=project.slug)
        return render(request, "annotate/project_form.html", _settings_context(request, project, form=form),
                      status=409)
    return render(request, "annotate/project_form.html", _settings_context(request, project, form=form))


def _overlap_applied(project: Project) -> list[str]:
    """Items finished or sent back to the queue by the project's overlap (`queue.apply_overlap`), in words."""
    finished, reopened = queue.apply_overlap(project)
    said = []
    if finished:
        said.append(f"{finished:,} {'item' if finished == 1 else 'items'} already had {project.overlap} "
                    f"{'answer' if project.overlap == 1 else 'answers'} and {'is' if finished == 1 else 'are'} "
                    f"now finished.")
    if reopened:
        said.append(f"{reopened:,} finished {'item' if reopened == 1 else 'items'} with fewer than "
                    f"{project.overlap} answers went back to the queue.")
    return said


@require_POST
@login_required
def guidelines_preview(request: HttpRequest) -> HttpResponse:
    """The guidelines being typed on a project's form, rendered as reviewers will see them (an htmx fragment).

    For those who may write guidelines: staff and project admins, who are the ones who may create projects.
    """
    if not access.can_create_projects(request.user):
        raise PermissionDenied("Only staff and project admins write guidelines.")
    text = request.POST.get("guidelines", "")
    if len(text) > guidelines.CACHED_UP_TO:
        return render(request, "annotate/_guidelines_preview.html",
                      {"error": f"Guidelines longer than {guidelines.CACHED_UP_TO:,} characters are not previewed."},
                      status=400)
    return render(request, "annotate/_guidelines_preview.html", {"html": guidelines.to_html(text) if text else ""})


@require_POST
@login_required
def member_add(request: HttpRequest, slug: str) -> HttpResponse:
    """Add members (one or several usernames), or change existing members' role; site administrators may create
    the accounts of names that have none, and are then shown each new account's set-password link, once."""
    project = access.admin_project(request, slug)
    form = MemberForm(request.POST, may_create=accounts.can_create(request.user))
    if not form.is_valid():
        return render(request, "annotate/project_form.html",
                      _settings_context(request, project, member_form=form), status=400)
    users, role, new_names = form.cleaned_data["username"], form.cleaned_data["role"], form.cleaned_data["new_names"]
    try:
        with transaction.atomic():
            created = accounts.create(new_names)
            for user in users + created:
                Membership.objects.update_or_create(project=project, user=user, defaults={"role": role})
    except IntegrityError:  # another admin created one of these names a moment ago
        form.add_error("username", "One of these accounts was created meanwhile by someone else; nobody was "
                                   "added. Submit again to add them.")
        return render(request, "annotate/project_form.html",
                      _settings_context(request, project, member_form=form), status=409)
    names = [user.get_username() for user in users + created]
    label = Role(role).label.lower()  # "project admin", "reviewer"
    if len(names) == 1:
        messages.success(request, f"{names[0]} is now a {label} of {project.name}.")
    else:
        messages.success(request, f"{len(names):,} users are now {label}s of {project.name}: {', '.join(names)}.")
    if created:
        return _links_page(request, project, created, new=True)
    return redirect("project_settings", slug=project.slug)


@require_POST
@login_required
def member_link(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """A new set-password link for a member who lost theirs, never used it, or forgot their password."""
    project = access.admin_project(request, slug)
    membership = get_object_or_404(Membership.objects.select_related("user"), pk=pk, project=project)
    refusal = accounts.may_issue_link(request.user, membership.user)
    if refusal:
        raise PermissionDenied(refusal)
    return _links_page(request, project, [membership.user], new=False)


@require_POST
@login_required
def member_active(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """Deactivate a member's account (someone who left the team), or reactivate it: a site administrator's act,
    offered beside the member. Their answers and memberships stay either way."""
    project = access.admin_project(request, slug)
    membership = get_object_or_404(Membership.objects.select_related("user"), pk=pk, project=project)
    user, active = membership.user, request.POST.get("active")
    refusal = accounts.may_switch(request.user, user)
    if refusal:
        raise PermissionDenied(refusal)
    name = user.get_username()
    if active == "1" and not user.is_active:
        accounts.reactivate(user)
        messages.success(request, f"{name}'s account is active again: they sign in as before.")
    elif active == "0" and user.is_active:
        held = accounts.deactivate(user)
        released = (f" The {held} item{'s' if held != 1 else ''} they were labelling went back to the queue."
                    if held else "")
        messages.success(request, f"{name}'s account is deactivated: they can no longer sign in, and are signed out "
                                  f"everywhere.{released} Their answers are kept; Reactivate undoes this.")
    elif active not in ("0", "1"):
        raise BadRequest("active: 0 (deactivate) or 1 (reactivate)")
    else:  # already so: another admin did it, or the form was sent twice
        messages.info(request, f"{name}'s account was already {'active' if user.is_active else 'deactivated'}.")
    return redirect("project_settings", slug=project.slug)


def _links_page(request: HttpRequest, project, users: list, *, new: bool) -> HttpResponse:
    """The set-password links, shown once (and mailed, when the site sends email); the page is never cached, as
    each link sets a password."""
    links = accounts.links(request, users)
    response = render(request, "annotate/member_links.html", {
        "project": project, "links": links, "new": new, "sends_email": settings.TC_EMAIL,
        "emailed": sum(1 for link in links if link.emailed_to),
        "days": accounts.link_days()})
    add_never_cache_headers(response)
    return response


@require_POST
@login_required
def member_remove(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    project = access.admin_project(request, slug)
    membership = get_object_or_404(Membership, pk=pk, project=project)
    if membership.user_id == request.user.pk and membership.role == Role.ADMIN:
        messages.error(request, "You cannot remove yourself as admin; ask another admin.")
    else:
        name = membership.user.get_username()
        held = Claim.objects.filter(item__project=project, reviewer=membership.user,
                                    expires_at__gt=timezone.now()).count()
        membership.delete()
        released = (f" The {held} item{'s' if held != 1 else ''} they were labelling went back to the queue; "
                    f"their answers are kept.") if held else ""
        messages.success(request, f"{name} was removed from {project.name}.{released}")
    return redirect("project_settings", slug=project.slug)


@require_http_methods(["GET", "POST"])
@login_required
def project_delete(request: HttpRequest, slug: str) -> HttpResponse:
    """What deleting the project would remove, and (POST, the slug typed) deleting it with its files."""
    project = access.admin_project(request, slug)
    form = ProjectDeleteForm(request.POST or None, project=project)
    blockers = deletion.blockers(project)
    if request.method == "POST" and form.is_valid() and not blockers:
        try:
            deleted = deletion.delete_project(project)
        except deletion.ProjectBusy as exc:  # work started since the page was read
            blockers = exc.reasons
        else:
            logger.info("project %s (%s) deleted by %s: %s", project.slug, project.pk, request.user, deleted)
            messages.success(request, f"Project {project.name} was deleted with {deleted}.")
            return redirect("home")
    context = {"project": project, "form": form, "blockers": blockers, "in_progress": deletion.in_progress(project),
               "rows": [(deletion.name(model, count), count) for model, count in deletion.summary(project).items()
                        if count]}
    status = 200 if request.method == "GET" else 409 if blockers else 400  # a POST that deleted returned above
    return render(request, "annotate/project_delete.html", context, status=status)


@require_POST
@login_required
def predictions_requeue(request: HttpRequest, slug: str) -> HttpResponse:
    """Queue predictions again for the items still waiting for one (their messages may have been lost)."""
    project = access.admin_project(request, slug)
    queued = tasks.requeue_waiting(project)
    if queued:
        messages.success(request, f"Predictions queued again for {queued:,} waiting item{'s' if queued != 1 else ''}"
                                  ". A running worker makes them ready for review.")
    else:
        messages.info(request, "No item is waiting for a prediction from a model: nothing was queued.")
    return redirect("project_detail", slug=project.slug)


@require_GET
@login_required
def refused_inputs(request: HttpRequest, slug: str) -> StreamingHttpResponse:
    """The refused items' inputs as an items file (`{"inputs": ...}` per line): fixed, it imports again."""
    project = access.admin_project(request, slug)
    rows = project.items.filter(status=ItemStatus.REFUSED).order_by("id").values_list("inputs", flat=True)
    lines = (json.dumps({"inputs": inputs}, ensure_ascii=False) + "\n" for inputs in rows.iterator(chunk_size=2000))
    response = StreamingHttpResponse(lines, content_type="application/x-ndjson; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{project.slug}-refused-items.jsonl"'
    return response


@require_POST
@login_required
def refused_remove(request: HttpRequest, slug: str) -> HttpResponse:
    """Delete the project's refused items (their inputs can be downloaded first, fixed and imported again)."""
    project = access.admin_project(request, slug)
    removed = Item.objects.remove_refused(project)
    logger.info("project %s: %s refused items removed by %s", project.slug, removed, request.user)
    if removed:
        messages.success(request, f"Removed {removed:,} refused item{'s' if removed != 1 else ''}.")
    else:
        messages.info(request, "No item is refused: nothing was removed.")
    url = reverse("project_detail", args=[project.slug])
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


@require_POST
@login_required
def version_select(request: HttpRequest, slug: str) -> HttpResponse:
    """Make one of the project's model versions the one that predicts new items."""
    project = access.admin_project(request, slug)
    form = VersionForm(request.POST, project=project)
    if not form.is_valid():
        return render(request, "annotate/project_form.html",
                      _settings_context(request, project, version_form=form), status=400)
    changed = project.current_version_id != form.cleaned_data["version"].pk
    project.current_version = form.cleaned_data["version"]
    project.save(update_fields=["current_version"])
    retried = tasks.retry_refused(project) if changed else 0
    messages.success(request, f"New predictions now come from {project.current_version}." + (
        f" It will try the {retried:,} item{'s' if retried != 1 else ''} an earlier version refused." if retried
        else ""))
    return redirect("project_settings", slug=project.slug)


def _settings_context(request, project, *, form=None, member_form=None, version_form=None) -> dict:
    may_create = accounts.can_create(request.user)
    # Admins first, then names as people read them ("reviewer2" before "reviewer10").
    members = sorted(project.memberships.select_related("user"),
                     key=lambda m: (m.role != Role.ADMIN, progress.name_order(m.user.get_username())))
    for m in members:
        m.may_link = accounts.may_issue_link(request.user, m.user) is None
        m.may_switch = accounts.may_switch(request.user, m.user) is None
    return {
        "project": project,
        "form": form or ProjectForm(instance=project),
        "member_form": member_form or MemberForm(may_create=may_create),
        "version_form": version_form or VersionForm(project=project),
        "members": members,
        "creating": False,
    }
