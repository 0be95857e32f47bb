"""A reviewer and an admin in a real browser: import, label with the keyboard only, skip, back, undo, export,
and the export loads with `tensorcode.training.load_experience`."""

from __future__ import annotations

import json
import re
import zipfile

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from annotate import imports, tooling
from annotate.models import Answer, AnswerKind, Item, ItemStatus, Membership, ModelVersion, Project, Role
from tests.annotate.ui_samples import sample
from tests.e2e.conftest import PASSWORD, HeldRequests, sign_in

pytestmark = pytest.mark.django_db(transaction=True)

# Small, fast configurations: these tests check the site, not the models.
CONFIGURATIONS = {
    "decision": {"dim": 8, "buckets": 64},
    "investigator": {"dim": 8, "buckets": 64, "max_length": 16, "proposals": 2, "beam_width": 2,
                     "retrieval_encoder": {"dim": 8, "frozen": False}},
    "planner": {"dim": 8, "buckets": 64, "max_length": 16},
    "scene": {"image_size": 8, "patch_size": 4, "channels": 4, "dim": 8, "heads": 1, "max_length": 16},
    "chatbot": {"dim": 8, "buckets": 64, "max_length": 16},
}
KINDS = [("decision", "rank"), ("investigator", "rank"), ("investigator", "verification"),
         ("investigator", "retrieval"), ("investigator", "proposal"), ("planner", "outcomes"),
         ("planner", "proposal"), ("scene", "rank"), ("scene", "language"), ("chatbot", "reply")]


def make_project(tool: str, mode: str, *members) -> Project:
    project = Project.objects.create(slug=f"{tool}-{mode}", name=f"{tool.capitalize()} {mode}", tool=tool, mode=mode,
                                     configuration=CONFIGURATIONS[tool],
                                     guidelines="Read the evidence first. Pick what the evidence supports.")
    for user, role in members:
        Membership.objects.create(project=project, user=user, role=role)
    project.current_version = ModelVersion.objects.allocate(project, label="untrained", trained=False)
    project.save(update_fields=["current_version"])
    return project


def jsonl(tool: str, mode: str, count: int) -> bytes:
    lines = []
    for n in range(count):
        inputs = sample(tool, mode)["inputs"]
        for field in ("question", "goal", "text", "premise"):
            if field in inputs:
                inputs[field] = f"{inputs[field]} ({n})"
        lines.append(json.dumps({"inputs": inputs}))
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture
def users(django_user_model):
    admin = django_user_model.objects.create_user("ada", password=PASSWORD)
    reviewer = django_user_model.objects.create_user("rita", password=PASSWORD)
    return admin, reviewer


def predicted_project(tool: str, mode: str, reviewer, count: int = 2) -> Project:
    """A project whose items were imported and predicted in-process (the prediction task run directly)."""
    from annotate import tasks

    project = make_project(tool, mode, (reviewer, Role.REVIEWER))
    # Every tool kind must take its sample inputs as JSON: an ImportRejected here fails the test with the reason.
    result = imports.import_jsonl(project, [jsonl(tool, mode, count)], predict=False)
    tasks.predict_items(project.pk, result.item_ids)
    assert Item.objects.filter(project=project, status=ItemStatus.READY).count() == count
    return project


def start_reviewing(page, project: Project) -> None:
    page.goto(f"{page.base_url}/projects/{project.slug}/")
    page.get_by_role("button", name="Start reviewing").click()
    page.wait_for_selector("#workspace[data-item]")


def current_item(page) -> int:
    return int(page.locator("#workspace").get_attribute("data-item"))


def press_and_wait_for_next(page, key: str) -> None:
    """Press `key` (which submits) and wait until htmx has swapped in another workspace."""
    before = current_item(page)
    page.keyboard.press(key)
    page.wait_for_function(
        "n => { const w = document.getElementById('workspace'); return w && w.dataset.item !== String(n); }",
        arg=before,
    )


