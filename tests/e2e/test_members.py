"""A project with many members in a real browser: the add form comes first, the list scrolls in its own box and
`/` finds a member, so removing one and reaching what follows the list never means scrolling past them all."""

from __future__ import annotations

import pytest

from annotate.models import Membership, Project, Role
from tests.e2e.conftest import PASSWORD, sign_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_admin_finds_and_removes_one_of_many_members(page, artifacts, django_user_model) -> None:
    ada = django_user_model.objects.create_user("ada", password=PASSWORD)
    project = Project.objects.create(slug="outages", name="Outages", tool="decision", mode="rank",
                                     configuration={"dim": 8, "buckets": 64})
    Membership.objects.create(project=project, user=ada, role=Role.ADMIN)
    users = django_user_model.objects.bulk_create(
        [django_user_model(username=f"reviewer{n:03d}") for n in range(120)])
    Membership.objects.bulk_create([Membership(project=project, user=u, role=Role.REVIEWER) for u in users])

    sign_in(page, "ada")
    page.goto(f"{page.base_url}/projects/outages/settings/")
    assert page.locator("#members-title").inner_text() == "Members 121"
    box = page.locator(".scroll-box").bounding_box()
    assert box["height"] < 500  # 121 rows scroll inside the box
    page.locator("#delete-section").scroll_into_view_if_needed()
    page.screenshot(path=artifacts / "0-many-members.png", full_page=True)

    page.locator("body").press("/")
    assert page.evaluate("document.activeElement.id") == "member-filter"
    page.keyboard.type("reviewer07")
    rows = page.locator("#members-table tbody tr:visible")
    assert rows.count() == 10  # reviewer070 to reviewer079
    page.keyboard.type("3")
    assert rows.count() == 1
    page.screenshot(path=artifacts / "1-found.png")
    page.get_by_role("button", name="Remove reviewer073").click()
    page.wait_for_load_state()
    assert "reviewer073" in page.get_by_role("status").first.inner_text()
    assert not Membership.objects.filter(project=project, user__username="reviewer073").exists()
    assert Membership.objects.filter(project=project).count() == 120

    page.locator("#member-filter").fill("nobody")
    page.locator("#member-filter").dispatch_event("input")
    assert page.locator("#member-filter-none").is_visible()
    assert page.locator("#members-table tbody tr:visible").count() == 0
