"""Two admins with a project's settings open in two browsers: what each changed is kept, and a setting both changed
is refused with the other admin's value shown, the refused admin's typing still in the form."""

from __future__ import annotations

import pytest

from annotate.models import Membership, Project, Role
from tests.e2e.conftest import PASSWORD, sign_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_admins_save_the_settings_page_at_once(page, browser, live_server, artifacts, django_user_model) -> None:
    project = Project.objects.create(slug="outages", name="Outages", tool="decision", mode="rank",
                                     configuration={"dim": 8, "buckets": 64},
                                     guidelines="Pick the cause.\n\nNot a symptom.")
    for name in ("ada", "bea"):
        user = django_user_model.objects.create_user(name, password=PASSWORD)
        Membership.objects.create(project=project, user=user, role=Role.ADMIN)
    bea_context = browser.new_context(viewport={"width": 1280, "height": 900})
    bea = bea_context.new_page()
    bea.base_url = live_server.url
    url = f"{live_server.url}/projects/outages/settings/"
    sign_in(page, "ada")
    sign_in(bea, "bea")
    page.goto(url)
    bea.goto(url)

    page.get_by_label("Overlap").fill("2")
    page.get_by_role("button", name="Save settings").click()
    page.wait_for_load_state()
    assert "Project settings saved." in page.get_by_role("status").first.inner_text()

    # Bea's page still shows overlap 1; she changes the lease (the guidelines untouched, sent back with CR LF).
    bea.get_by_label("Lease seconds").fill("300")
    bea.get_by_role("button", name="Save settings").click()
    bea.wait_for_load_state()
    assert "Kept what another admin saved meanwhile: the overlap." in bea.get_by_role("status").first.inner_text()
    project.refresh_from_db()
    assert (project.overlap, project.lease_seconds, project.guidelines) == (2, 300, "Pick the cause.\n\nNot a symptom.")

    # Both change the guidelines: the second to save is told, and keeps her text.
    page.goto(url)
    bea.goto(url)
    page.get_by_label("Guidelines").fill("Ada's rules.")
    page.get_by_role("button", name="Save settings").click()
    page.wait_for_load_state()
    bea.get_by_label("Guidelines").fill("Bea's rules.")
    bea.get_by_role("button", name="Save settings").click()
    bea.wait_for_load_state()
    assert "Nothing was saved" in bea.locator("form[action$='/settings/']").inner_text()
    assert "it now holds “Ada's rules.”" in bea.locator("form[action$='/settings/']").inner_text()
    assert bea.get_by_label("Guidelines").input_value() == "Bea's rules."
    bea.screenshot(path=str(artifacts / "conflict.png"), full_page=True)
    project.refresh_from_db()
    assert project.guidelines == "Ada's rules."

    bea.get_by_role("button", name="Save settings").click()
    bea.wait_for_load_state()
    assert "Project settings saved." in bea.get_by_role("status").first.inner_text()
    project.refresh_from_db()
    assert project.guidelines == "Bea's rules."
    bea_context.close()


def _would_ask(page) -> bool:
    """Whether leaving the page now would have the browser ask (the page's beforeunload handler objects)."""
    return page.evaluate("""() => {
        const event = new Event("beforeunload", {cancelable: true});
        window.dispatchEvent(event);
        return event.defaultPrevented;
    }""")


def test_leaving_the_settings_page_with_changes_unsaved_asks_first(page, django_user_model) -> None:
    project = Project.objects.create(slug="outages", name="Outages", tool="decision", mode="rank",
                                     configuration={"dim": 8, "buckets": 64})
    ada = django_user_model.objects.create_user("ada", password=PASSWORD)
    Membership.objects.create(project=project, user=ada, role=Role.ADMIN)
    sign_in(page, "ada")
    page.goto(f"{page.base_url}/projects/outages/settings/")
    assert not _would_ask(page)

    page.get_by_label("Guidelines").press_sequentially("Pick the root cause.")
    assert _would_ask(page)
    page.get_by_role("button", name="Save settings").click()
    page.wait_for_load_state()
    assert "Project settings saved." in page.get_by_role("status").first.inner_text()
    assert not _would_ask(page)

    page.get_by_label("Guidelines").press_sequentially(" Not a symptom.")
    with page.expect_event("dialog") as asked:
        page.close(run_before_unload=True)  # the tab closed with the text unsaved: the browser asks
    assert asked.value.type == "beforeunload"
    asked.value.dismiss()  # stay
    project.refresh_from_db()
    assert project.guidelines == "Pick the root cause."
