"""A newcomer's first hour, in one browser session: an admin creates a project and imports items, a reviewer
labels them with the keyboard only (undo and skip included), the admin exports experience files (loaded here with
`tensorcode.training.load_experience`), launches a training job that a real Celery worker trains, watches its
progress bar move, compares the versions, promotes the new one and sees a waiting item predicted again by it.

Predictions and exports run in the live server's thread (eager Celery, as in the other browser tests); the job
and the re-predictions after the promote go through Redis to a real worker process, as in
tests/trainingjobs/test_workers.py. Screenshots of every stage go to the `artifacts` folder.
"""

from __future__ import annotations

import json
import re
import zipfile

import pytest

from annotate import tooling
from annotate.models import Answer, AnswerKind, Item, ItemStatus, Project, Role
from tests.e2e.conftest import PASSWORD, sign_in
from tests.trainingjobs.conftest import CONFIGURATION, decision_input
from tests.trainingjobs.test_workers import redis_workers  # noqa: F401 - fixture
from trainingjobs.models import JobState, TrainingJob

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

IMPORTED = 16
LABELLED = 12  # 11 answers and 1 skip; the other 4 items wait for review when the new version is promoted
# About 9 training records in minibatches of 1: some 2,000 steps, about 9 s on one thread of the 2-core
# development machine, so the page (polling every second) sees the bar part-way even on a faster one.
EPOCHS = 250
JOB_TIMEOUT_MS = 300_000


def right_key(item: Item) -> str:
    """The key of the hypothesis the item's evidence supports (candidates are listed in input order)."""
    evidence = item.inputs["evidence"][0]["text"]
    ids = [h["id"] for h in item.inputs["hypotheses"]]
    return str(ids.index("db" if "database" in evidence else "dns") + 1)


def current_item(page) -> Item:
    return Item.objects.get(pk=int(page.locator("#workspace").get_attribute("data-item")))


def press_and_wait_for_another(page, key: str) -> None:
    """Press `key` and wait until htmx has swapped in another item (or the end of the queue)."""
    before = page.locator("#workspace").get_attribute("data-item")
    page.keyboard.press(key)
    page.wait_for_function(
        "n => { const w = document.getElementById('workspace'); return !w || w.dataset.item !== n; }", arg=before
    )


def sign_out(page) -> None:
    page.get_by_role("button", name="Sign out").click()


