"""In a real browser: an admin uploads a JSONL file of items and watches a worker import it (the row polls), and
a file with bad lines imports nothing and lists what to fix, each problem naming its line."""

from __future__ import annotations

import pytest

from annotate import imports, tasks
from annotate.models import Item, ItemImport, ItemStatus, Role, UploadState
from tests.e2e.conftest import sign_in
from tests.e2e.test_review_loop import jsonl, make_project, users  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_import_is_followed_on_the_page_until_the_worker_is_done(page, artifacts, users, monkeypatch,  # noqa: F811
                                                                     tmp_path) -> None:
    admin, reviewer = users
    project = make_project("decision", "rank", (admin, Role.ADMIN), (reviewer, Role.REVIEWER))
    queued: list[int] = []
    monkeypatch.setattr(tasks.import_item_file, "delay", lambda pk: queued.append(pk))  # the worker is this test
    sign_in(page, "ada")
    page.goto(f"{page.base_url}/projects/{project.slug}/")

    upload = tmp_path / "outages.jsonl"
    upload.write_bytes(jsonl("decision", "rank", 5))
    page.get_by_label("JSONL file of tool inputs").set_input_files(str(upload))
    page.get_by_role("button", name="Import").click()
    page.get_by_text("outages.jsonl uploaded: every line is being checked").wait_for()
    row = page.locator(".import-status").first
    row.get_by_text("Importing").wait_for()
    page.get_by_text("No items yet: a file is being imported below.").wait_for()
    page.screenshot(path=str(artifacts / "import-pending.png"), full_page=True)
    assert queued == [ItemImport.objects.get().pk] and not Item.objects.exists()

    imports.run_import(queued[0])  # what the worker does; the row finds out by itself

    row.get_by_text("Imported 5 items").wait_for()
    assert "predictions are on their way" in row.inner_text()
    assert Item.objects.filter(project=project, status=ItemStatus.PENDING).count() == 5
    page.screenshot(path=str(artifacts / "import-done.png"), full_page=True)

    # A file with two bad lines: nothing is imported, and the row says what to fix.
    lines = jsonl("decision", "rank", 3).decode().splitlines()
    lines[1] = '{"inputs": {"question": "no hypotheses"}'
    lines.append('{"input": {}}')
    upload.write_text("\n".join(lines) + "\n")
    page.get_by_label("JSONL file of tool inputs").set_input_files(str(upload))
    page.get_by_role("button", name="Import").click()
    page.get_by_text("outages.jsonl uploaded").wait_for()
    imports.run_import(queued[1])
    bad = page.locator(f"#import-{queued[1]}")
    bad.get_by_text("Nothing imported").wait_for()
    text = bad.inner_text()
    assert "2 problems in the file" in text and "line 2: not valid JSON" in text and "line 4: unknown field" in text
    assert ItemImport.objects.get(pk=queued[1]).state == UploadState.REFUSED
    assert Item.objects.count() == 5
    page.screenshot(path=str(artifacts / "import-refused.png"), full_page=True)


def test_items_whose_predictions_were_lost_are_queued_again_from_the_page(page, artifacts, users,  # noqa: F811
                                                                         monkeypatch) -> None:
    from datetime import timedelta

    from django.utils import timezone

    admin, reviewer = users
    project = make_project("decision", "rank", (admin, Role.ADMIN), (reviewer, Role.REVIEWER))
    imports.import_jsonl(project, [jsonl("decision", "rank", 3)], predict=False)  # as if the messages were lost
    Item.objects.filter(project=project).update(created_at=timezone.now() - timedelta(minutes=11))
    sent: list[tuple] = []
    monkeypatch.setattr(tasks.predict_items, "delay", lambda *args: sent.append(args))  # the worker is this test
    sign_in(page, "ada")
    page.goto(f"{page.base_url}/projects/{project.slug}/")

    page.get_by_text("3 items wait for a prediction, the oldest for more than 10 minutes").wait_for()
    page.screenshot(path=str(artifacts / "predictions-stale.png"), full_page=True)
    page.get_by_role("button", name="queue their predictions again").click()
    page.get_by_text("Predictions queued again for 3 waiting items").wait_for()
    assert [sorted(ids) for _, ids, _ in sent] == [sorted(Item.objects.values_list("pk", flat=True))]

    tasks.predict_items(*sent[0])  # what the worker does
    page.reload()
    page.get_by_role("button", name="Start reviewing").wait_for()
    assert page.get_by_text("the oldest for more than 10 minutes").count() == 0


