"""Items the model refused, in the browser: an admin imports a file whose inputs the model refuses, sees why on
the project page and in the item list, downloads their inputs, and removes them after confirming."""

from __future__ import annotations

import json
import threading

import pytest

from annotate.models import Item, ItemStatus, Membership, ModelVersion, Project, Role
from tests.annotate.conftest import decision_input
from tests.e2e.conftest import PASSWORD, sign_in

pytestmark = pytest.mark.django_db(transaction=True)

NO_HYPOTHESES = {"question": "Why did the cache stop?", "evidence": [{"source_id": "log", "text": "evicted"}]}


@pytest.fixture
def project(django_user_model) -> Project:
    admin = django_user_model.objects.create_user("ada", password=PASSWORD)
    project = Project.objects.create(slug="outages", name="Outages", tool="decision", mode="rank",
                                     configuration={"dim": 8, "buckets": 64})
    Membership.objects.create(project=project, user=admin, role=Role.ADMIN)
    project.current_version = ModelVersion.objects.allocate(project, label="untrained", trained=False)
    project.save(update_fields=["current_version"])
    return project


def test_an_admin_sees_why_items_were_refused_downloads_them_and_removes_them(page, artifacts, project,
                                                                              eager_celery, monkeypatch) -> None:
    from annotate import tasks
    from annotate.models import ItemQuerySet

    removing, go_on = threading.Event(), threading.Event()
    remove = ItemQuerySet.remove_refused

    def remove_when_told(self, *args, **kwargs):  # the live server's thread: holds the request while we look
        removing.set()
        go_on.wait(timeout=60)
        return remove(self, *args, **kwargs)

    monkeypatch.setattr(ItemQuerySet, "remove_refused", remove_when_told)

    # Stored before the tool needed hypotheses, say: the import would refuse them now, the model refuses them.
    stale = [Item.objects.create(project=project, inputs=NO_HYPOTHESES) for _ in range(2)]
    good = Item.objects.create(project=project, inputs=decision_input(1))
    tasks.predict_items(project.pk, [item.pk for item in [*stale, good]])
    sign_in(page, "ada")

    page.goto(f"{page.base_url}/projects/outages/")
    notice = page.locator(".refused-items")
    assert "The model refused the inputs of 2 items" in notice.inner_text()
    assert "inputs: missing 'hypotheses'" in notice.inner_text()
    page.screenshot(path=str(artifacts / "project.png"), full_page=True)

    notice.get_by_role("link", name="See them in the item list").click()
    page.wait_for_url("**/items/?status=refused")
    assert page.locator(".item-table tbody tr").count() == 2
    assert page.locator(".item-table .refusal").first.inner_text().endswith("inputs: missing 'hypotheses'")
    page.screenshot(path=str(artifacts / "item-list.png"), full_page=True)

    page.go_back()
    with page.expect_download() as download:
        page.get_by_role("link", name="download their inputs").click()
    lines = download.value.path().read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"inputs": NO_HYPOTHESES}] * 2

    busy = page.locator(".refused-items .busy")
    page.once("dialog", lambda dialog: dialog.dismiss())  # changed their mind: nothing goes
    page.get_by_role("button", name="remove them").click()
    assert Item.objects.filter(status=ItemStatus.REFUSED).count() == 2
    assert not removing.is_set() and busy.is_hidden()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="remove them").click()
    assert removing.wait(timeout=30)
    busy.wait_for(state="visible")  # while it runs, the page says so and the button cannot be clicked again
    assert busy.inner_text() == "(removing 2 items…)"
    assert page.get_by_role("button", name="remove them").is_disabled()
    page.screenshot(path=str(artifacts / "removing.png"), full_page=True)
    go_on.set()
    page.get_by_text("Removed 2 refused items.").wait_for()
    assert list(Item.objects.values_list("pk", flat=True)) == [good.pk]
    assert page.locator(".refused-items").count() == 0
    page.screenshot(path=str(artifacts / "removed.png"), full_page=True)