# -- one short test per tool kind's editor --------------------------------------------------------------------
def _expected(project: Project, item: Item, mode: str):
    receipt = item.prediction.receipt
    if mode == "rank":
        return item.inputs.get("hypotheses", item.inputs.get("candidates"))[1]["id"]
    if mode == "verification":
        return "contradiction"
    if mode == "outcomes":
        return {"candidate_id": item.inputs["plans"][0]["id"], "outcome": 2.5}
    if mode in ("proposal", "language", "reply"):
        return "reviewed text"
    return receipt


@pytest.mark.parametrize(("tool", "mode"), KINDS)
def test_editor_by_keyboard(page, artifacts, users, tool, mode) -> None:
    _, reviewer = users
    project = predicted_project(tool, mode, reviewer)
    sign_in(page, "rita")
    start_reviewing(page, project)
    item = Item.objects.select_related("prediction").get(pk=current_item(page))

    if mode == "rank":
        page.keyboard.press("2")
    elif mode == "verification":
        page.keyboard.press("c")
    elif mode == "outcomes":
        page.keyboard.press("1")
        page.keyboard.type("2.5")
    elif mode == "retrieval":
        page.keyboard.press("3")  # toggles the third document of the first query
        page.keyboard.press("q")  # on to the second query
        if not page.locator("fieldset.relevance").nth(1).locator("input:checked").count():
            page.keyboard.press("1")
        groups = page.locator("fieldset.relevance")
        expected_mask = [[box.is_checked() for box in groups.nth(q).locator("input").all()]
                         for q in range(groups.count())]
    else:
        page.keyboard.press("t")
        page.keyboard.press("Control+a")
        page.keyboard.type("reviewed text")
        assert page.locator("#text-diff ins").count() >= 1
    page.locator("#trace").evaluate("details => { details.open = true; }")  # show the trace in the screenshot
    page.locator("#trace-body .trace-table").wait_for()  # it loads when opened
    page.screenshot(path=str(artifacts / f"{tool}-{mode}.png"), full_page=True)
    press_and_wait_for_next(page, "Enter")

    answer = Answer.objects.get(item=item, reviewer=reviewer)
    assert answer.kind == AnswerKind.TARGET
    assert answer.source == f"review:{project.slug}/{item.pk}/rita"
    if mode == "retrieval":
        assert answer.target == expected_mask and all(any(row) for row in expected_mask)
    else:
        assert answer.target == _expected(project, item, mode)


def test_the_browsers_back_and_forward_show_each_item_as_it_is_now(page, artifacts, users) -> None:
    """htmx kept a copy of each page it swapped away and the browser's Back put it back: the item just answered
    showed as unanswered, under a lease its reviewer no longer held. Back and Forward now load from the server."""
    _, reviewer = users
    project = predicted_project("decision", "rank", reviewer)
    sign_in(page, "rita")
    start_reviewing(page, project)
    first = current_item(page)
    page.keyboard.press("2")
    press_and_wait_for_next(page, "Enter")
    second = current_item(page)

    page.go_back()
    page.wait_for_function(f"document.getElementById('workspace').dataset.item === '{first}'")
    assert page.locator("input[name=choice]").nth(1).is_checked()  # the answer given, as stored
    assert page.locator("#lease").count() == 0  # answered: no lease to show
    page.screenshot(path=str(artifacts / "back-to-the-answered-item.png"), full_page=True)

    page.go_forward()
    page.wait_for_function(f"document.getElementById('workspace').dataset.item === '{second}'")
    expect(page.locator("#lease")).to_contain_text("lease until")  # still theirs
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    page.get_by_text("Nothing left to review").wait_for()
    assert Answer.objects.filter(item__project=project, reviewer=reviewer, kind=AnswerKind.TARGET).count() == 2


def wait_for_unanswered_item_other_than(page, *items: int) -> int:
    """Wait until the workspace shows another item, nothing chosen and no request in flight."""
    page.wait_for_function(
        """items => {
             const w = document.getElementById('workspace');
             return !items.includes(Number(w.dataset.item)) && !document.querySelector('.htmx-request')
               && !w.querySelector('input[name=choice]:checked') && w.querySelector('#target-form');
           }""",
        arg=list(items),
    )
    return current_item(page)


