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


def test_an_admin_fixes_a_refused_items_inputs_on_its_page(page, artifacts, project, eager_celery) -> None:
    from annotate import tasks

    stale = Item.objects.create(project=project, inputs=NO_HYPOTHESES)
    tasks.predict_items(project.pk, [stale.pk])
    sign_in(page, "ada")
    page.goto(f"{page.base_url}/projects/outages/items/?status=refused")
    page.locator(".item-table tbody tr a").first.click()
    page.wait_for_url(f"**/items/{stale.pk}/")
    box = page.get_by_label("Fix its inputs")
    assert json.loads(box.input_value()) == NO_HYPOTHESES
    page.screenshot(path=str(artifacts / "refused-item.png"), full_page=True)

    broken = box.input_value().rstrip().rstrip("}")  # a brace lost while editing
    box.fill(broken)
    page.get_by_role("button", name="Save and predict again").click()
    page.locator("#editor-error").get_by_text("Not saved: not valid JSON").wait_for()
    assert box.input_value() == broken  # nothing typed is lost
    assert Item.objects.get(pk=stale.pk).status == ItemStatus.REFUSED
    page.screenshot(path=str(artifacts / "fix-error.png"), full_page=True)

    box.fill(json.dumps({**NO_HYPOTHESES, "hypotheses": decision_input()["hypotheses"]}, indent=2))
    box.press("End")
    box.press("Enter")  # starts a line, as in any editor: it does not submit
    assert box.input_value().endswith("}\n") and Item.objects.get(pk=stale.pk).status == ItemStatus.REFUSED
    box.press("Control+Enter")
    page.get_by_text("Inputs saved: the model predicts this item again.").wait_for()
    assert page.get_by_label("Fix its inputs").count() == 0
    assert Item.objects.get(pk=stale.pk).status == ItemStatus.READY  # the worker (eager here) predicted it
    page.reload()
    assert page.locator(".panel-prediction").get_by_text("Model version").count() == 1
    page.screenshot(path=str(artifacts / "fixed.png"), full_page=True)
