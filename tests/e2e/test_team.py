"""A team in real browsers: two reviewers label the same items under overlap 2 (a third gets nothing), the admin
reads the agreement page, adjudicates the disputed item with the keyboard, and the export carries the
adjudicated target instead of the reviewers' answers.

Each user has their own browser context (own cookies), as people at their own desks would. Screenshots of every
page, empty states included, go to the `artifacts` folder.
"""

from __future__ import annotations

import json
import re
import zipfile

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from annotate import queue, tasks
from annotate.models import (
    Adjudication,
    AdminTyping,
    Answer,
    AnswerKind,
    Item,
    ItemStatus,
    Membership,
    ModelVersion,
    Project,
    Role,
)
from tests.annotate.conftest import decision_input
from tests.e2e.conftest import PASSWORD, HeldRequests, sign_in

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def team():
    """A Decision project with overlap 2, an admin (ada), three reviewers and two predicted items."""
    users = get_user_model().objects
    people = {name: users.create_user(name, password=PASSWORD) for name in ("ada", "rita", "sam", "tom")}
    project = Project.objects.create(slug="outages", name="Outages", tool="decision", mode="rank", overlap=2,
                                     configuration={"dim": 8, "buckets": 64}, guidelines="Pick the cause.")
    for name, user in people.items():
        Membership.objects.create(project=project, user=user, role=Role.ADMIN if name == "ada" else Role.REVIEWER)
    project.current_version = ModelVersion.objects.allocate(project, label="untrained", trained=False)
    project.save(update_fields=["current_version"])
    items = [Item.objects.create(project=project, inputs=decision_input(n)) for n in range(2)]
    tasks.predict_items(project.pk, [item.pk for item in items])
    assert Item.objects.filter(project=project, status=ItemStatus.READY).count() == 2
    return project


@pytest.fixture
def open_page(browser, live_server):
    """`open_page(username)`: a signed-in page in its own browser context."""
    contexts, errors = [], []

    def open_page(username: str):
        context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
        context.set_default_timeout(15_000)
        contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(f"{username}: {exc}"))
        page.base_url = live_server.url
        sign_in(page, username, PASSWORD)
        return page

    yield open_page
    for context in contexts:
        context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def item_on(page) -> str:
    return page.locator("#workspace").get_attribute("data-item")


def start_reviewing(page, project: Project) -> None:
    page.goto(f"{page.base_url}/projects/{project.slug}/")
    page.get_by_role("button", name="Start reviewing").click()
    page.wait_for_selector("#workspace")


def label(page, key: str) -> None:
    """Choose candidate `key` and submit with Enter; wait until another item (or the end) is shown."""
    before = item_on(page)
    page.keyboard.press(key)
    page.keyboard.press("Enter")
    page.wait_for_function(
        "n => { const w = document.getElementById('workspace'); return !w.dataset.item || w.dataset.item !== n; }",
        arg=before,
    )