def test_keys_typed_while_the_next_item_loads_answer_it(page, artifacts, users) -> None:
    """Keys pressed while a submit is in flight wait for the next item and are pressed on it: before, "1" picked an
    option in the form already sent and the next Enter was dropped. A second Enter alone answers nothing, a skip
    reason typed ahead lands in its field, keys typed after a skip's Enter are not lost in its box, and after a
    failed submit the keys typed meanwhile are dropped."""
    _, reviewer = users
    project = predicted_project("decision", "rank", reviewer, count=5)
    sign_in(page, "rita")
    start_reviewing(page, project)
    first = current_item(page)
    held = HeldRequests(page, r".*/items/\d+/(submit|skip)/$")

    held.press_and_hold("2", "Enter")
    for key in ("Enter", "1", "Enter"):  # Enter again, then the next item's answer
        page.keyboard.press(key)
    # Said at the foot of the page once the wait is long enough to wonder (400 ms).
    expect(page.locator("#typed-ahead")).to_have_text("Typed ahead: 1 Enter, for the next item, which is on its way")
    page.screenshot(path=str(artifacts / "typed-ahead-waiting.png"))
    assert page.locator("input[name=choice]").nth(1).is_checked()  # the form sent keeps its choice
    assert not page.locator("input[name=choice]").nth(0).is_checked()
    held.routes.pop().continue_()
    held.press_and_hold()  # the second item's answer, sent by the keys typed ahead
    held.routes.pop().continue_()
    third = wait_for_unanswered_item_other_than(page, first)
    answers = {a.item_id: a for a in Answer.objects.filter(reviewer=reviewer)}
    assert len(answers) == 2 and first in answers and third not in answers
    second = next(pk for pk in answers if pk != first)
    assert answers[first].target == Item.objects.get(pk=first).inputs["hypotheses"][1]["id"]
    assert answers[second].target == Item.objects.get(pk=second).inputs["hypotheses"][0]["id"]

    # "s" focuses the skip reason: what follows is typed into it, and Enter skips the item with it. Keys typed
    # while that skip is in flight (the focus was in its box) are for the item after.
    held.press_and_hold("2", "Enter")
    page.keyboard.type("sno light")
    page.keyboard.press("Enter")
    held.routes.pop().continue_()
    held.press_and_hold()  # the skip, sent by the keys typed ahead
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    held.routes.pop().continue_()
    held.press_and_hold()  # the fifth item's answer
    held.routes.pop().continue_()
    page.get_by_text("Nothing left to review").wait_for()
    skipped = Answer.objects.get(reviewer=reviewer, kind=AnswerKind.SKIP)
    assert skipped.skip_reason == "no light" and skipped.item_id not in (first, second, third)
    fourth = skipped.item_id
    assert Answer.objects.get(item_id=third, reviewer=reviewer).target == (
        Item.objects.get(pk=third).inputs["hypotheses"][1]["id"])
    fifth = Answer.objects.exclude(item_id__in=(first, second, third, fourth)).get(reviewer=reviewer)
    assert fifth.target == fifth.item.inputs["hypotheses"][0]["id"]

    # A submit that fails: what was typed meanwhile is not pressed on the item still shown.
    page.goto(f"{page.base_url}/projects/{project.slug}/items/{fourth}/")
    held.press_and_hold("1", "Enter")
    page.keyboard.press("2")
    page.keyboard.press("Enter")
    held.routes.pop().fulfill(status=500, body="")
    page.locator("#messages .message-error").wait_for()
    expect(page.locator("#typed-ahead")).to_have_text("Not used: 2 Enter, typed while waiting (no other item came)")
    page.screenshot(path=str(artifacts / "typed-ahead-then-failed.png"), full_page=True)
    assert current_item(page) == fourth
    assert page.locator("input[name=choice]").nth(0).is_checked()
    assert not page.locator("input[name=choice]").nth(1).is_checked()
    assert held.routes == [] and Answer.objects.get(item_id=fourth, reviewer=reviewer).kind == AnswerKind.SKIP
    page.keyboard.press("Escape")  # the next key puts the note away
    expect(page.locator("#typed-ahead")).to_be_hidden()