def test_newcomer_walks_the_whole_loop(page, artifacts, eager_celery, redis_workers, django_user_model,  # noqa: F811
                                       tmp_path, wait_until) -> None:
    django_user_model.objects.create_user("ada", password=PASSWORD, is_staff=True)
    rita = django_user_model.objects.create_user("rita", password=PASSWORD)
    redis_workers.start("w1", lease_seconds=30)  # boots while the people below work

    # -- The admin creates a project and adds a reviewer. --
    sign_in(page, "ada")
    page.get_by_role("link", name="New project").first.click()
    page.get_by_label("Name").fill("Service outages")
    page.get_by_label("Slug").fill("outages")
    page.get_by_label("Tool and mode").select_option("decision/rank")
    page.get_by_label("Guidelines").fill("Pick the cause the log supports.")
    page.get_by_label("Tool configuration (JSON)").fill(json.dumps(CONFIGURATION))
    page.get_by_role("button", name="Create project").click()
    page.get_by_text("Project Service outages created").wait_for()
    page.screenshot(path=str(artifacts / "01-project-created.png"), full_page=True)
    project = Project.objects.get(slug="outages")

    page.get_by_role("link", name="Settings").click()
    page.get_by_label("Username").fill("rita")
    page.get_by_role("button", name="Add or update members").click()
    page.get_by_text("rita is now a reviewer").wait_for()
    assert project.role_of(rita) == Role.REVIEWER

    # -- The admin imports a JSONL file; its items are predicted when the import commits. --
    page.goto(f"{page.base_url}/projects/outages/")
    upload = tmp_path / "outages.jsonl"
    upload.write_text("".join(json.dumps({"inputs": decision_input(n)}) + "\n" for n in range(IMPORTED)))
    page.get_by_label("JSONL file of tool inputs").set_input_files(str(upload))
    page.get_by_role("button", name="Import").click()
    page.get_by_text(f"Imported {IMPORTED} items").wait_for()
    assert project.items.filter(status=ItemStatus.READY).count() == IMPORTED
    page.screenshot(path=str(artifacts / "02-imported.png"), full_page=True)
    sign_out(page)

    # -- The reviewer labels with the keyboard only. --
    sign_in(page, "rita")
    page.get_by_role("link", name="Service outages").first.click()
    page.get_by_role("button", name="Start reviewing").focus()
    page.keyboard.press("Enter")
    page.wait_for_selector("#workspace[data-item]")
    page.screenshot(path=str(artifacts / "03-first-item.png"), full_page=True)

    first = current_item(page)
    page.keyboard.press(right_key(first))
    press_and_wait_for_another(page, "Enter")

    mistaken = current_item(page)  # answered wrongly, then undone and answered again
    page.keyboard.press("2" if right_key(mistaken) == "1" else "1")
    press_and_wait_for_another(page, "Enter")
    # The next item's forms are live the moment it appears (no 20 ms settle), so "u" at once undoes through htmx.
    assert page.evaluate("htmx.config.defaultSettleDelay") == 0
    page.keyboard.press("u")
    page.wait_for_function(f"document.getElementById('workspace').dataset.item === '{mistaken.pk}'")
    page.locator("#item-notice").get_by_text("Undone:").wait_for()  # in place: the key acted through htmx
    page.screenshot(path=str(artifacts / "04-undone.png"), full_page=True)
    assert Answer.objects.get(item=mistaken, reviewer=rita).kind == AnswerKind.DRAFT
    page.keyboard.press(right_key(mistaken))
    press_and_wait_for_another(page, "Enter")

    skipped = current_item(page)
    page.keyboard.press("s")
    page.keyboard.type("The log names neither cause")
    page.screenshot(path=str(artifacts / "05-skipping.png"), full_page=True)
    press_and_wait_for_another(page, "Enter")

    for _ in range(LABELLED - 3):
        item = current_item(page)
        page.keyboard.press(right_key(item))
        press_and_wait_for_another(page, "Enter")
    page.screenshot(path=str(artifacts / "06-labelled.png"), full_page=True)

    answers = Answer.objects.filter(item__project=project, reviewer=rita)
    assert answers.get(item=skipped).skip_reason == "The log names neither cause"
    targets = answers.filter(kind=AnswerKind.TARGET)
    assert targets.count() == LABELLED - 1
    assert all(str(1 + [h["id"] for h in a.item.inputs["hypotheses"]].index(a.target)) == right_key(a.item)
               for a in targets.select_related("item"))
    waiting = list(project.items.filter(status=ItemStatus.READY))
    assert len(waiting) == IMPORTED - LABELLED
    sign_out(page)

    # -- The admin exports experience files, and the library loads them here. --
    sign_in(page, "ada")
    page.goto(f"{page.base_url}/projects/outages/")
    page.get_by_label("Minibatch size").fill("4")
    page.get_by_role("button", name="Export", exact=True).click()
    link = page.get_by_role("link", name=re.compile(r"Download export \d+"))
    link.wait_for()
    page.screenshot(path=str(artifacts / "07-exported.png"), full_page=True)
    with page.expect_download() as download:
        link.click()
    archive = tmp_path / "export.zip"
    download.value.save_as(archive)

    from tensorcode.training import load_experience

    with zipfile.ZipFile(archive) as zipped:
        zipped.extractall(tmp_path / "export")
    (manifest,) = (tmp_path / "export").glob("**/manifest.json")
    operations = tooling.trainer_for_project(project).operations
    sources = []
    for entry in json.loads(manifest.read_text())["files"]:
        session = load_experience(str(manifest.parent / entry["name"]), operations=operations)
        for record in session.supervisions:
            sources.extend(record.source if isinstance(record.source, tuple) else [record.source])
    assert sorted(sources) == sorted(targets.values_list("source", flat=True))

    # -- The admin launches a training job and watches it. --
    page.get_by_role("link", name="Training jobs and versions").click()
    page.fill("input[name=epochs]", str(EPOCHS))
    page.click("#launch-form details summary")
    page.fill("input[name=minibatch_size]", "1")
    page.fill("input[name=held_out_fraction]", "0.2")
    page.click("#launch")
    page.wait_for_url("**/jobs/*/")
    job = TrainingJob.objects.get()

    page.wait_for_function(
        "() => { const p = document.querySelector('#job-progress');"
        " return p && Number(p.value) > 0 && Number(p.value) < Number(p.max); }",
        timeout=JOB_TIMEOUT_MS,
    )
    part_way = int(page.locator("#job-progress").get_attribute("value"))
    page.screenshot(path=str(artifacts / "08-job-running.png"), full_page=True)
    page.locator(".state[data-state=SUCCEEDED]").wait_for(timeout=JOB_TIMEOUT_MS)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.error
    assert 0 < part_way < job.total_steps
    assert int(page.locator("#job-progress").get_attribute("value")) == job.total_steps

    # -- Compares the base and new versions on the held-out records, and promotes the new one. --
    comparison = page.locator("#comparison")
    assert comparison.is_visible()
    assert f"New: {job.result_version}" in comparison.inner_text()
    page.screenshot(path=str(artifacts / "09-job-succeeded.png"), full_page=True)
    page.click("#promote")
    page.locator("#current-badge").wait_for()
    project.refresh_from_db()
    assert project.current_version_id == job.result_version_id

    # -- Items still waiting for review are predicted again by the promoted version. --
    def repredicted() -> bool:
        return all(
            item.prediction is not None and item.prediction.model_version_id == job.result_version_id
            for item in Item.objects.filter(pk__in=[w.pk for w in waiting]).select_related("prediction")
        )

    wait_until(repredicted, timeout=120, what="the promoted version to predict the waiting items")
    page.goto(f"{page.base_url}/projects/outages/items/{waiting[0].pk}/")
    assert f"Model version {job.result_version_id}" in page.content()
    page.screenshot(path=str(artifacts / "10-item-repredicted.png"), full_page=True)
