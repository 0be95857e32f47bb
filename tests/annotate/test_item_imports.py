"""Imports: JSONL validated line by line, all or nothing, a size limit; predictions queued on commit."""

from __future__ import annotations

import io
import json

import pytest

from annotate import imports, storage
from annotate.models import ExperienceUpload, Item, ItemImport, ItemStatus, UploadState

pytestmark = pytest.mark.django_db


def _jsonl(*records) -> io.BytesIO:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    return io.BytesIO(("\n".join(lines) + "\n").encode())


def test_import_creates_pending_items_and_queues_predictions(project, django_capture_on_commit_callbacks,
                                                             monkeypatch) -> None:
    sent = []
    monkeypatch.setattr("annotate.tasks.predict_items.delay", lambda *args: sent.append(args))
    decision = {"question": "q", "evidence": [{"source_id": "a", "text": "t"}],
                "hypotheses": [{"id": "x", "text": "one"}, {"id": "y", "text": "two"}]}

    with django_capture_on_commit_callbacks(execute=True):
        result = imports.import_jsonl(project, _jsonl({"inputs": decision}, "", {"inputs": decision}))

    assert result.count == 2
    assert list(Item.objects.values_list("status", flat=True)) == [ItemStatus.PENDING] * 2
    assert Item.objects.first().inputs == decision
    assert sent == [(project.pk, result.item_ids, None)]


def test_a_file_a_windows_editor_saved_with_a_byte_order_mark_imports(project) -> None:
    """Notepad begins UTF-8 with a byte-order mark: the first line was refused as "Unexpected UTF-8 BOM"."""
    good = {"inputs": {"question": "q", "evidence": [], "hypotheses": [{"id": "x", "text": "one"}]}}
    marked = io.BytesIO(imports.BOM + _jsonl(good, good).getvalue())

    assert imports.import_jsonl(project, marked, predict=False).count == 2
    with pytest.raises(imports.ImportRejected) as caught:  # only at the start of the file
        imports.import_jsonl(project, io.BytesIO(_jsonl(good).getvalue() + imports.BOM + b"{}\n"), predict=False)
    assert caught.value.errors[0].startswith("line 2: not valid JSON")


def test_import_reports_bad_json_with_line_number_and_imports_nothing(project) -> None:
    good = {"inputs": {"question": "q", "evidence": [], "hypotheses": [{"id": "x", "text": "one"}]}}

    with pytest.raises(imports.ImportRejected) as caught:
        imports.import_jsonl(project, _jsonl(good, '{"inputs": {"question": ', good))

    assert caught.value.errors[0].startswith("line 2: not valid JSON")
    assert not Item.objects.exists()


def test_items_written_before_a_bad_line_roll_back(project, monkeypatch) -> None:
    """Batches are written as lines are checked, so a problem after them must take them back out."""
    monkeypatch.setattr(imports, "BULK_BATCH", 2)
    good = {"inputs": {"question": "q", "evidence": [], "hypotheses": [{"id": "x", "text": "one"}]}}

    with pytest.raises(imports.ImportRejected) as caught:
        imports.import_jsonl(project, _jsonl(*[good] * 5, '{"inputs": 1}', good), predict=False)

    assert [e.split(":")[0] for e in caught.value.errors] == ["line 6"]
    assert not Item.objects.exists()


def test_import_refuses_nan(project) -> None:
    with pytest.raises(imports.ImportRejected, match="line 1: not valid JSON.*NaN"):
        imports.import_jsonl(project, _jsonl('{"inputs": NaN}'))


def test_import_refuses_json_nested_too_deeply_naming_the_line(project) -> None:
    good = {"inputs": {"question": "q", "evidence": [], "hypotheses": [{"id": "x", "text": "one"}]}}

    with pytest.raises(imports.ImportRejected) as caught:
        imports.import_jsonl(project, _jsonl(good, "[" * 100_000 + "]" * 100_000), predict=False)

    assert caught.value.errors == ["line 2: not valid JSON (nested too deeply)"]
    assert not Item.objects.exists()


