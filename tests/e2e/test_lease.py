"""The claim's lease in a real browser: its last minute is counted down on the item page, its end is said, an
answer given after it is kept as a draft, as the page warned, and submitting that draft again takes the item back
while no other reviewer has it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

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

    lease = page.locator("#lease [data-lease-text]")
    assert lease.inner_text().startswith("lease ends in 0:0")
    page.screenshot(path=artifacts / "0-lease-ending.png")
    page.locator("#lease.lease-ended").wait_for()  # a condition, not a sleep: the page's own clock runs out
    assert lease.inner_text() == "lease ended: an answer now is kept as a draft"
    assert page.locator("#lease").get_attribute("role") == "status"
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


def test_k_takes_back_the_item_of_a_draft_kept_after_its_lease_ended(page, artifacts, django_user_model) -> None:
    """The README's `k` on a draft's page did nothing: its lease line had no Keep."""
    from annotate.models import Claim

    rita = django_user_model.objects.create_user("rita", password=PASSWORD)
    project = predicted_project("decision", "rank", rita)
    sign_in(page, "rita")
    start_reviewing(page, project)
    item = current_item(page)
    Claim.objects.filter(reviewer=rita).update(expires_at=timezone.now() - timedelta(seconds=1))
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    page.locator("#editor-error").get_by_text("submit again, or press k, to take the item back").wait_for()
    shortcuts = page.locator(".shortcuts")
    assert shortcuts.get_by_text("take the item back to finish your draft").is_visible()
    assert not shortcuts.get_by_text("keep this item longer").is_visible()
    page.screenshot(path=artifacts / "3-draft-take-back.png")

    page.keyboard.press("k")

    page.locator("#lease [data-lease-text]").get_by_text("lease until").wait_for()
    assert Claim.objects.get(item_id=item, reviewer=rita).expires_at > timezone.now()
    assert page.locator("#editor-error").inner_text() == ""  # what said the lease had ended is gone
    assert shortcuts.get_by_text("keep this item longer").is_visible()
    assert not shortcuts.get_by_text("take the item back to finish your draft").is_visible()
    press_and_wait_for_next(page, "Enter")
    assert Answer.objects.get(item_id=item, reviewer=rita).kind == AnswerKind.TARGET


def _keep_requests(page) -> list[int]:
    """The statuses of the page's requests to keep its item, as they come back."""
    statuses: list[int] = []
    page.on("response", lambda response: "/keep/" in response.url and statuses.append(response.status))
    return statuses


def test_a_reviewer_still_working_keeps_the_item_and_an_idle_one_is_told(page, artifacts,
                                                                          django_user_model) -> None:
    """The page's clock is Playwright's, moved forward instead of waited for; the server's is real. A key pressed
    in the lease's second half renews it near its end without a word from the reviewer; an idle page renews
    nothing and counts down, and k keeps the item then."""
    from annotate.models import Claim

    rita = django_user_model.objects.create_user("rita", password=PASSWORD)
    project = predicted_project("decision", "rank", rita)
    page.clock.install()
    sign_in(page, "rita")
    start_reviewing(page, project)
    item = current_item(page)
    kept = _keep_requests(page)
    lease = page.locator("#lease")
    assert lease.locator("[data-lease-text]").inner_text().startswith("lease until ")
    first_end = Claim.objects.get(item_id=item, reviewer=rita).expires_at

    page.clock.fast_forward("08:00")  # 2 minutes left: not near its end yet
    page.keyboard.press("1")  # working: a candidate chosen
    first_line = lease.element_handle()
    with page.expect_response(lambda r: "/keep/" in r.url):
        page.clock.fast_forward("01:10")  # 50 s left: the page keeps the item by itself
    # The renewed lease line replaces the old one (which still read "lease until": the page asked before counting
    # down). One tick of the page's clock then starts counting the new lease from now; jumping the clock before
    # that tick would count it from after the jump, or count the old line down instead.
    page.wait_for_function("line => !line.isConnected", arg=first_line)
    page.clock.run_for(1000)
    assert lease.locator("[data-lease-text]").inner_text().startswith("lease until ")
    assert kept == [200]
    second_end = Claim.objects.get(item_id=item, reviewer=rita).expires_at
    assert second_end > first_end
    assert "lease-ending" not in lease.get_attribute("class")
    assert page.locator("input[name=choice]:checked").count() == 1  # the answer being given is untouched

    page.clock.fast_forward("09:30")  # idle since the lease was renewed: nothing is asked
    lease.locator("[data-lease-text]").filter(has_text="lease ends in 0:").wait_for()
    assert kept == [200]
    assert lease.locator("[data-lease-text]").inner_text().endswith(": answer now, or keep it")
    page.screenshot(path=artifacts / "3-idle-lease-ending.png")
    with page.expect_response(lambda r: "/keep/" in r.url):
        page.keyboard.press("k")
    lease.locator("[data-lease-text]").filter(has_text="lease until").wait_for()
    assert kept == [200, 200]
    assert Claim.objects.get(item_id=item, reviewer=rita).expires_at > second_end
    page.screenshot(path=artifacts / "4-kept.png")


def test_an_item_that_can_no_longer_be_kept_says_why_in_place(page, artifacts, django_user_model) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from annotate import queue
    from annotate.models import Claim

    rita = django_user_model.objects.create_user("rita", password=PASSWORD)
    sam = django_user_model.objects.create_user("sam", password=PASSWORD)
    project = predicted_project("decision", "rank", rita, count=1)
    project.memberships.create(user=sam, role="reviewer")
    sign_in(page, "rita")
    start_reviewing(page, project)
    item = current_item(page)
    # Rita's lease ends on the server, and Sam is given the item meanwhile.
    Claim.objects.filter(item_id=item, reviewer=rita).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert queue.claim_next_id(project, sam) == item

    assert page.locator(".shortcuts dt.keep-longer").is_visible()
    page.keyboard.press("k")
    said = page.locator("#lease[role=status]")
    said.get_by_text("Another reviewer took this item after your lease ended").wait_for()
    assert said.inner_text().endswith("an answer you give now is kept as a draft.")
    assert page.locator("#workspace").get_attribute("data-item") == str(item)  # nothing else on the page moved
    assert page.locator("#messages [role=alert]").count() == 0  # said where the lease was, not as an error
    assert not page.locator(".shortcuts dt.keep-longer").is_visible()  # k no longer listed: there is nothing to keep
    page.screenshot(path=artifacts / "5-not-kept.png")
    assert not queue.holds_claim(project.items.get(), rita)


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
