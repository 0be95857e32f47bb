"""The site on a phone's width (390 px): every page of a project with a team at work fits the screen; a wide table
scrolls in its own box, a member's row (and a new account's link) stacks so its buttons stay on the screen, and
the header's links wrap under the site's name."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from annotate import agreement
from annotate.models import Answer, AnswerKind, ItemDeletion, Membership, Project, Role
from tests.annotate.conftest import make_ready_items
from tests.e2e.conftest import PASSWORD, sign_in

pytestmark = pytest.mark.django_db(transaction=True)

PAGES = ("", "projects/outages/", "projects/outages/items/", "projects/outages/progress/",
         "projects/outages/settings/", "projects/outages/agreement/", "projects/outages/disagreements/",
         "jobs/projects/outages/", "projects/outages/delete/", "projects/outages/items/delete/?confidence_max=0.2",
         "projects/new/", "accounts/password_change/")

# What sticks out on the right, to say in a failure which element it is.
WIDER_THAN_THE_SCREEN = """Array.from(document.querySelectorAll("body *"))
    .filter(e => e.getBoundingClientRect().right > window.innerWidth).slice(0, 8)
    .map(e => e.tagName + "#" + e.id + "." + e.className + " " + Math.round(e.getBoundingClientRect().right))"""


def buttons_right(page, selector: str) -> list[float]:
    return page.locator(selector).evaluate_all("all => all.map(b => b.getBoundingClientRect().right)")


def test_every_page_of_a_busy_project_fits_a_phone(page, artifacts, django_user_model) -> None:
    ada = django_user_model.objects.create_user("ada", password=PASSWORD, is_staff=True)
    ada.user_permissions.add(*Permission.objects.filter(content_type__app_label="auth",
                                                        codename__in=["add_user", "change_user"]))
    project = Project.objects.create(slug="outages", name="Outages", tool="decision", mode="rank",
                                     configuration={"dim": 8, "buckets": 64}, overlap=2)
    Membership.objects.create(project=project, user=ada, role=Role.ADMIN)
    items = make_ready_items(project, [0.1, 0.2, 0.3])
    now = timezone.now()
    for name, target in (("reviewer-with-a-long-name", "db"), ("sam", "dns")):
        user = django_user_model.objects.create_user(name)
        Membership.objects.create(project=project, user=user, role=Role.REVIEWER)
        Answer.objects.bulk_create(Answer(item=item, project=project, reviewer=user, kind=AnswerKind.TARGET,
                                          target=target, source=project.source_for(item.pk, user),
                                          created_at=now, updated_at=now) for item in items)
    for item in items:  # they disagree on every item: the disagreement list and an adjudication page have rows
        item.disagreement = agreement.item_disagreement(item)
        item.save(update_fields=["disagreement"])

    under_way = ItemDeletion.objects.create(project=project, requested_by=ada, filters={"confidence_max": "0.2"},
                                            item_ids=[items[0].pk, items[1].pk], total=2)  # no worker: it waits

    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, "ada")
    for n, path in enumerate((*PAGES, f"projects/outages/items/{items[0].pk}/",
                              f"projects/outages/items/{items[0].pk}/adjudicate/",
                              f"projects/outages/items/deletions/{under_way.pk}/")):
        page.goto(f"{page.base_url}/{path}")
        page.wait_for_load_state("networkidle")
        name = re.sub(r"[/?=]", "-", path.strip("/")) or "home"
        page.screenshot(path=str(artifacts / f"{n}-{name}.png"), full_page=True)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, (f"/{path} is {overflow}px wider than a phone's screen: "
                               f"{page.evaluate(WIDER_THAN_THE_SCREEN)}")

    # The item list's and the disagreement list's inputs keep a readable width: the table scrolls in its box
    # rather than breaking the inputs a word (or a few letters) a line.
    for path, cell in (("items/", ".item-table td.preview"), ("disagreements/", ".disagreements td:nth-child(2)")):
        page.goto(f"{page.base_url}/projects/outages/{path}")
        widths = page.locator(cell).evaluate_all("all => all.map(c => c.getBoundingClientRect().width)")
        assert widths and min(widths) >= 150, f"/{path}: the inputs column is {widths} px wide on a phone"

    # A team's accounts made at once: their set-password links fit too.
    page.goto(f"{page.base_url}/projects/outages/settings/")
    # Each member's row stacks: their buttons are on the screen, not past the right edge of the list's box.
    assert 0 < max(buttons_right(page, "#members-table button")) <= 390
    page.get_by_label("Usernames").fill(" ".join(f"annotator{n:02d}" for n in range(20)))
    page.get_by_label("Create accounts for names that have none").check()
    page.get_by_role("button", name="Add or update members").click()
    page.get_by_role("heading", name="New accounts").wait_for()
    page.screenshot(path=str(artifacts / "links.png"), full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0, page.evaluate(
        WIDER_THAN_THE_SCREEN)
    assert 0 < max(buttons_right(page, "#member-links button")) <= 390  # each link's Copy