def test_two_reviewers_disagree_and_the_admin_adjudicates_with_the_keyboard(team, open_page, artifacts,
                                                                            eager_celery, tmp_path) -> None:
    project = team
    admin = open_page("ada")

    # Before anyone labels: both pages say what is missing instead of showing empty tables.
    admin.goto(f"{admin.base_url}/projects/{project.slug}/")
    admin.get_by_role("link", name="Agreement", exact=True).click()
    admin.locator("#agreement-empty").wait_for()
    admin.screenshot(path=str(artifacts / "agreement-empty.png"), full_page=True)
    admin.goto(f"{admin.base_url}/projects/{project.slug}/disagreements/")
    assert "No disagreements yet." in admin.locator("#disagreements-empty").inner_text()
    admin.screenshot(path=str(artifacts / "disagreements-empty.png"), full_page=True)

    # Overlap 2: rita and sam get the same first item; each gets every item once.
    rita, sam = open_page("rita"), open_page("sam")
    start_reviewing(rita, project)
    start_reviewing(sam, project)
    first = item_on(rita)
    assert item_on(sam) == first
    label(rita, "1")  # rita: the first candidate ("db")
    second = item_on(rita)
    assert second != first  # not the same item twice
    label(sam, "2")  # sam: the second candidate ("dns"): a disagreement
    assert item_on(sam) == second
    label(rita, "1")
    label(sam, "1")  # they agree on the second item
    for page in (rita, sam):
        page.get_by_text("Nothing left to review").wait_for()
    sam.screenshot(path=str(artifacts / "reviewer-queue-empty.png"), full_page=True)

    # A third reviewer gets nothing: both items already have their two answers.
    tom = open_page("tom")
    tom.goto(f"{tom.base_url}/projects/{project.slug}/")
    tom.get_by_text("Every item is finished.").wait_for()  # said on the page, not behind an empty queue
    assert tom.get_by_role("button", name="Start reviewing").count() == 0
    assert not Answer.objects.filter(reviewer__username="tom").exists()
    assert Item.objects.get(pk=first).disagreement and not Item.objects.get(pk=second).disagreement

    # The agreement page shows the figures.
    admin.goto(f"{admin.base_url}/projects/{project.slug}/")
    admin.get_by_role("link", name=re.compile("Disagreements")).get_by_text("1 open").wait_for()
    admin.get_by_role("link", name="Agreement", exact=True).click()
    assert admin.locator("#percent-agreement").inner_text() == "50%"
    assert admin.locator("#fleiss-kappa").inner_text() == "-0.33"
    assert "rita · sam" in admin.locator("#pair-table").inner_text()
    assert admin.locator("svg.pair-chart rect.fill").count() == 1
    admin.screenshot(path=str(artifacts / "agreement.png"), full_page=True)

    # The disagreement list links the disputed item; the admin opens it and picks sam's target with key 2.
    admin.get_by_role("button", name="Items where reviewers disagree").click()
    admin.get_by_role("link", name=f"Item {first}").click()
    admin.wait_for_selector(f"#workspace[data-item='{first}']")
    admin.screenshot(path=str(artifacts / "adjudication.png"), full_page=True)
    # A note typed in "write it yourself" survives a reload (static/drafts.js); picking a target forgets it.
    admin.keyboard.press("w")
    admin.locator("#adjudicate-note").fill("both read the log")
    admin.reload()
    expect(admin.locator("#adjudicate-note")).to_have_value("both read the log")
    expect(admin.locator(".draft-restored")).to_be_visible()
    admin.screenshot(path=str(artifacts / "adjudication-restored.png"), full_page=True)
    admin.keyboard.press("2")
    admin.locator("#adjudicated-badge").wait_for()
    assert admin.evaluate("Object.keys(localStorage).filter(k => k.startsWith('tc-draft:')).length") == 0
    assert "adjudicated: picked sam's answer" in admin.locator("#messages").inner_text()
    admin.screenshot(path=str(artifacts / "adjudicated.png"), full_page=True)
    adjudication = Adjudication.objects.get(item_id=first)
    assert (adjudication.target, adjudication.source) == ("dns", f"adjudication:outages/{first}/ada")

    # Changing one's mind is one key away and keeps the history: w opens the editor, 1 chooses, Enter stores.
    admin.keyboard.press("w")
    admin.keyboard.press("1")
    admin.keyboard.press("Enter")
    admin.get_by_text("adjudicated again (wrote the target)").wait_for()
    adjudication.refresh_from_db()
    assert (adjudication.target, adjudication.revisions.count()) == ("db", 2)
    admin.get_by_role("link", name="Disagreements", exact=True).click()
    admin.locator("#disagreements-empty").wait_for()
    admin.screenshot(path=str(artifacts / "disagreements-none-open.png"), full_page=True)
    admin.get_by_role("link", name="All, adjudicated too").click()
    admin.get_by_text("Written by ada").wait_for()
    admin.screenshot(path=str(artifacts / "disagreements-all.png"), full_page=True)

    # The export carries the adjudicated target for the disputed item, the reviewers' answers for the other.
    admin.goto(f"{admin.base_url}/projects/{project.slug}/")
    admin.get_by_role("button", name="Export", exact=True).click()
    link = admin.get_by_role("link", name=re.compile(r"Download export \d+"))
    link.wait_for()
    with admin.expect_download() as download_info:
        link.click()
    archive = tmp_path / "export.zip"
    download_info.value.save_as(archive)
    with zipfile.ZipFile(archive) as zipped:
        (name,) = [n for n in zipped.namelist() if n.endswith("answers.jsonl")]
        lines = [json.loads(line) for line in zipped.read(name).decode().splitlines()]
    assert sorted((line["item"], line["target"], line["source"]) for line in lines) == sorted([
        (int(second), "db", f"review:outages/{second}/rita"),
        (int(second), "db", f"review:outages/{second}/sam"),
        (int(first), "db", f"adjudication:outages/{first}/ada"),
    ])
    assert Answer.objects.filter(item_id=first, kind=AnswerKind.TARGET).count() == 2  # nothing of theirs is lost


