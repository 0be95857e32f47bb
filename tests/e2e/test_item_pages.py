"""Every receipt kind's page in the browser, from hand-made receipts: layout at laptop, tablet and phone widths,
attention highlights, the Scene heat map, the live diff, and the relevance rule enforced before any request."""

from __future__ import annotations

import pytest

from annotate import queue
from annotate.models import Answer, Item, ItemStatus, Membership, ModelVersion, Prediction, Project, Role
from tests.annotate.ui_samples import SAMPLES, TRACE, sample
from tests.e2e.conftest import PASSWORD, sign_in

pytestmark = pytest.mark.django_db(transaction=True)

WIDTHS = {"laptop": 1280, "tablet": 820, "phone": 390}


@pytest.fixture
def reviewer(django_user_model):
    return django_user_model.objects.create_user("rita", password=PASSWORD)


def sample_item(reviewer, tool: str, mode: str) -> tuple[Project, Item]:
    data = sample(tool, mode)
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