def test_import_refuses_a_nul_character_naming_where_it_is(project) -> None:
    """PostgreSQL cannot store a NUL in JSON text: refused before anything is written, on every database."""
    good = {"inputs": {"question": "q", "evidence": [], "hypotheses": [{"id": "x", "text": "one"}]}}
    bad = {"inputs": {"question": "q", "evidence": [], "hypotheses": [{"id": "x", "text": "o\u0000ne"}]}}

    with pytest.raises(imports.ImportRejected) as caught:
        imports.import_jsonl(project, _jsonl(good, bad), predict=False)

    assert caught.value.errors == [
        "line 2: hypotheses[0].text: contains a NUL character (\\u0000), which cannot be stored"]
    assert not Item.objects.exists()
    literal = {"inputs": {"question": "a backslash-u0000 is text: \\u0000", "evidence": [],
                          "hypotheses": [{"id": "x", "text": "one"}]}}
    assert imports.import_jsonl(project, _jsonl(literal), predict=False).count == 1


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"input": {}}, "line 1: unknown field 'input'; allowed fields: inputs"),
        ({}, "line 1: missing field 'inputs' (the tool's inputs for one example)"),
        ([1, 2], "line 1: expected a JSON object like {\"inputs\": ...}, got a list"),
    ],
)
def test_import_reports_wrong_fields(project, line, message) -> None:
    with pytest.raises(imports.ImportRejected) as caught:
        imports.import_jsonl(project, _jsonl(line))

    assert caught.value.errors == [message]


def test_import_reports_inputs_the_tool_rejects(project, django_capture_on_commit_callbacks) -> None:
    good = {"question": "q", "evidence": [{"source_id": "a", "text": "t"}], "hypotheses": [{"id": "x", "text": "y"}]}
    bad = {**good, "question": 42}

    with pytest.raises(imports.ImportRejected) as caught:
        imports.import_jsonl(project, _jsonl({"inputs": good}, {"inputs": good}, {"inputs": bad}))

    assert len(caught.value.errors) == 1
    assert caught.value.errors[0].startswith("line 3: ")
    assert "question" in caught.value.errors[0]
    assert not Item.objects.exists()


def test_import_refuses_oversize_file_before_reading_it_all(project) -> None:
    reads = []

    class Stream(io.BytesIO):
        def read(self, size=-1):
            reads.append(size)
            return super().read(size)

    with pytest.raises(imports.ImportRejected, match="larger than the import limit of 1000 bytes"):
        imports.import_jsonl(project, Stream(b"x" * 10**6), max_bytes=1000)

    assert len(reads) == 1
    assert not Item.objects.exists()


def test_import_refuses_empty_file(project) -> None:
    with pytest.raises(imports.ImportRejected, match="no items"):
        imports.import_jsonl(project, io.BytesIO(b"\n\n"))


def test_import_lists_at_most_twenty_errors_and_counts_the_rest(project) -> None:
    with pytest.raises(imports.ImportRejected) as caught:
        imports.import_jsonl(project, _jsonl(*(["not json"] * 30)))

    assert len(caught.value.errors) == 20
    assert caught.value.total == 30
    assert "(and 10 more)" in str(caught.value)


def test_import_records_names_item_index(project) -> None:
    with pytest.raises(imports.ImportRejected) as caught:
        imports.import_records(project, [{"inputs": {"question": 1}}])

    assert caught.value.errors[0].startswith("items[0]: ")


def test_import_records_refuses_non_list(project) -> None:
    with pytest.raises(imports.ImportRejected, match="items: expected a list"):
        imports.import_records(project, {"inputs": {}})


def test_experience_upload_refuses_non_experience_json(project) -> None:
    with pytest.raises(imports.ImportRejected, match="not an experience file"):
        imports.upload_experience(project, None, io.BytesIO(b'{"format": "something-else"}'))
    with pytest.raises(imports.ImportRejected, match="not a JSON experience file"):
        imports.upload_experience(project, None, io.BytesIO(b"\x00\x01garbage"))

    assert not ExperienceUpload.objects.exists()


def test_experience_upload_refuses_oversize_file(project, settings) -> None:
    settings.TC_EXPERIENCE_MAX_BYTES = 10

    with pytest.raises(imports.ImportRejected, match="larger than the import limit"):
        imports.upload_experience(project, None, io.BytesIO(b'{"format": "tensorcode-experience"}'))