def test_the_admin_sees_how_a_reviewer_changed_their_answer(team, open_page, artifacts) -> None:
    """rita answers "db", goes back and answers "dns"; on the item page ada unfolds both states, oldest first."""
    project = team
    rita = open_page("rita")
    start_reviewing(rita, project)
    first = item_on(rita)
    label(rita, "1")
    rita.keyboard.press("b")
    rita.wait_for_selector(f"#workspace[data-item='{first}']")
    rita.keyboard.press("2")
    rita.keyboard.press("Enter")
    rita.get_by_text("Your answer was updated; the earlier one is kept in its history.").wait_for()

    admin = open_page("ada")
    admin.goto(f"{admin.base_url}/projects/{project.slug}/items/{first}/")
    history = admin.locator(".panel-answers details.answer-history")
    expect(history.locator("ol")).not_to_be_visible()  # folded until asked for
    history.get_by_text("Changed 1 time").click()
    states = history.locator("li")
    expect(states).to_have_count(2)
    expect(states.nth(0)).to_contain_text("Target · The database was unreachable. (db)")
    expect(states.nth(1)).to_contain_text("Target · A DNS record expired. (dns) · edited (now)")
    admin.screenshot(path=str(artifacts / "answer-history.png"), full_page=True)


def test_what_an_admin_writes_to_adjudicate_follows_them_to_another_browser(team, open_page, artifacts) -> None:
    """ada starts writing the final target at one desk and finishes at another: the note comes back there, said
    to be kept until she adjudicates, and is gone from the server once she has."""
    project = team
    users = get_user_model().objects
    first = Item.objects.filter(project=project).order_by("pk").first()
    for name, target in (("rita", "db"), ("sam", "dns")):
        assert queue.claim_next(project, users.get(username=name)) == first
        queue.submit(first, users.get(username=name), target)
    url = f"/projects/{project.slug}/items/{first.pk}/adjudicate/"

    desk = open_page("ada")
    desk.goto(desk.base_url + url)
    desk.keyboard.press("w")
    with desk.expect_response(lambda r: r.url.endswith(f"/items/{first.pk}/typed/") and r.status == 204):
        desk.locator("#adjudicate-note").fill("both read the log")  # sent a moment after typing stops

    laptop = open_page("ada")
    laptop.goto(laptop.base_url + url)
    expect(laptop.locator("#adjudicate-note")).to_have_value("both read the log")
    expect(laptop.locator(".draft-restored")).to_contain_text(
        "Restored what you typed and had not sent yet, kept for you until you adjudicate this item.")
    laptop.screenshot(path=str(artifacts / "adjudication-restored-elsewhere.png"), full_page=True)
    laptop.keyboard.press("2")  # picks sam's target
    laptop.locator("#adjudicated-badge").wait_for()
    assert not AdminTyping.objects.exists()
    desk.reload()
    expect(desk.locator(".draft-restored")).to_have_count(0)


def test_keys_typed_while_an_adjudication_is_sent_go_on_to_the_next_disagreement(team, open_page) -> None:
    """`1` then `n` at speed: the first answer is picked, and the `n` pressed while that was on its way is pressed
    on the adjudicated item that comes back, which goes on to the next open disagreement, the pick's
    confirmation still in view."""
    project = team
    users = get_user_model().objects
    first, second = Item.objects.filter(project=project).order_by("pk")
    for item in (first, second):
        for name, target in (("rita", "db"), ("sam", "dns")):
            assert queue.claim_next(project, users.get(username=name)) == item
            queue.submit(item, users.get(username=name), target)
    admin = open_page("ada")
    held = HeldRequests(admin, r".*/adjudicate/submit/$")
    admin.goto(f"{admin.base_url}/projects/{project.slug}/items/{first.pk}/adjudicate/")
    held.press_and_hold("1")  # picks rita's target (the answers are in the reviewers' order)
    admin.keyboard.press("n")
    held.routes.pop().continue_()
    admin.wait_for_function(f"document.getElementById('workspace').dataset.item === '{second.pk}'")
    # The pick's confirmation was on screen for a moment only: it stays while the next disagreement is open.
    expect(admin.locator("#messages")).to_have_text(f"Item {first.pk} adjudicated: picked rita's answer.")
    assert Adjudication.objects.get(item=first).target == "db"
    assert not Adjudication.objects.filter(item=second).exists()


