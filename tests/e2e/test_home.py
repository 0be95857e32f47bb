"""The projects page of a reviewer in many projects: `/` finds a project by name, tool or mode, Enter opens it."""

from __future__ import annotations

import pytest

from annotate.models import Membership, Project, Role
from tests.e2e.conftest import PASSWORD, sign_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_reviewer_in_many_projects_finds_one_by_typing(page, artifacts, django_user_model) -> None:
    reviewer = django_user_model.objects.create_user("rita", password=PASSWORD)
    for n in range(8):
        tool, mode = ("planner", "outcomes") if n == 5 else ("decision", "rank")
        project = Project.objects.create(slug=f"team-{n}", name=f"Team {n} outages", tool=tool, mode=mode)
        Membership.objects.create(project=project, user=reviewer, role=Role.REVIEWER)
    sign_in(page, "rita")
    page.goto(f"{page.base_url}/")
    cards = page.locator(".project-list > li:visible")
    assert cards.count() == 8

    page.locator("body").press("/")
    assert page.evaluate("document.activeElement.id") == "project-filter"
    page.keyboard.type("planner")
    assert cards.count() == 1 and "Team 5 outages" in cards.first.inner_text()
    page.screenshot(path=str(artifacts / "found.png"), full_page=True)
    page.keyboard.press("Control+a")
    page.keyboard.type("team 3")
    assert cards.count() == 1 and "Team 3 outages" in cards.first.inner_text()
    page.keyboard.type("9")
    assert cards.count() == 0 and page.locator("#project-filter-none").is_visible()
    page.keyboard.press("Enter")  # nothing shown: Enter stays put
    assert page.url == f"{page.base_url}/"

    page.keyboard.press("Backspace")
    page.keyboard.press("Enter")  # opens the one project shown
    page.wait_for_url(f"{page.base_url}/projects/team-3/")
