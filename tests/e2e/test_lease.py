"""The claim's lease in a real browser: its last minute is counted down on the item page, its end is said, an
answer given after it is kept as a draft, as the page warned, and submitting that draft again takes the item back
while no other reviewer has it."""

from __future__ import annotations

import pytest

from annotate.models import Answer, AnswerKind
from tests.e2e.conftest import PASSWORD, sign_in
from tests.e2e.test_review_loop import current_item, predicted_project, press_and_wait_for_next, start_reviewing

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_lease_is_counted_down_and_an_answer_after_it_is_a_draft(page, artifacts, django_user_model) -> None:
    rita = django_user_model.objects.create_user("rita", password=PASSWORD)
    project = predicted_project("decision", "rank", rita)
    project.lease_seconds = 4
    project.save(update_fields=["lease_seconds"])
    sign_in(page, "rita")
    start_reviewing(page, project)
    item = current_item(page)

    lease = page.locator("#lease")
    assert lease.inner_text().startswith("lease ends in 0:0")
    page.screenshot(path=artifacts / "0-lease-ending.png")
    page.locator("#lease.lease-ended").wait_for()  # a condition, not a sleep: the page's own clock runs out
    assert lease.inner_text() == "lease ended: an answer now is kept as a draft"
    assert lease.get_attribute("role") == "status"
    page.screenshot(path=artifacts / "1-lease-ended.png")

    page.keyboard.press("1")
    page.keyboard.press("Enter")
    error = page.locator("#editor-error")
    error.get_by_text("so your answer was not submitted. It is kept as a draft").wait_for()
    page.screenshot(path=artifacts / "2-kept-as-draft.png")
    answer = Answer.objects.get(item_id=item, reviewer=rita)
    assert answer.kind == AnswerKind.DRAFT

    # Nobody else took the item: Enter again takes it back and submits the draft, and the next item comes.
    press_and_wait_for_next(page, "Enter")
    answer.refresh_from_db()
    assert answer.kind == AnswerKind.TARGET


def test_times_read_in_the_reviewers_own_time_zone(browser, live_server, artifacts, django_user_model) -> None:
    """The browser in Kolkata (UTC+05:30) names its zone on the sign-in page; from then on the lease's end, the
    progress line's day and the footer are in Kolkata time."""
    from zoneinfo import ZoneInfo

    from annotate.models import Claim

    rita = django_user_model.objects.create_user("rita", password=PASSWORD)
    project = predicted_project("decision", "rank", rita)
    context = browser.new_context(viewport={"width": 1280, "height": 900}, timezone_id="Asia/Kolkata")
    context.set_default_timeout(15_000)
    try:
        page = context.new_page()
        page.base_url = live_server.url
        sign_in(page, "rita")
        [named] = [c["value"] for c in context.cookies() if c["name"] == "tc_tz"]
        assert named in ("Asia/Kolkata", "Asia/Calcutta")  # Chromium's ICU says the zone's older name
        start_reviewing(page, project)

        expires = Claim.objects.get(item_id=current_item(page), reviewer=rita).expires_at
        assert page.locator("#lease time").inner_text() == f"{expires.astimezone(ZoneInfo('Asia/Kolkata')):%H:%M}"
        assert page.locator("#time-zone").inner_text() == f"Times are shown in {named}. Change"
        page.locator(f"#my-progress[title*='Today started at 00:00 {named}']").wait_for()
        page.screenshot(path=artifacts / "kolkata.png", full_page=True)
    finally:
        context.close()
