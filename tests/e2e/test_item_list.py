"""The item list and progress pages in a real browser: filters update the table in place and the address, an
impossible filter says why, an empty result says so, and the pager walks every item once with the keyboard."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from annotate.models import Answer, AnswerKind, Item, ItemStatus, Membership, ModelVersion, Prediction, Project, Role
from tests.e2e.conftest import PASSWORD, sign_in

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = 10
TOPICS = ["printer jammed on floor three", "database connection refused", "disk full on alpha",
          "certificate expired overnight", "network switch rebooted"]


@pytest.fixture(autouse=True)
def _fresh_cache():
    """The progress page and its agreement fragment are cached per project id, which tests reuse."""
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def team(django_user_model, monkeypatch):
    monkeypatch.setattr("annotate.itemlist.PAGE_SIZE", PAGE)
    admin = django_user_model.objects.create_user("ada", password=PASSWORD)
    rita = django_user_model.objects.create_user("rita", password=PASSWORD)
    project = Project.objects.create(slug="outages", name="Outages", tool="decision", mode="rank",
                                     configuration={"dim": 8, "buckets": 64}, overlap=1)
    Membership.objects.create(project=project, user=admin, role=Role.ADMIN)
    Membership.objects.create(project=project, user=rita, role=Role.REVIEWER)
    project.current_version = ModelVersion.objects.allocate(project, label="untrained", trained=False)
    project.save(update_fields=["current_version"])
    now = timezone.now()
    items = []
    for n in range(34):
        confidence = None if n % 11 == 10 else round((n * 37 % 100) / 100, 2)
        inputs = {"question": f"Why did service {n} stop? {TOPICS[n % len(TOPICS)]}",
                  "evidence": [{"source_id": "log", "text": "see the ticket"}],
                  "hypotheses": [{"id": "a", "text": "cause a"}, {"id": "b", "text": "cause b"}]}
        item = Item.objects.create(project=project, inputs=inputs, confidence=confidence,
                                   status=ItemStatus.PENDING if confidence is None else ItemStatus.READY)
        if confidence is not None:
            item.prediction = Prediction.objects.create(item=item, model_version=project.current_version,
                                                        receipt={"kind": "ranking", "confidence": confidence},
                                                        confidence=confidence)
            item.save(update_fields=["prediction"])
        items.append(item)
    for n, item in enumerate(items[:12]):
        if item.confidence is None:
            continue
        kind = AnswerKind.SKIP if n % 4 == 3 else AnswerKind.TARGET
        when = now - timedelta(hours=n % 5, minutes=n)
        Answer.objects.create(item=item, reviewer=rita, kind=kind, target="a" if kind == AnswerKind.TARGET else None,
                              skip_reason="unclear" if kind == AnswerKind.SKIP else "",
                              source=project.source_for(item.pk, rita), created_at=when, updated_at=when)
        Item.objects.filter(pk=item.pk).update(
            final_answers=1, status=ItemStatus.SKIPPED if kind == AnswerKind.SKIP else ItemStatus.DONE)
    return project, items


def row_ids(page) -> list[int]:
    return [int(text.lstrip("#")) for text in page.locator("#item-results tbody td:first-child a").all_inner_texts()]


def test_filters_errors_empty_state_and_pages(page, artifacts, team) -> None:
    project, items = team
    sign_in(page, "ada")
    base = f"{page.base_url}/projects/{project.slug}/items/"
    page.goto(f"{page.base_url}/projects/{project.slug}/")
    page.get_by_role("link", name="Items", exact=True).click()
    page.wait_for_url(base)
    assert len(row_ids(page)) == PAGE
    # The list is wider than other pages; the site's header and footer widen with it, lined up with the table.
    text_left = "el => el.getBoundingClientRect().left + parseFloat(getComputedStyle(el).paddingLeft)"
    parts = {"name": ".site-header .brand strong", "title": "main h1", "footer": "#time-zone"}
    left = {part: page.locator(selector).first.evaluate(text_left) for part, selector in parts.items()}
    assert left["name"] == left["title"] == left["footer"], left

    # Search, then narrow by status: the table updates in place and the address follows.
    page.get_by_label("Search inputs").fill("printer")
    page.wait_for_url(re.compile(r"q=printer"))
    printer = [i.pk for i in items if "printer" in i.inputs["question"]]
    assert row_ids(page) == printer
    page.get_by_label("Status").select_option("done")
    page.wait_for_url(re.compile(r"status=done"))
    done = [pk for pk in printer if Item.objects.get(pk=pk).status == ItemStatus.DONE]
    assert row_ids(page) == done and done
    page.get_by_label("Answered by").select_option("rita")
    page.wait_for_url(re.compile(r"reviewer=rita"))
    assert row_ids(page) == done
    page.screenshot(path=str(artifacts / "item-list-filtered.png"), full_page=True)

    # The address is shareable: opening it afresh shows the same rows and the same form.
    shared = page.url
    page.goto(shared)
    assert row_ids(page) == done and page.get_by_label("Search inputs").input_value() == "printer"

    # An impossible range is refused with the reason, in place.
    page.goto(base)
    page.get_by_label("Confidence at least").fill("0.9")
    page.get_by_label("Confidence at most").fill("0.1")
    page.get_by_label("Confidence at most").press("Enter")
    alert = page.get_by_role("alert")
    alert.wait_for()
    assert "0.9, is above the highest, 0.1" in alert.inner_text()
    assert page.locator("#item-results tbody tr").count() == 0
    page.screenshot(path=str(artifacts / "item-list-error.png"), full_page=True)

    # Nothing matches: the page says so and offers to clear the filters.
    page.goto(base)
    page.get_by_label("Search inputs").fill("kangaroo")
    page.wait_for_url(re.compile(r"q=kangaroo"))
    assert page.get_by_text("No items match these filters.").is_visible()
    page.screenshot(path=str(artifacts / "item-list-empty.png"), full_page=True)

    # Least confident first, paged with the keyboard: every item once, items without a prediction last.
    page.goto(base)
    page.get_by_label("Order").select_option(label="least confident first")
    page.wait_for_url(re.compile(r"sort=confidence"))
    page.screenshot(path=str(artifacts / "item-list.png"), full_page=True)
    seen, last_page_start = row_ids(page), 0
    while page.locator("a[rel=next]").count():
        last, last_page_start = seen[-1], len(seen)
        page.locator("body").press("n")
        page.wait_for_url(re.compile(r"after=[^&]*~" + str(last) + r"$"))
        seen += row_ids(page)
    scored = sorted((i for i in items if i.confidence is not None), key=lambda i: (i.confidence, i.pk))
    assert seen == [i.pk for i in scored] + [i.pk for i in items if i.confidence is None]
    page.locator("body").press("p")
    page.wait_for_url(re.compile(r"before="))
    assert row_ids(page) == seen[last_page_start - PAGE:last_page_start]

    # j and k walk the rows of the swapped-in page, o opens the one highlighted.
    for key in "jjjk":
        page.locator("body").press(key)
    current = page.locator("#item-results tbody tr.is-current")
    assert current.count() == 1 and current.get_attribute("aria-current") == "true"
    chosen = seen[last_page_start - PAGE + 1]  # the second row
    assert current.locator("a").first.inner_text() == f"#{chosen}"
    page.screenshot(path=str(artifacts / "item-list-row-keys.png"))
    page.locator("body").press("o")
    page.wait_for_url(f"{page.base_url}/projects/{project.slug}/items/{chosen}/")


def test_progress_page_draws_its_charts(page, artifacts, team) -> None:
    project, _ = team
    sign_in(page, "ada")
    page.goto(f"{page.base_url}/projects/{project.slug}/progress/")

    assert page.locator("svg.status-bar rect").count() >= 3
    assert page.get_by_role("row", name=re.compile("rita")).is_visible()
    page.locator("#agreement").get_by_text("two reviewers").wait_for()  # the lazily loaded agreement fragment
    page.screenshot(path=str(artifacts / "progress.png"), full_page=True)
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0


def test_an_admin_deletes_the_items_a_search_matches(page, artifacts, team, monkeypatch) -> None:
    """Confirmed, the deletion is queued; its page follows the worker (htmx polling) until it is done."""
    from annotate import tasks

    printer = {item.pk for item in Item.objects.all() if "printer" in item.inputs["question"]}
    sent: list[int] = []
    monkeypatch.setattr(tasks.delete_matching_items, "delay_on_commit", sent.append)  # the worker is this test
    sign_in(page, "ada")
    page.goto(f"{page.base_url}/projects/outages/items/?q=printer")
    assert page.locator("#items-count").inner_text().startswith(f"{len(printer)} matching items (filtered).")

    page.get_by_role("link", name="Delete the matching items…").click()
    page.wait_for_url("**/items/delete/?q=printer")
    assert page.get_by_role("heading", level=1).inner_text() == f"Delete {len(printer)} items of Outages"
    assert "Search inputs printer" in page.locator("#delete-filters").inner_text()
    page.screenshot(path=str(artifacts / "confirm.png"), full_page=True)
    page.get_by_role("button", name=re.compile(rf"^Delete {len(printer)} items")).click()

    page.wait_for_url("**/items/deletions/*/")
    assert page.locator("#deletion-count").inner_text() == f"0 of {len(printer)} items deleted"
    assert page.locator("#deletion-state").inner_text() == "Waiting for a worker" and len(sent) == 1
    page.screenshot(path=str(artifacts / "queued.png"), full_page=True)
    assert tasks.delete_matching_items(sent[0]) == "SUCCEEDED"
    page.locator("#deletion-done").wait_for()  # the page polls every second
    assert page.locator("#deletion-count").inner_text() == f"{len(printer)} of {len(printer)} items deleted"
    assert page.locator("#deletion-done").inner_text().startswith(f"Deleted {len(printer)} items")
    page.screenshot(path=str(artifacts / "done.png"), full_page=True)

    page.locator("#deletion-list").click()
    page.wait_for_url("**/items/?q=printer")
    assert page.locator("#items-empty").inner_text().startswith("No items match these filters.")
    assert not Item.objects.filter(pk__in=printer).exists() and Item.objects.count() == 34 - len(printer)
    page.screenshot(path=str(artifacts / "deleted.png"), full_page=True)


def test_an_admin_stops_a_queued_deletion_with_the_keyboard(page, artifacts, team, monkeypatch) -> None:
    """The stop button keeps its focus while the page polls, and Enter stops the deletion: nothing goes."""
    from annotate import deletion, itemlist, tasks

    project, items = team
    monkeypatch.setattr(tasks.delete_matching_items, "delay_on_commit", lambda pk: None)  # no worker yet
    filters = itemlist.ItemFilters.parse(project, {"q": "printer"})
    count = len([item for item in items if "printer" in item.inputs["question"]])
    row = deletion.queue_matching(project, filters, through=items[-1].pk, expected=count,
                                  user=project.memberships.get(role=Role.ADMIN).user)
    sign_in(page, "ada")
    page.goto(f"{page.base_url}/projects/outages/items/deletions/{row.pk}/")
    page.locator("#deletion-stop").focus()
    page.evaluate("window.shown = document.getElementById('deletion-status')")
    page.wait_for_function("document.getElementById('deletion-status') !== window.shown")  # a poll swapped it
    assert page.evaluate("document.activeElement.id") == "deletion-stop"
    page.screenshot(path=str(artifacts / "stoppable.png"), full_page=True)

    page.keyboard.press("Enter")

    reason = page.locator("#deletion-reason")
    reason.wait_for()
    assert reason.inner_text() == "Stopped by ada before any item was deleted."
    assert page.locator("#deletion-state").inner_text() == "Stopped" and page.locator("#deletion-stop").count() == 0
    page.screenshot(path=str(artifacts / "stopped.png"), full_page=True)
    assert tasks.delete_matching_items(row.pk) == "skipped" and Item.objects.count() == 34