# -- the whole loop ----------------------------------------------------------------------------------------------
def test_import_label_skip_back_undo_export_and_load(page, artifacts, users, eager_celery, tmp_path) -> None:
    admin, reviewer = users
    project = make_project("decision", "rank", (admin, Role.ADMIN), (reviewer, Role.REVIEWER))

    # The admin imports a JSONL file in the page; predictions run (eagerly) when the import commits.
    sign_in(page, "ada")
    page.goto(f"{page.base_url}/projects/{project.slug}/")
    upload = tmp_path / "items.jsonl"
    upload.write_bytes(jsonl("decision", "rank", 4))
    page.get_by_label("JSONL file of tool inputs").set_input_files(str(upload))
    page.get_by_role("button", name="Import").click()
    page.get_by_text("Imported 4 items").wait_for()
    assert Item.objects.filter(project=project, status=ItemStatus.READY).count() == 4
    page.screenshot(path=str(artifacts / "project-after-import.png"), full_page=True)
    page.get_by_role("button", name="Sign out").click()

    # The reviewer labels with the keyboard only.
    sign_in(page, "rita")
    start_reviewing(page, project)
    url_before = page.url
    first = current_item(page)
    # The progress line loads once the item is shown, and again with each item swapped in.
    expect(page.locator("#my-progress")).to_contain_text("0 by you today · 0 of 4 items finished")
    page.screenshot(path=str(artifacts / "item-page.png"), full_page=True)
    page.keyboard.press("g")  # how the model got here: the traced steps load when the panel opens
    page.locator("#trace-body .trace-table").wait_for()
    assert page.locator("#trace").evaluate("details => details.open")
    page.screenshot(path=str(artifacts / "item-page-trace.png"), full_page=True)
    page.keyboard.press("g")
    assert not page.locator("#trace").evaluate("details => details.open")
    page.keyboard.press("1")
    press_and_wait_for_next(page, "Enter")
    assert page.url != url_before  # the address follows the item (hx-push-url)
    second = current_item(page)
    assert page.title().startswith(f"Item {second} ·")
    expect(page.locator("#my-progress")).to_contain_text("1 by you today · 1 of 4 items finished")

    page.keyboard.press("s")
    page.keyboard.type("Inputs are unclear")
    press_and_wait_for_next(page, "Enter")
    third = current_item(page)
    assert Answer.objects.get(item_id=second, reviewer=reviewer).skip_reason == "Inputs are unclear"

    page.keyboard.press("b")  # back to the skipped item, its reason in the skip box
    page.wait_for_function(f"document.getElementById('workspace').dataset.item === '{second}'")
    expect(page.locator("#skip-reason")).to_have_value("Inputs are unclear")
    page.keyboard.press("ArrowLeft")  # and back once more, to the first
    page.wait_for_function(f"document.getElementById('workspace').dataset.item === '{first}'")
    assert page.locator("input[name=choice]").first.is_checked()

    page.keyboard.press("u")  # undo the last submission: the skip of the second item
    page.wait_for_function(f"document.getElementById('workspace').dataset.item === '{second}'")
    page.locator("#item-notice").get_by_text("Undone:").wait_for()  # in place: the key acted through htmx
    assert Answer.objects.get(item_id=second, reviewer=reviewer).kind == AnswerKind.DRAFT
    page.keyboard.press("2")
    press_and_wait_for_next(page, "Enter")
    assert Answer.objects.get(item_id=second, reviewer=reviewer).target == "dns"
    assert current_item(page) == third

    page.keyboard.press("1")
    press_and_wait_for_next(page, "Enter")
    page.keyboard.press("2")
    page.keyboard.press("Enter")
    page.get_by_text("Nothing left to review").wait_for()
    expect(page.locator("#my-progress")).to_contain_text("4 by you today · 4 of 4 items finished")
    page.screenshot(path=str(artifacts / "queue-empty.png"), full_page=True)
    assert Answer.objects.filter(item__project=project, kind=AnswerKind.TARGET).count() == 4
    page.get_by_role("button", name="Sign out").click()

    # The admin exports experience files; the status fragment polls until the download link appears.
    sign_in(page, "ada")
    page.goto(f"{page.base_url}/projects/{project.slug}/")
    page.get_by_label("Minibatch size").fill("3")
    page.get_by_role("button", name="Export", exact=True).click()
    link = page.get_by_role("link", name=re.compile(r"Download export \d+"))
    link.wait_for()
    page.screenshot(path=str(artifacts / "project-after-export.png"), full_page=True)
    with page.expect_download() as download_info:
        link.click()
    archive = tmp_path / "export.zip"
    download_info.value.save_as(archive)

    from tensorcode.training import load_experience

    with zipfile.ZipFile(archive) as zipped:
        zipped.extractall(tmp_path / "export")
    (manifest_path,) = (tmp_path / "export").glob("**/manifest.json")
    manifest = json.loads(manifest_path.read_text())
    assert len(manifest["files"]) == 2  # 4 answers in minibatches of 3
    trainer = tooling.trainer_for_project(project)
    sources = []
    for entry in manifest["files"]:
        session = load_experience(str(manifest_path.parent / entry["name"]), operations=trainer.operations)
        for record in session.supervisions:
            sources.extend(record.source if isinstance(record.source, tuple) else [record.source])
    assert sorted(sources) == sorted(
        f"review:{project.slug}/{pk}/rita" for pk in Item.objects.filter(project=project).values_list("pk", flat=True)
    )
    assert get_user_model().objects.count() == 2