def test_an_export_refused_for_its_days_keeps_the_form_and_shows_why_beside_it(team, open_page, artifacts) -> None:
    """The admin gives a last day before the first: the page comes back at the export form, their values in it,
    the reason under the range; with the range put right the export starts."""
    for name in ("rita", "sam"):
        reviewer = get_user_model().objects.get(username=name)
        for item in team.items.order_by("pk"):
            assert queue.claim_next(team, reviewer) == item
            assert queue.submit(item, reviewer, "db").ok
    ada = open_page("ada")
    ada.goto(f"{ada.base_url}/projects/{team.slug}/")
    form = ada.locator("form.export-form")
    form.get_by_label("Minibatch size").fill("16")
    form.get_by_label("Answered on or after").fill("2026-03-10")
    form.get_by_label("Answered on or before").fill("2026-03-09")
    form.get_by_role("button", name="Export").click()

    expect(form.locator(".range-errors")).to_have_text(re.compile(r"This is before the first day, 2026-03-10"))
    expect(form.get_by_label("Answered on or before")).to_have_attribute("aria-invalid", "true")
    assert (form.get_by_label("Minibatch size").input_value(), form.get_by_label("Answered on or after").input_value(),
            form.get_by_label("Answered on or before").input_value()) == ("16", "2026-03-10", "2026-03-09")
    # Scrolled down to the form (the page opens at its top otherwise, the form below the fold).
    assert ada.evaluate("[scrollY > 0, document.querySelector('#export-title').getBoundingClientRect().top < "
                        "innerHeight]") == [True, True]
    ada.screenshot(path=str(artifacts / "export-days-refused.png"))

    form.get_by_label("Answered on or after").fill("")
    form.get_by_label("Answered on or before").fill("")
    form.get_by_role("button", name="Export").click()
    expect(ada.get_by_text(re.compile(r"^Export \d+ started\.$"))).to_be_visible()
    assert team.exports.get().minibatch_size == 16


def test_the_admin_changes_the_overlap_and_the_items_follow_it(team, open_page, artifacts) -> None:
    """Raised, a finished item goes back to the queue for a third reviewer; lowered below the answers an item
    has, the form refuses; lowered to them, the items are finished and a lease open on one ends in its page."""
    project = team
    first, second = Item.objects.filter(project=project).order_by("pk")
    for name in ("rita", "sam"):
        user = get_user_model().objects.get(username=name)
        for item in (first, second):
            queue.claim_next(project, user)
            queue.submit(item, user, "db")
    assert set(Item.objects.filter(project=project).values_list("status", flat=True)) == {ItemStatus.DONE}
    admin, tom = open_page("ada"), open_page("tom")

    def save_overlap(value: str) -> str:
        admin.goto(f"{admin.base_url}/projects/{project.slug}/settings/")
        admin.fill("#id_overlap", value)
        admin.get_by_role("button", name="Save settings").click()
        admin.wait_for_load_state("load")
        return admin.locator("main").inner_text()

    assert "2 finished items with fewer than 3 answers went back to the queue." in save_overlap("3")
    admin.screenshot(path=str(artifacts / "overlap-raised.png"), full_page=True)
    start_reviewing(tom, project)
    held = item_on(tom)
    expect(tom.locator("#lease")).to_contain_text("lease until")

    page = save_overlap("1")
    assert "Some items already have 2 answers; the overlap cannot be lower than that." in page
    admin.screenshot(path=str(artifacts / "overlap-refused.png"), full_page=True)
    assert "2 items already had 2 answers and are now finished." in save_overlap("2")

    tom.keyboard.press("1")
    tom.keyboard.press("Enter")
    expect(tom.get_by_text("This item was finished while you worked on it")).to_be_visible()
    expect(tom.get_by_text("lease until")).to_have_count(0)  # the lease ended with the lowering
    tom.screenshot(path=str(artifacts / "overlap-finished-meanwhile.png"), full_page=True)
    assert Answer.objects.get(item_id=held, reviewer__username="tom").kind == AnswerKind.DRAFT
    assert set(Item.objects.filter(project=project).values_list("status", flat=True)) == {ItemStatus.DONE}
