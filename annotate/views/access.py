"""Permission checks every view starts with.

A project a user is not a member of does not exist for them (404), so its slug and items reveal nothing;
a member who lacks the admin role gets 403 on admin pages.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import get_object_or_404
from django.utils import timezone

from annotate import hotpath
from annotate.models import Item, Project


def member_project(request, slug: str) -> Project:
    """The project `slug` if the signed-in user may review in it; 404 otherwise.

    The user's role comes with the project (one query), so the permission checks that follow cost nothing.
    """
    user = request.user
    if not user.is_authenticated:
        raise Http404("No such project.")
    project = hotpath.project_for_member(user, slug)  # one fixed statement: every review action starts here
    if project is None:
        raise Http404("No such project.")
    _require_visible(user, project.viewer_role)
    project.remember_role(user, project.viewer_role)
    return project


def member_item(request, slug: str, pk: int) -> tuple[Project, Item]:
    """`member_project(request, slug)` and `project_item(project, pk)` in one query; 404 as either would give.

    The item comes with `item.viewer_claim_expires`, the viewer's active claim (None without one), read in the
    same statement (`annotate.hotpath`: this is the review loop's hottest read).
    """
    user = request.user
    if not user.is_authenticated:
        raise Http404("No such item.")
    item = hotpath.item_for_page(user, slug, pk, timezone.now())
    if item is None:
        member_project(request, slug)  # "No such project." when that is why (deleted meanwhile, say)
        raise Http404("No such item.")
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


def remember_roles(request, *, administers: bool, can_create: bool | None = None) -> None:
    """Note in the session whether the user administers a project and may create one, for the header's links
    ("Training", "New project"; `tc_administers`, `tc_can_create`).

    Every page draws the header; reading memberships for it would cost each page, the workspace's included, a
    query. The pages that learn the answer anyway (the home page, the jobs overview, creating a project) note
    it instead, and a changed role shows in the header from the user's next visit to the home page. The links
    only lead: each page checks the user's role itself. Written only when it changes: a session saved on every
    request costs an UPDATE each. Administering a project implies creating them (`can_create_projects`).
    """
    noted = {"tc_administers": administers}
    if administers or can_create is not None:
        noted["tc_can_create"] = administers or bool(can_create)
    for key, value in noted.items():
        if request.session.get(key, False) != value:
            request.session[key] = value


def can_create_projects(user) -> bool:
    """Staff and users granted `annotate.add_project`, and anyone who already administers a project."""
    if not user.is_authenticated:
        return False
    if user.is_staff or user.has_perm("annotate.add_project"):
        return True
    return Project.objects.administered_by(user).exists()
