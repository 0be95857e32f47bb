"""Nothing typed is lost before the server has it (static/drafts.js): the answer editor and the skip box keep what
a reviewer typed in the browser across a reload or a visit elsewhere, until the server takes it or it is
discarded; signing out leaves none of it behind. While the item is theirs, the server keeps it too, for the
reviewer's other browsers."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from annotate.models import Answer, AnswerKind, Claim, Item, Membership
from tests.e2e.conftest import PASSWORD, sign_in
from tests.e2e.test_item_pages import sample_item

pytestmark = pytest.mark.django_db(transaction=True)

KEPT = "Object.keys(localStorage).filter(k => k.startsWith('tc-draft:')).length"


@pytest.fixture
def reviewer(django_user_model):
    return django_user_model.objects.create_user("rita", password=PASSWORD)


def open_item(page, user, tool: str, mode: str) -> tuple[Item, str]:
    """Sign in as `user`, who holds the sample item of `tool`/`mode`, and open its page; (item, its address)."""
    project, item = sample_item(user, tool, mode)
    sign_in(page, "rita")
    url = f"{page.base_url}/projects/{project.slug}/items/{item.pk}/"
    page.goto(url)
    return item, url


def on_a_phone(browser, page, url: str):
    """The reviewer's phone: another browser (its own storage and cookies), signed in as rita, on `url`;
    (its context, its page)."""
    context = browser.new_context(viewport={"width": 390, "height": 900})
    phone = context.new_page()
    phone.base_url = page.base_url
    sign_in(phone, "rita")
    phone.goto(url)
    return context, phone


def test_typed_text_survives_a_reload_and_a_visit_elsewhere_until_it_is_submitted(page, artifacts,
                                                                                 reviewer) -> None:
    item, url = open_item(page, reviewer, "chatbot", "reply")
    page.keyboard.press("t")
    page.keyboard.press("End")
    page.keyboard.type(", up again")

    page.reload()
    expect(page.locator("#target-text")).to_have_value("yes it is, up again")
    expect(page.locator(".draft-restored")).to_contain_text("Restored what you typed here and had not sent yet.")
    assert page.locator("#text-diff ins").inner_text() == ", up again"  # the diff follows the restored text
    page.screenshot(path=str(artifacts / "restored.png"), full_page=True)

    with page.expect_response(lambda r: r.url.endswith(f"/items/{item.pk}/typed/")):  # the server's copy too
        page.get_by_role("button", name="Discard it").click()
    expect(page.locator("#target-text")).to_have_value("yes it is")
    expect(page.locator(".draft-restored")).to_have_count(0)
    page.reload()
    expect(page.locator("#target-text")).to_have_value("yes it is")
    assert page.evaluate(KEPT) == 0

    page.keyboard.press("t")
    page.keyboard.press("End")
    page.keyboard.type(" now")
    page.get_by_role("link", name="Projects").click()
    page.get_by_text("Chatbot reply").wait_for()
    page.goto(url)
    expect(page.locator("#target-text")).to_have_value("yes it is now")
    page.locator("#target-text").focus()
    page.keyboard.press("Enter")  # submits: the server has it, so nothing is kept
    page.get_by_text("Nothing left to review").wait_for()
    assert Answer.objects.get(item=item).target == "yes it is now"
    assert page.evaluate(KEPT) == 0
    page.goto(url)
    expect(page.locator(".draft-restored")).to_have_count(0)


def test_a_chosen_candidate_and_a_skip_reason_come_back_and_signing_out_leaves_none_in_the_browser(
        page, reviewer, django_user_model) -> None:
    item, url = open_item(page, reviewer, "decision", "rank")
    page.keyboard.press("2")
    page.keyboard.press("s")
    page.keyboard.type("needs an expert")

    page.reload()
    expect(page.locator("input[name=choice]").nth(1)).to_be_checked()
    expect(page.locator("#skip-reason")).to_have_value("needs an expert")
    expect(page.locator(".draft-restored")).to_have_count(2)  # one note per form

    page.get_by_role("button", name="Sign out").click()
    assert page.evaluate(KEPT) == 0
    # The next person at this computer sees nothing of it.
    django_user_model.objects.create_user("sam", password=PASSWORD)
    Membership.objects.create(project=item.project, user=django_user_model.objects.get(username="sam"))
    sign_in(page, "sam")
    page.goto(url)
    expect(page.get_by_text("This item is not assigned to you")).to_be_visible()
    assert "needs an expert" not in page.content()
    expect(page.locator(".draft-restored")).to_have_count(0)
    assert page.evaluate(KEPT) == 0
    # The reviewer does, from the server, while the item is theirs.
    page.get_by_role("button", name="Sign out").click()
    sign_in(page, "rita")
    page.goto(url)
    expect(page.locator("input[name=choice]").nth(1)).to_be_checked()
    expect(page.locator("#skip-reason")).to_have_value("needs an expert")
    expect(page.locator(".draft-restored").first).to_contain_text("kept for you while the item is yours")


def test_an_answer_refused_in_place_is_still_kept_and_a_skip_forgets_the_typed_answer(page, reviewer) -> None:
    item, url = open_item(page, reviewer, "decision", "rank")
    page.locator("#share-0").evaluate("el => { el.closest('details').open = true; }")
    page.locator("input[name=split]").check()
    page.locator("#share-0").fill("0")  # no positive share: refused by the server, in the editor's error slot
    with page.expect_response(lambda r: r.url.endswith(f"/items/{item.pk}/typed/")) as sent:
        page.locator("#target-form button[type=submit]").click()
        expect(page.locator("#editor-error")).to_contain_text("Give at least one candidate a positive share.")
    assert page.evaluate(KEPT) == 1  # the server refused it: still kept, and sent to be kept with the claim
    assert sent.value.status == 204
    kept = {f["name"]: f.get("value", f.get("checked")) for f in Claim.objects.get(item=item).typed["answer"]}
    assert (kept["split"], kept["share-0"]) == (True, "0")

    page.reload()
    expect(page.locator("input[name=split]")).to_be_checked()
    expect(page.locator("#share-0")).to_have_value("0")
    page.locator("#skip-reason").fill("unreadable")
    page.locator("#skip-form button[type=submit]").click()
    page.get_by_text("Nothing left to review").wait_for()
    assert Answer.objects.get(item=item).kind == AnswerKind.SKIP
    assert page.evaluate(KEPT) == 0  # the skip took the item: the typed answer goes with it
    assert Item.objects.get(pk=item.pk).status == "skipped"


def test_typing_in_one_browser_comes_back_in_another_and_a_discard_there_reaches_the_first(
        browser, page, artifacts, reviewer) -> None:
    item, url = open_item(page, reviewer, "chatbot", "reply")
    typed = f"/projects/chatbot-reply/items/{item.pk}/typed/"
    with page.expect_response(lambda r: r.url.endswith(typed) and r.request.method == "POST") as sent:
        page.keyboard.press("t")
        page.keyboard.press("End")
        page.keyboard.type(", up again")  # sent a moment after the typing stops
    assert sent.value.status == 204

    other, phone = on_a_phone(browser, page, url)
    try:
        expect(phone.locator("#target-text")).to_have_value("yes it is, up again")
        expect(phone.locator(".draft-restored")).to_contain_text(
            "Restored what you typed and had not sent yet, kept for you while the item is yours.")
        assert phone.locator("#text-diff ins").inner_text() == ", up again"
        phone.screenshot(path=str(artifacts / "restored-on-a-phone.png"), full_page=True)

        with phone.expect_response(lambda r: r.url.endswith(typed)) as discarded:
            phone.get_by_role("button", name="Discard it").click()
        assert discarded.value.status == 204
        expect(phone.locator("#target-text")).to_have_value("yes it is")
    finally:
        other.close()

    # The first browser kept its own copy, older than the discard: the newer one wins, and nothing comes back.
    assert page.evaluate(KEPT) == 1
    page.reload()
    expect(page.locator("#target-text")).to_have_value("yes it is")
    expect(page.locator(".draft-restored")).to_have_count(0)
    assert page.evaluate(KEPT) == 0


def test_after_the_lease_ends_typing_stays_in_the_browser_until_the_item_is_kept_again(page, reviewer) -> None:
    item, url = open_item(page, reviewer, "chatbot", "reply")
    Claim.objects.filter(item=item).update(expires_at=timezone.now() - timedelta(seconds=1))
    typed = f"/items/{item.pk}/typed/"
    with page.expect_response(lambda r: r.url.endswith(typed)) as refused:
        page.keyboard.press("t")
        page.keyboard.press("End")
        page.keyboard.type(", mostly")
    assert refused.value.status == 409
    expect(page.locator("#target-form")).to_have_attribute("data-draft-refused", "")  # nothing more is sent
    assert page.evaluate(KEPT) == 1  # this browser still has it

    page.keyboard.press("Escape")
    with page.expect_response(lambda r: r.url.endswith(f"/items/{item.pk}/keep/")) as kept:
        page.keyboard.press("k")  # the item is free: the lease is taken back
    assert kept.value.status == 200
    expect(page.locator("#target-form")).not_to_have_attribute("data-draft-refused", "")
    with page.expect_response(lambda r: r.url.endswith(typed)) as sent:
        page.locator("#target-text").press("End")
        page.keyboard.type(" up")
    assert sent.value.status == 204
    assert Claim.objects.get(item=item).typed["answer"][0]["value"] == "yes it is, mostly up"


def test_typing_left_in_one_browser_is_dropped_there_once_the_answer_is_given_in_another(browser, page,
                                                                                        reviewer) -> None:
    """The desk's copy was typed before the answer the phone sent: the desk shows the answer, not the old typing."""
    item, url = open_item(page, reviewer, "chatbot", "reply")
    with page.expect_response(lambda r: r.url.endswith(f"/items/{item.pk}/typed/")):
        page.keyboard.press("t")
        page.keyboard.press("End")
        page.keyboard.type(", up again")
    assert page.evaluate(KEPT) == 1

    other, phone = on_a_phone(browser, page, url)
    try:
        expect(phone.locator("#target-text")).to_have_value("yes it is, up again")
        phone.locator("#target-text").press("End")
        phone.keyboard.type(" now")
        phone.keyboard.press("Enter")
        phone.get_by_text("Nothing left to review").wait_for()
    finally:
        other.close()
    assert Answer.objects.get(item=item).target == "yes it is, up again now"

    page.reload()
    expect(page.locator("#target-text")).to_have_value("yes it is, up again now")
    expect(page.locator(".draft-restored")).to_have_count(0)
    assert page.evaluate(KEPT) == 0
