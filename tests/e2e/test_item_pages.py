"""Every receipt kind's page in the browser, from hand-made receipts: layout at laptop, tablet and phone widths,
attention highlights, the Scene heat map, the live diff, and the relevance rule enforced before any request."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from annotate import queue
from annotate.models import Answer, Item, ItemStatus, Membership, ModelVersion, Prediction, Project, Role
from tests.annotate.ui_samples import SAMPLES, TRACE, sample
from tests.e2e.conftest import PASSWORD, sign_in

pytestmark = pytest.mark.django_db(transaction=True)

WIDTHS = {"laptop": 1280, "tablet": 820, "phone": 390}


@pytest.fixture
def reviewer(django_user_model):
    return django_user_model.objects.create_user("rita", password=PASSWORD)


def sample_item(reviewer, tool: str, mode: str, data: dict | None = None) -> tuple[Project, Item]:
    data = data or sample(tool, mode)
    project = Project.objects.create(slug=f"{tool}-{mode}", name=f"{tool.capitalize()} {mode}", tool=tool,
                                     mode=mode, guidelines="Prefer the answer the evidence supports.")
    Membership.objects.create(project=project, user=reviewer, role=Role.REVIEWER)
    project.current_version = ModelVersion.objects.allocate(project, label="untrained", trained=False)
    project.save(update_fields=["current_version"])
    item = Item.objects.create(project=project, inputs=data["inputs"], status=ItemStatus.READY,
                               confidence=data["receipt"]["confidence"])
    item.prediction = Prediction.objects.create(item=item, model_version=project.current_version,
                                                receipt=data["receipt"], trace=TRACE,
                                                confidence=data["receipt"]["confidence"])
    item.save(update_fields=["prediction"])
    queue.claim_next(project, reviewer)
    return project, item


@pytest.mark.parametrize(("tool", "mode"), sorted(SAMPLES))
def test_item_page_fits_laptop_tablet_and_phone(page, artifacts, reviewer, tool, mode) -> None:
    project, item = sample_item(reviewer, tool, mode)
    sign_in(page, "rita")
    for name, width in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": 1000})
        page.goto(f"{page.base_url}/projects/{project.slug}/items/{item.pk}/")
        page.screenshot(path=str(artifacts / f"{tool}-{mode}-{name}.png"), full_page=True)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{name}: the page is {overflow}px wider than the window"
        # A candidate keeps room for its words: squeezed, it broke "the database" into a letter column.
        narrowest = page.evaluate("Math.min(...[...document.querySelectorAll('.ranked-text')]"
                                  ".map(e => e.getBoundingClientRect().width), Infinity)")
        assert narrowest >= 120, f"{name}: a candidate's text is only {narrowest:.0f}px wide"
    assert page.locator("#target-form").is_visible()
    assert page.get_by_text("Keyboard shortcuts").is_visible()


def test_attention_highlights_and_heat_map_are_drawn(page, reviewer) -> None:
    project, item = sample_item(reviewer, "scene", "rank")
    sign_in(page, "rita")
    page.goto(f"{page.base_url}/projects/{project.slug}/items/{item.pk}/")

    assert page.locator(".heat span").count() == 4
    assert page.locator("img.scene-image").evaluate("img => img.naturalWidth") == 8
    page.get_by_label("heat map").uncheck()
    assert page.locator(".heat").is_hidden()


def test_relevance_needs_one_document_per_query_before_submitting(page, reviewer) -> None:
    project, item = sample_item(reviewer, "investigator", "retrieval")
    sign_in(page, "rita")
    page.goto(f"{page.base_url}/projects/{project.slug}/items/{item.pk}/")
    first_query = page.locator("fieldset.relevance").first
    for box in first_query.locator("input:checked").all():
        box.uncheck()

    page.keyboard.press("Enter")

    assert first_query.get_by_text("Mark at least one relevant document").is_visible()
    assert not Answer.objects.exists()


def test_text_editor_shows_live_diff(page, reviewer) -> None:
    project, item = sample_item(reviewer, "chatbot", "reply")
    sign_in(page, "rita")
    page.goto(f"{page.base_url}/projects/{project.slug}/items/{item.pk}/")

    page.keyboard.press("t")
    page.keyboard.press("End")
    page.keyboard.type(", up again")

    assert page.locator("#text-diff ins").inner_text() == ", up again"
    assert page.locator("#target-text").input_value() == "yes it is, up again"


def test_a_candidate_picked_after_a_split_is_the_answer_instead(page, reviewer) -> None:
    """`d`, a share, then a number key showed the pick and the ticked split together; the split was sent."""
    project, item = sample_item(reviewer, "decision", "rank")
    sign_in(page, "rita")
    page.goto(f"{page.base_url}/projects/{project.slug}/items/{item.pk}/")

    page.keyboard.press("d")
    page.keyboard.type("1")  # `d` moves the focus to the first share
    page.keyboard.press("Escape")
    page.keyboard.press("2")

    expect(page.locator("input[name=split]")).not_to_be_checked()
    page.keyboard.press("Enter")
    expect(page.locator("#messages")).to_contain_text("Submitted")
    assert Answer.objects.get().target == "dns"
    page.keyboard.press("b")
    expect(page.locator("input[name=choice][value=dns]")).to_be_checked()
    expect(page.locator("input[name=split]")).not_to_be_checked()


# -- options past the ninth: keys of two digits ----------------------------------------------------------------
def _twelve(tool: str, mode: str) -> dict:
    """The sample with 12 candidates (plans, documents): the keys run 1 to 12."""
    data = sample(tool, mode)
    if mode == "retrieval":
        data["inputs"]["documents"] = [f"document {n}" for n in range(1, 13)]
        return data
    field = "plans" if mode == "outcomes" else "hypotheses"
    data["inputs"][field] = [{"id": f"h{n}", "text": f"option {n}"} for n in range(1, 13)]
    data["receipt"]["candidates"] = [{"id": f"h{n}", "text": f"option {n}", "score": 1.0, "probability": 1 / 12,
                                      "outcome": 1.0} for n in range(1, 13)]
    data["receipt"]["selected_id"], data["receipt"]["selected_index"] = "h1", 0
    return data


def _dispatch_key(page, key: str) -> dict:
    """Press `key` in the page and say, before anything else runs, which option is marked as waiting for a
    second digit and which is chosen (a timer cannot fire between the two)."""
    return page.evaluate("""key => {
        document.body.dispatchEvent(new KeyboardEvent("keydown", {key: key, bubbles: true, cancelable: true}));
        const pending = document.querySelector(".key-pending input");
        const chosen = document.querySelector("#target-form input[type=radio]:checked");
        return {pending: pending && pending.value, chosen: chosen && chosen.value};
    }""", key)


def test_options_past_nine_are_chosen_by_typing_both_digits(page, artifacts, reviewer) -> None:
    project, item = sample_item(reviewer, "decision", "rank", _twelve("decision", "rank"))
    sign_in(page, "rita")
    page.goto(f"{page.base_url}/projects/{project.slug}/items/{item.pk}/")
    shortcuts = page.locator(".shortcuts")
    expect(shortcuts).to_contain_text("choose a candidate (10 and up: type both digits)")
    assert shortcuts.locator("kbd").nth(1).inner_text() == "12"

    page.keyboard.press("1")
    page.keyboard.press("2")
    expect(page.locator("input[name=choice][value=h12]")).to_be_checked()
    # A digit no longer key begins with chooses at once; one that begins 10-12 waits for the next digit.
    assert _dispatch_key(page, "3") == {"pending": None, "chosen": "h3"}
    assert _dispatch_key(page, "1") == {"pending": "h1", "chosen": "h3"}
    expect(page.locator("input[name=choice][value=h1]")).to_be_checked()  # nothing followed: 1 it is
    page.screenshot(path=str(artifacts / "twelve-candidates.png"), full_page=True)
    # Escape drops a waiting digit: the next digit starts afresh.
    assert _dispatch_key(page, "1")["pending"] == "h1"
    page.keyboard.press("Escape")
    assert _dispatch_key(page, "2") == {"pending": None, "chosen": "h2"}

    # "1" then Enter: the first candidate, submitted without waiting out the pause.
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    page.wait_for_function("n => document.getElementById('workspace').dataset.item !== n", arg=str(item.pk))
    assert Answer.objects.get(item=item).target == "h1"


def test_documents_past_nine_are_toggled_by_both_digits_in_the_query_worked_on(page, reviewer) -> None:
    project, item = sample_item(reviewer, "investigator", "retrieval", _twelve("investigator", "retrieval"))
    sign_in(page, "rita")
    page.goto(f"{page.base_url}/projects/{project.slug}/items/{item.pk}/")
    expect(page.locator(".relevance + p")).to_contain_text("1–12 toggle the documents of the query you are in "
                                                           "(10 and up: type both digits)")

    page.keyboard.press("q")  # into the first query
    page.keyboard.press("q")  # on to the second
    page.keyboard.press("1")
    page.keyboard.press("1")

    second = page.locator("fieldset.relevance").nth(1)
    expect(second.locator("input[value='1:10']")).to_be_checked()  # document 11
    assert not second.locator("input[value='1:0']").is_checked()  # not document 1
    assert not page.locator("input[value='0:10']").is_checked()  # nor the first query's 11th


def test_a_plan_then_its_outcome_typed_straight_after_among_twelve_plans(page, reviewer) -> None:
    project, item = sample_item(reviewer, "planner", "outcomes", _twelve("planner", "outcomes"))
    sign_in(page, "rita")
    page.goto(f"{page.base_url}/projects/{project.slug}/items/{item.pk}/")

    page.keyboard.press("1")
    page.keyboard.press("7")
    # No plan 17: "1" was the plan, and the 7 its outcome, typed where the pick moved the focus.
    expect(page.locator("input[name=plan][value=h1]")).to_be_checked()
    expect(page.locator("#outcome-value")).to_have_value("7")

    page.keyboard.press("Escape")
    page.keyboard.press("1")
    page.keyboard.press("0")
    expect(page.locator("input[name=plan][value=h10]")).to_be_checked()
    expect(page.locator("#outcome-value")).to_be_focused()