def test_an_import_whose_message_was_lost_says_so_and_is_imported_once_the_sweep_sends_it_again(
        page, artifacts, users, monkeypatch, tmp_path) -> None:  # noqa: F811
    from datetime import timedelta

    admin, reviewer = users
    project = make_project("decision", "rank", (admin, Role.ADMIN), (reviewer, Role.REVIEWER))
    monkeypatch.setattr(tasks.predict_items, "delay", lambda *args: None)
    monkeypatch.setattr(tasks.import_item_file, "delay", lambda pk: None)  # lost between the commit and the broker
    upload = tmp_path / "lost.jsonl"
    upload.write_bytes(jsonl("decision", "rank", 3))
    with upload.open("rb") as stream:
        row = imports.queue_import(project, admin, stream, name="lost.jsonl")
    sent: list[int] = []
    monkeypatch.setattr(tasks.import_item_file, "delay", lambda pk: sent.append(pk))  # the worker is this test
    earlier = row.created_at - tasks.STALE_WAIT - timedelta(minutes=1)
    ItemImport.objects.filter(pk=row.pk).update(created_at=earlier, sent_at=earlier)
    sign_in(page, "ada")
    page.goto(f"{page.base_url}/projects/{project.slug}/")

    status = page.locator(f"#import-{row.pk}")
    status.get_by_text("Not done after more than 10 minutes. Is a worker running").wait_for()
    page.screenshot(path=str(artifacts / "import-waiting-long.png"), full_page=True)

    assert tasks.resend_stale_work() == 1 and sent == [row.pk]  # what beat runs
    status.get_by_text(", last at").wait_for()
    status.screenshot(path=str(artifacts / "import-sent-again.png"))
    imports.run_import(row.pk)  # what the worker does with the message sent again

    status.get_by_text("Imported 3 items").wait_for()
    assert status.get_by_text("Not done after").count() == 0
    assert Item.objects.filter(project=project).count() == 3


def test_a_file_over_the_limit_is_refused_in_the_browser_before_it_is_sent(page, artifacts, users, settings,  # noqa: F811
                                                                            tmp_path) -> None:
    settings.TC_IMPORT_MAX_BYTES = 100 * 1024
    admin, reviewer = users
    project = make_project("decision", "rank", (admin, Role.ADMIN), (reviewer, Role.REVIEWER))
    sign_in(page, "ada")
    page.goto(f"{page.base_url}/projects/{project.slug}/")
    upload = tmp_path / "big.jsonl"
    upload.write_bytes(jsonl("decision", "rank", 1) * (200 * 1024 // len(jsonl("decision", "rank", 1)) + 1))

    field = page.get_by_label("JSONL file of tool inputs")
    field.set_input_files(str(upload))
    page.get_by_role("button", name="Import").click()

    message = field.evaluate("input => input.validationMessage")
    assert message == f"big.jsonl is {-(-upload.stat().st_size // 1024)} KiB; this form takes at most 100 KiB."
    page.screenshot(path=str(artifacts / "import-too-large.png"))
    assert not ItemImport.objects.exists()  # the form was not sent

    fits = tmp_path / "small.jsonl"  # a file that fits clears the refusal
    fits.write_bytes(jsonl("decision", "rank", 2))
    field.set_input_files(str(fits))
    assert field.evaluate("input => input.validationMessage") == ""