def test_imported_ids_follow_the_files_order_across_batches(project, monkeypatch) -> None:
    """Items are written in batches (COPY on PostgreSQL); each returned id is the item of that line."""
    monkeypatch.setattr(imports, "BULK_BATCH", 2)
    lines = [{"inputs": {"question": f"q{n}", "evidence": [{"source_id": "a", "text": "t"}],
                         "hypotheses": [{"id": "x", "text": "one"}, {"id": "y", "text": "two"}]}} for n in range(5)]

    result = imports.import_jsonl(project, _jsonl(*lines), predict=False)

    stored = Item.objects.in_bulk(result.item_ids)
    assert [stored[pk].inputs["question"] for pk in result.item_ids] == [f"q{n}" for n in range(5)]
    assert {(item.project_id, item.status, item.final_answers) for item in stored.values()} == {
        (project.pk, ItemStatus.PENDING, 0)}
    assert all(item.created_at is not None for item in stored.values())
    assert Item.objects.count() == 5


# -- an uploaded file, imported by a worker ------------------------------------------------------------------------
DECISION = {"question": "q", "evidence": [{"source_id": "a", "text": "t"}],
            "hypotheses": [{"id": "x", "text": "one"}, {"id": "y", "text": "two"}]}


@pytest.fixture
def queued(monkeypatch) -> list[int]:
    """The ids `queue_import` sends to the worker (here nobody runs them unless the test does)."""
    sent: list[int] = []
    monkeypatch.setattr("annotate.tasks.import_item_file.delay", lambda pk: sent.append(pk))
    monkeypatch.setattr("annotate.tasks.predict_items.delay", lambda *args: None)
    return sent


