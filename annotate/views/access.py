"""Permission checks every view starts with.

A project a user is not a member of does not exist for them (404), so its slug and items reveal nothing;
a member who lacks the admin role gets 403 on admin pages.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404

from annotate.models import Item, Project


def member_project(request, slug: str) -> Project:
    """The project `slug` if the signed-in user may review in it; 404 otherwise."""
    return get_object_or_404(Project.objects.for_user(request.user).select_related("current_version"), slug=slug)


def admin_project(request, slug: str) -> Project:
    """The project `slug` if the signed-in user administers it; 404 for non-members, 403 for reviewers."""
    project = member_project(request, slug)
    if not project.is_admin(request.user):
        raise PermissionDenied("Only the project's admins can do this.")
    return project


def project_item(project: Project, pk: int) -> Item:
    """Item `pk` of `project` (404 for another project's item), with its prediction and model version."""
    item = get_object_or_404(
        Item.objects.select_related("prediction", "prediction__model_version"), pk=pk, project=project
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
