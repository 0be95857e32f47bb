"""The site on a phone's width (390 px): every page of a project with a team at work fits the screen; a wide table
scrolls in its own box, and the header's links wrap under the site's name."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from annotate import agreement
from annotate.models import Answer, AnswerKind, ItemDeletion, Membership, Project, Role
from tests.annotate.conftest import make_ready_items
from tests.e2e.conftest import PASSWORD, sign_in

pytestmark = pytest.mark.django_db(transaction=True)

PAGES = ("", "projects/outages/", "projects/outages/items/", "projects/outages/progress/",
         "projects/outages/settings/", "projects/outages/agreement/", "projects/outages/disagreements/",
         "jobs/projects/outages/", "projects/outages/delete/", "projects/outages/items/delete/?confidence_max=0.2",
         "projects/new/")


def test_every_page_of_a_busy_project_fits_a_phone(page, artifacts, django_user_model) -> None:
    ada = django_user_model.objects.create_user("ada", password=PASSWORD, is_staff=True)
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
        assert overflow <= 0, f"/{path} is {overflow}px wider than a phone's screen"
