"""A reviewer whose session ends mid-answer, in a real browser: the page says so and keeps the answer, they sign in
again in another tab, and the same key then submits it (the page picks up the rotated CSRF token)."""

from __future__ import annotations

import pytest

from annotate.models import Answer
from tests.e2e.conftest import PASSWORD, sign_in
from tests.e2e.test_review_loop import current_item, predicted_project, press_and_wait_for_next, start_reviewing

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_reviewer_signed_out_elsewhere_keeps_the_answer_and_submits_it_after_signing_in(
        page, artifacts, django_user_model) -> None:
    rita = django_user_model.objects.create_user("rita", password=PASSWORD)
    project = predicted_project("decision", "rank", rita)
    sign_in(page, "rita")
    start_reviewing(page, project)
    item = current_item(page)
    page.keyboard.press("2")

    other = page.context.new_page()  # another tab: signing out there ends this tab's session too
    other.base_url = page.base_url
    other.goto(f"{page.base_url}/")
    other.get_by_role("button", name="Sign out").click()
    other.wait_for_url("**/accounts/login/**")

    page.bring_to_front()
    page.keyboard.press("Enter")
    alert = page.locator("#messages [role=alert]")
    alert.wait_for()
    assert alert.inner_text().startswith("You are signed out: your session ended, or you signed out elsewhere.")
    link = alert.get_by_role("link", name="Sign in")
    assert link.get_attribute("target") == "_blank"
    assert link.get_attribute("href") == f"/accounts/login/?next=%2Fprojects%2F{project.slug}%2Fitems%2F{item}%2F"
    assert current_item(page) == item and page.locator("#workspace input[type=radio]:checked").count() == 1
    page.screenshot(path=artifacts / "0-signed-out.png", full_page=True)
    assert not Answer.objects.exists()

    sign_in(other, "rita")
    page.bring_to_front()
    press_and_wait_for_next(page, "Enter")
    answer = Answer.objects.get(item_id=item, reviewer=rita)
    assert answer.kind == "target"
    page.screenshot(path=artifacts / "1-submitted-after-signing-in.png", full_page=True)
