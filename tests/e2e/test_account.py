"""Your account in a real browser: the name in the header opens it; a time zone chosen there holds on another
browser from its first page."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import PASSWORD, sign_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_reviewer_chooses_the_time_zone_of_every_browser_they_use(page, browser, artifacts,
                                                                   django_user_model) -> None:
    django_user_model.objects.create_user("rita", password=PASSWORD)
    sign_in(page, "rita")
    page.get_by_role("link", name="rita").click()
    page.get_by_role("heading", name="Your account").wait_for()
    page.get_by_label("Show times in").select_option("Asia/Tokyo")
    page.get_by_role("button", name="Save time zone").click()
    page.get_by_text("Times are now shown in Asia/Tokyo on every browser you use.").wait_for()
    assert page.locator("#time-zone").inner_text().startswith("Times are shown in Asia/Tokyo, as your account sets.")
    page.screenshot(path=artifacts / "account.png", full_page=True)

    elsewhere = browser.new_context(viewport={"width": 1280, "height": 900}, timezone_id="America/New_York")
    try:
        other = elsewhere.new_page()
        other.base_url = page.base_url
        sign_in(other, "rita")
        assert other.locator("#time-zone").inner_text().startswith("Times are shown in Asia/Tokyo")
    finally:
        elsewhere.close()