def test_a_queued_import_stores_the_file_and_the_worker_imports_it_whole(
        project, project_admin, queued, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        row = imports.queue_import(project, project_admin, _jsonl(*[{"inputs": DECISION}] * 3), name="a.jsonl")
    assert queued == [row.pk] and row.state == UploadState.PENDING
    assert row.path.read_bytes() == _jsonl(*[{"inputs": DECISION}] * 3).getvalue()
    assert row.size == row.path.stat().st_size
    assert not Item.objects.exists()

    with django_capture_on_commit_callbacks(execute=True):
        assert imports.run_import(row.pk) == UploadState.ACCEPTED

    row.refresh_from_db()
    assert row.count == 3 and row.checked_at is not None and not row.path.parent.exists()
    assert Item.objects.filter(project=project, status=ItemStatus.PENDING).count() == 3
    assert imports.run_import(row.pk) == UploadState.ACCEPTED  # run again: nothing more
    assert Item.objects.count() == 3


def test_a_queued_file_over_the_limit_is_refused_and_nothing_is_stored(project, project_admin, queued,
                                                                       settings) -> None:
    settings.TC_IMPORT_MAX_BYTES = 100
    stream = _jsonl(*[{"inputs": DECISION}] * 3)  # no size attribute: found out while it is written

    with pytest.raises(imports.ImportRejected, match="larger than the import limit of 100 bytes"):
        imports.queue_import(project, project_admin, stream, name="big.jsonl")

    assert not ItemImport.objects.exists() and queued == []
    assert not list((storage.root() / "imports").glob("*/*"))


def test_problems_are_recorded_with_their_lines_and_nothing_is_imported(project, project_admin, queued,
                                                                       django_capture_on_commit_callbacks) -> None:
    bad = [{"inputs": DECISION}, '{"inputs": ', {"inputs": DECISION, "extra": 1}] + ["[1"] * 30
    row = imports.queue_import(project, project_admin, _jsonl(*bad), name="bad.jsonl")

    with django_capture_on_commit_callbacks(execute=True):
        assert imports.run_import(row.pk) == UploadState.REFUSED

    row.refresh_from_db()
    assert row.reason == "32 problems in the file" and row.problem_total == 32
    assert len(row.problems) == imports.MAX_ERRORS and row.more_problems == 32 - imports.MAX_ERRORS
    assert row.problems[0].startswith("line 2: not valid JSON")  # listed by line, whichever check found them
    assert row.problems[1].startswith("line 3: unknown field") and row.problems[2].startswith("line 4: not valid")
    assert not Item.objects.exists() and not row.path.parent.exists()


def test_an_import_cut_short_commits_nothing_and_runs_again_from_the_start(project, project_admin, queued,
                                                                          monkeypatch) -> None:
    row = imports.queue_import(project, project_admin, _jsonl(*[{"inputs": DECISION}] * 4), name="a.jsonl")
    monkeypatch.setattr(imports, "BULK_BATCH", 2)
    real, written = imports._write, []

    def lost(project, inputs_list):
        if written:
            raise ConnectionError("worker lost")  # half written, then the worker is gone
        written.extend(real(project, inputs_list))
        return written

    monkeypatch.setattr(imports, "_write", lost)
    with pytest.raises(ConnectionError):
        imports.run_import(row.pk)
    row.refresh_from_db()
    assert len(written) == 2 and row.state == UploadState.PENDING and row.path.exists()
    assert not Item.objects.exists()

    monkeypatch.setattr(imports, "_write", real)
    assert imports.run_import(row.pk) == UploadState.ACCEPTED
    assert Item.objects.count() == 4


def test_a_file_missing_from_storage_is_refused_saying_why(project, project_admin, queued) -> None:
    row = imports.queue_import(project, project_admin, _jsonl({"inputs": DECISION}), name="a.jsonl")
    row.path.unlink()

    assert imports.run_import(row.pk) == UploadState.REFUSED

    row.refresh_from_db()
    assert "no longer in the artifact storage" in row.problems[0] and "must share it" in row.problems[0]


def test_an_import_of_a_deleted_project_does_nothing(project, project_admin, queued) -> None:
    row = imports.queue_import(project, project_admin, _jsonl({"inputs": DECISION}), name="a.jsonl")
    project.delete()

    assert imports.run_import(row.pk) == "missing"
    assert not Item.objects.exists()


def test_an_import_over_the_time_limit_is_refused_and_its_file_removed(project, project_admin, queued,
                                                                      monkeypatch) -> None:
    from celery.exceptions import SoftTimeLimitExceeded

    from annotate import tasks

    row = imports.queue_import(project, project_admin, _jsonl({"inputs": DECISION}), name="a.jsonl")

    def slow(pk):
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(imports, "run_import", slow)
    assert tasks.import_item_file(row.pk) == UploadState.REFUSED

    row.refresh_from_db()
    assert row.state == UploadState.REFUSED and "took longer than 30 minutes" in row.reason
    assert "Split it" in row.problems[0] and not row.path.parent.exists()


def test_staff_see_each_import_and_its_problems_in_the_admin(admin_client, project, project_admin, queued) -> None:
    from django.urls import reverse

    row = imports.queue_import(project, project_admin, _jsonl('{"inputs": '), name="bad.jsonl")
    imports.run_import(row.pk)

    listing = admin_client.get(reverse("admin:annotate_itemimport_changelist")).content.decode()
    change = admin_client.get(reverse("admin:annotate_itemimport_change", args=[row.pk])).content.decode()

    assert "bad.jsonl" in listing and "Refused" in listing
    assert "line 1: not valid JSON" in change
    assert admin_client.get(reverse("admin:annotate_itemimport_add")).status_code == 403


@pytest.mark.parametrize("piece", [1, 7, 64, 1 << 16])
def test_lines_split_across_the_pieces_read_import_the_same(project, piece) -> None:
    """The file is read and checked in pieces: a line cut anywhere between two is still one line."""
    records = [{"inputs": {**DECISION, "question": f"q{n}"}} for n in range(5)]
    body = _jsonl(records[0], "", *records[1:]).getvalue().replace(b"\n", b"\r\n", 1)  # a Windows line end too
    pieces = [body[start:start + piece] for start in range(0, len(body), piece)]

    result = imports.import_jsonl(project, pieces, predict=False)

    assert [item.inputs["question"] for item in Item.objects.order_by("pk")] == [f"q{n}" for n in range(5)]
    assert result.count == 5


def test_a_bad_line_in_a_later_piece_names_its_line(project) -> None:
    body = _jsonl(*[{"inputs": DECISION}] * 3, '{"inputs": ', {"inputs": DECISION}).getvalue()
    pieces = [body[start:start + 10] for start in range(0, len(body), 10)]

    with pytest.raises(imports.ImportRejected) as caught:
        imports.import_jsonl(project, pieces, predict=False)

    assert caught.value.errors == ["line 4: not valid JSON (Expecting value: line 1 column 12 (char 11))"]
    assert not Item.objects.exists()