def test_admin_creates_project_and_adds_a_reviewer(page, artifacts, users, django_user_model) -> None:
    django_user_model.objects.create_user("sue", password=PASSWORD, is_staff=True)
    sign_in(page, "sue")
    page.get_by_role("link", name="New project").first.click()
    page.get_by_label("Name").fill("Outage causes")
    page.get_by_label("Slug").fill("outage-causes")
    page.get_by_label("Tool and mode").select_option("decision/rank")
    page.get_by_label("Guidelines").fill("Pick the **cause** the log supports.\n\n1. Read the log.\n2. Pick.")
    page.get_by_text("Preview, as reviewers see it").click()  # rendered by the server as it is typed
    expect(page.locator("#guidelines-preview strong")).to_have_text("cause")
    page.get_by_label("Guidelines").press("End")
    page.get_by_label("Guidelines").type("\n3. Submit.")
    expect(page.locator("#guidelines-preview ol li")).to_have_count(3)
    typed = page.get_by_label("Guidelines").input_value()
    page.get_by_label("Guidelines").fill("x" * 100_001)  # refused with 400: the preview says why, in place
    expect(page.locator("#guidelines-preview")).to_contain_text("are not previewed")
    page.get_by_label("Guidelines").fill(typed)
    expect(page.locator("#guidelines-preview ol li")).to_have_count(3)
    page.get_by_label("Tool configuration (JSON)").fill('{"dim": 8, "buckets": 64}')
    page.screenshot(path=str(artifacts / "project-create.png"), full_page=True)
    page.get_by_role("button", name="Create project").click()
    page.get_by_text("Project Outage causes created").wait_for()

    page.get_by_role("link", name="Settings").click()
    page.get_by_label("Username").fill("rita")
    page.get_by_role("button", name="Add or update members").click()
    page.get_by_text("rita is now a reviewer").wait_for()
    page.screenshot(path=str(artifacts / "project-settings.png"), full_page=True)

    project = Project.objects.get(slug="outage-causes")
    assert project.role_of(users[1]) == Role.REVIEWER
    assert project.current_version is not None and not project.current_version.trained
    page.goto(f"{page.base_url}/")
    page.screenshot(path=str(artifacts / "home.png"), full_page=True)
    assert page.get_by_text("Outage causes").is_visible()
