"""Permission checks every view starts with.

A project a user is not a member of does not exist for them (404), so its slug and items reveal nothing;
a member who lacks the admin role gets 403 on admin pages.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, Subquery
from django.http import Http404
from django.shortcuts import get_object_or_404
from django.utils import timezone

from annotate.models import Claim, Item, Membership, Project


def member_project(request, slug: str) -> Project:
    """The project `slug` if the signed-in user may review in it; 404 otherwise.

    The user's role comes with the project (one query), so the permission checks that follow cost nothing.
    """
    user = request.user
    projects = Project.objects.select_related("current_version")
    if not user.is_authenticated:
        raise Http404("No such project.")
    role = Membership.objects.filter(project=OuterRef("pk"), user=user).values("role")[:1]
    project = get_object_or_404(projects.annotate(viewer_role=Subquery(role)), slug=slug)
    _require_visible(user, project.viewer_role)
    project.remember_role(user, project.viewer_role)
    return project


def member_item(request, slug: str, pk: int, *, with_claim: bool = False) -> tuple[Project, Item]:
    """`member_project(request, slug)` and `project_item(project, pk)` in one query; 404 as either would give.

    With `with_claim`, the viewer's active claim on the item comes too (`item.viewer_claim_expires`).
    """
    user = request.user
    items = (
        Item.objects.select_related("project", "project__current_version", "prediction", "prediction__model_version")
        .defer("prediction__trace")  # the largest field; only the trace view reads it
        .filter(pk=pk, project__slug=slug)
    )
    role = Membership.objects.filter(project=OuterRef("project_id"), user=user).values("role")[:1]
    items = items.annotate(viewer_role=Subquery(role))
    if with_claim:
        claims = Claim.objects.filter(item=OuterRef("pk"), reviewer=user, expires_at__gt=timezone.now())
        items = items.annotate(viewer_claim_expires=Subquery(claims.values("expires_at")[:1]))
    if not user.is_authenticated:
        raise Http404("No such item.")
    item = get_object_or_404(items)
    _require_visible(user, item.viewer_role)
    project = item.project
    project.remember_role(user, item.viewer_role)
    return project, item


def _require_visible(user, role: str | None) -> None:
    """404 unless `user` is a member (`role` read with the row) or staff: `Project.objects.for_user`, checked on
    the row already read instead of as a subquery, which costs every page a join."""
    if role is None and not user.is_staff:
        raise Http404("No such project.")


def admin_project(request, slug: str) -> Project:
    """The project `slug` if the signed-in user administers it; 404 for non-members, 403 for reviewers."""
    project = member_project(request, slug)
    if not project.is_admin(request.user):
        raise PermissionDenied("Only the project's admins can do this.")
    return project


def project_item(project: Project, pk: int) -> Item:
    """Item `pk` of `project` (404 for another project's item), with its prediction and model version."""
    item = get_object_or_404(
        Item.objects.select_related("prediction", "prediction__model_version").defer("prediction__trace"),
        pk=pk, project=project,
    )
    item.project = project  # the services read item.project; this saves them a query
    return item


def can_create_projects(user) -> bool:
    """Staff and users granted `annotate.add_project`, and anyone who already administers a project."""
    if not user.is_authenticated:
        return False
    if user.is_staff or user.has_perm("annotate.add_project"):
        return True
    return Project.objects.administered_by(user).exists()
