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
