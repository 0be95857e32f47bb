"""Importing items: a JSONL file (uploaded on the project page or to the JSON API, imported by a worker),
`manage.py import_items`, or a JSON API body; all or nothing.

Each JSONL line is one object `{"inputs": <one example's tool inputs>}`. Every line is checked (JSON, fields,
the tool's own input checks), and the errors name their line. The items are created in one transaction, which
commits only when every line was right, and their predictions are queued for a worker once it commits.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from annotate import storage, tooling
from annotate.models import ExperienceUpload, Item, ItemImport, ItemStatus, Project, UploadState

MAX_ERRORS = 20  # errors listed; the rest are counted
BULK_BATCH = 5000  # rows per INSERT or COPY
ALLOWED_FIELDS = ("inputs",)


class ImportRejected(ValueError):
    """Nothing was imported; `errors` lists what is wrong, each naming its line (or item)."""

    def __init__(self, errors: list[str], total: int | None = None):
        self.errors = errors
        self.total = len(errors) if total is None else total
        more = f" (and {self.total - len(errors)} more)" if self.total > len(errors) else ""
        super().__init__("; ".join(errors[:3]) + (" …" if len(errors) > 3 else "") + more)


@dataclass
class ImportResult:
    item_ids: list[int] = field(default_factory=list)
    prediction_batches: int = 0

    @property
    def count(self) -> int:
        return len(self.item_ids)


def loads(text: str) -> Any:
    """`json.loads` for text from users: NaN and Infinity are refused, and so is nesting so deep that Python's
    parser runs out of stack (a `RecursionError` otherwise), both as `ValueError`."""
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError as exc:
        raise ValueError("nested too deeply") from exc


def max_upload_bytes() -> int:
    """The import size limit in bytes (`TC_IMPORT_MAX_BYTES`, default 64 MiB)."""
    return int(getattr(settings, "TC_IMPORT_MAX_BYTES", 64 * 1024 * 1024))


def max_api_items_bytes() -> int:
    """The limit of an import in one API request (`TC_API_ITEMS_MAX_BYTES`, default 8 MiB; at most the import
    limit): it holds the whole parsed body, where a file sent to a worker is read a line at a time."""
    return min(int(getattr(settings, "TC_API_ITEMS_MAX_BYTES", 8 * 1024 * 1024)), max_upload_bytes())


BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark, which Windows editors write at the start of a file


def import_jsonl(project: Project, stream: IO[bytes] | Iterable[bytes], *, max_bytes: int | None = None,
                 predict: bool = True) -> ImportResult:
    """Validate a JSONL file of `{"inputs": ...}` lines and import it whole, or raise `ImportRejected`.

    Each line is parsed and checked as it is read, and the checked inputs are written in batches inside one
    transaction, which any problem rolls back: the process holds one batch, never the file or its items (64 MiB
    of the smallest items, 646,345: a peak of 97 MB, and 399 MB when every checked line was kept to the end).
    After the first problem nothing more is written, and the rest of the file is still checked for problems.
    """
    result, batch, errors, total = ImportResult(), [], [], 0
    lines = _lines(stream, max_upload_bytes() if max_bytes is None else max_bytes)
    with transaction.atomic():
        for number, raw in enumerate(lines, start=1):
            if number == 1:
                raw = raw.removeprefix(BOM)
            if not raw.strip():
                continue
            try:
                inputs = validate_record(project, parse_line(raw))
            except ValueError as exc:
                total += 1
                if len(errors) < MAX_ERRORS:
                    errors.append(f"line {number}: {exc}")
                batch.clear()
                continue
            if not total:
                batch.append(inputs)
                if len(batch) == BULK_BATCH:
                    result.item_ids.extend(_write(project, batch))
                    batch.clear()
        if not total and not batch and not result.item_ids:
            errors, total = ["file: no items; each line should be a JSON object like {\"inputs\": {...}}"], 1
        if total:
            raise ImportRejected(errors, total=total)  # and what was written rolls back
        result.item_ids.extend(_write(project, batch))
        _queue_predictions(project, result, predict)
    return result


def queue_import(project: Project, user, stream, *, name: str = "") -> ItemImport:
    """Store an uploaded JSONL file and queue its import by a worker (`run_import`); the row shows how it went.

    The web process only stores the file, in pieces and within the import limit (`ImportRejected`, nothing
    stored, when it is larger).
    """
    from annotate import tasks

    limit = max_upload_bytes()
    if (getattr(stream, "size", None) or 0) > limit:
        raise ImportRejected([too_large(limit)])
    with transaction.atomic():
        row = ItemImport.objects.create(project=project, uploaded_by=user if getattr(user, "pk", None) else None,
                                        original_name=str(name).replace("\x00", "")[:255])
        try:
            path = storage.write_once(row.path, _pieces(stream), max_bytes=limit)
        except BaseException as exc:  # the row rolls back: its directory goes too
            shutil.rmtree(row.path.parent, ignore_errors=True)
            if isinstance(exc, storage.TooLarge):
                raise ImportRejected([too_large(limit)]) from None
            raise
        row.size = path.stat().st_size
        row.save(update_fields=["size"])
        tasks.import_item_file.delay_on_commit(row.pk)
    return row


def run_import(import_id: int) -> str:
    """Import a queued upload's file whole (ACCEPTED, with the count) or record its problems (REFUSED); its state.

    The items and the row's new state commit together, so running this again after a worker was lost starts
    over, and running it for a finished import does nothing. The project is locked first (as a deletion locks
    it): a deletion under way is waited for and the import finds its row gone; one that comes later waits for
    the import and deletes its items too.
    """
    project_id = ItemImport.objects.filter(pk=import_id).values_list("project_id", flat=True).first()
    if project_id is None:
        return "missing"
    with transaction.atomic():
        project = Project.objects.select_for_update(no_key=True).filter(pk=project_id).first()
        row = ItemImport.objects.select_for_update().filter(pk=import_id).first()
        if project is None or row is None:
            return "missing"
        if row.state != UploadState.PENDING:
            return row.state
        try:
            with _stored(row) as stream:
                result = import_jsonl(project, stream)
        except ImportRejected as exc:
            row.state, row.problems, row.problem_total = UploadState.REFUSED, exc.errors, exc.total
            row.reason = f"{exc.total:,} problem{'s' if exc.total != 1 else ''} in the file"
        else:
            row.state, row.count = UploadState.ACCEPTED, result.count
        row.checked_at = timezone.now()
        row.save(update_fields=["state", "problems", "problem_total", "reason", "count", "checked_at"])
        directory = row.path.parent
        transaction.on_commit(lambda: shutil.rmtree(directory, ignore_errors=True))
    return row.state


def _stored(row: ItemImport):
    try:
        return row.path.open("rb")
    except FileNotFoundError:
        raise ImportRejected(["file: the uploaded file is no longer in the artifact storage (TC_ARTIFACT_DIR; "
                              "every web host and worker must share it); upload it again"]) from None


def import_records(project: Project, records: Any, *, predict: bool = True) -> ImportResult:
    """Import a JSON list of `{"inputs": ...}` objects (the API body's `items`); errors name `items[i]`."""
    if not isinstance(records, list):
        raise ImportRejected([f"items: expected a list of {{'inputs': ...}} objects, got {_kind(records)}"])
    if not records:
        raise ImportRejected(["items: the list is empty; send at least one item"])
    return _import(project, [(f"items[{i}]", record) for i, record in enumerate(records)], predict=predict)


def read_limited(stream: IO[bytes] | Iterable[bytes], max_bytes: int) -> bytes:
    """Read at most `max_bytes`; `ImportRejected` as soon as the stream proves larger (never read whole)."""
    return b"".join(_pieces(stream, max_bytes))


def parse_line(raw: bytes) -> Any:
    """One JSONL line's value; `ValueError` saying what is wrong with it (not UTF-8, not JSON)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        return loads(text)
    except ValueError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None


def validate_record(project: Project, record: Any) -> Any:
    """The normalized inputs of one `{"inputs": ...}` record; `ValueError` naming the field otherwise."""
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object like {{\"inputs\": ...}}, got {_kind(record)}")
    unknown = sorted(set(record) - set(ALLOWED_FIELDS))
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r}; allowed fields: {', '.join(ALLOWED_FIELDS)}")
    if "inputs" not in record:
        raise ValueError("missing field 'inputs' (the tool's inputs for one example)")
    try:
        inputs = tooling.validate_inputs(project.tool, project.mode, record["inputs"], project.configuration)
        return tooling.to_json(inputs)
    except RecursionError as exc:  # a value nested almost as deep as the parser allows
        raise ValueError("inputs: nested too deeply") from exc


class NotRefused(ValueError):
    """The item is not refused (any more): a model version predicted it meanwhile, or it was never refused."""


def fix_refused(project: Project, item_id: int, inputs: Any) -> None:
    """Give a refused item of `project` new `inputs` (parsed JSON), checked as an import checks each line.

    The item then waits for a prediction again (queued when this commits) and counts as imported now, so the
    project page does not take it for a prediction lost long ago, and a prediction of the old inputs still
    in flight (a version promoted just before) is not stored (`tasks.predict_items`). `ValueError` naming
    what is wrong (bad inputs), or `NotRefused`; either way nothing changes.
    """
    checked = validate_record(project, {"inputs": inputs})
    with transaction.atomic():
        changed = Item.objects.filter(pk=item_id, project=project, status=ItemStatus.REFUSED).update(
            inputs=checked, status=ItemStatus.PENDING, refusal="", created_at=timezone.now())
        if not changed:
            status = Item.objects.filter(pk=item_id, project=project).values_list("status", flat=True).first()
            now = f"is {ItemStatus(status).label.lower()}" if status else "was removed"
            raise NotRefused(f"item {item_id} {now}, not refused: only a refused item's inputs can change")
        _queue_predictions(project, ImportResult([item_id]), predict=True)


def create_items(project: Project, inputs_list: list[Any], *, predict: bool = True) -> ImportResult:
    """Create ready-to-predict items in one transaction; predictions are queued when it commits."""
    result = ImportResult()
    with transaction.atomic():
        for start in range(0, len(inputs_list), BULK_BATCH):
            result.item_ids.extend(_write(project, inputs_list[start:start + BULK_BATCH]))
        _queue_predictions(project, result, predict)
    return result


def max_experience_bytes() -> int:
    """The experience-file upload limit in bytes (`TC_EXPERIENCE_MAX_BYTES`, default 32 MiB)."""
    return int(getattr(settings, "TC_EXPERIENCE_MAX_BYTES", 32 * 1024 * 1024))


def upload_experience(project: Project, user, stream, *, name: str = "") -> ExperienceUpload:
    """Store an experience file traced by the user's own program and queue its check by a worker.

    The web process only checks size and that the file is a JSON object of the experience format; a worker
    then loads it with the library's safe loader against the project's tool (`tasks.check_experience_upload`)
    and accepts it or records why not. `ImportRejected` (nothing stored) for an oversize or non-JSON file.
    """
    from annotate import tasks

    data = read_limited(stream, max_experience_bytes())
    try:
        document = loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ImportRejected([f"file: not a JSON experience file ({exc})"]) from exc
    if not isinstance(document, dict) or document.get("format") != "tensorcode-experience":
        raise ImportRejected(["file: not an experience file (expected a JSON object with "
                              "\"format\": \"tensorcode-experience\", as saved by tensorcode)"])
    with transaction.atomic():
        upload = ExperienceUpload.objects.create(
            project=project, uploaded_by=user if getattr(user, "pk", None) else None,
            original_name=str(name).replace("\x00", "")[:255], size=len(data),
        )
        storage.write_once(storage.artifact_dir("uploads", upload.pk) / ExperienceUpload.FILE_NAME, data)
        tasks.check_experience_upload.delay_on_commit(upload.pk)
    return upload


class UploadInUse(ValueError):
    """The upload is frozen into a training job that has not finished; nothing was removed."""


def remove_upload(upload: ExperienceUpload) -> None:
    """Remove an experience upload, its file with it, so later training jobs no longer include it.

    Refused (`UploadInUse`) while a training job that froze it waits or runs: that job copies the file when it
    starts. A job that has started has its own copy; one cancelled before it started and resumed later fails,
    saying the upload is gone. The row is locked before the check, as a launch locks the uploads it freezes
    (`trainingjobs.snapshot.select_uploads`): a launch under way either finishes first and is seen here, or
    starts after and no longer finds the upload.
    """
    directory = storage.artifact_dir("uploads", upload.pk, create=False)
    with transaction.atomic():
        if not list(ExperienceUpload.objects.select_for_update().filter(pk=upload.pk).values_list("pk")):
            return  # removed meanwhile
        waiting = unfinished_jobs_with(upload)
        if waiting:
            jobs = ", ".join(str(pk) for pk in waiting)
            raise UploadInUse(f"Experience upload {upload.pk} is part of training job {jobs}, which has not "
                              "finished: cancel the job or let it finish, then remove the upload.")
        ExperienceUpload.objects.filter(pk=upload.pk).delete()
        transaction.on_commit(lambda: shutil.rmtree(directory, ignore_errors=True))


def unfinished_jobs_with(upload: ExperienceUpload) -> list[int]:
    """Ids of the project's waiting or running training jobs that froze `upload` (none without the jobs app)."""
    return [job.pk for job in upload.project.unfinished_training_jobs() if upload.pk in (job.train_uploads or [])]


def _import(project: Project, records: list[tuple[str, Any]], *, predict: bool) -> ImportResult:
    inputs_list, errors = [], []
    for index, (where, record) in enumerate(records):
        try:
            inputs_list.append(validate_record(project, record))
        except ValueError as exc:
            errors.append(f"{where}: {exc}")
        records[index] = None  # the checked copy is kept; the parsed one can go
    if errors:
        raise ImportRejected(errors[:MAX_ERRORS], total=len(errors))
    return create_items(project, inputs_list, predict=predict)


def _queue_predictions(project: Project, result: ImportResult, predict: bool) -> None:
    """Queue the new items' predictions for when the transaction commits (none without a model)."""
    from annotate import tasks

    if predict and project.current_version_id is not None:
        result.prediction_batches = tasks.enqueue_predictions(project, result.item_ids)


def _write(project: Project, inputs_list: list[Any]) -> list[int]:
    """Insert pending items with these inputs (inside the caller's transaction); their ids, in order."""
    if not inputs_list:
        return []
    return _insert([Item(project=project, inputs=inputs, status=ItemStatus.PENDING) for inputs in inputs_list])


def _insert(rows: list[Item]) -> list[int]:
    """Insert `rows` (inside the caller's transaction) and return their ids, in order.

    On PostgreSQL the rows go in with COPY under ids taken from the table's sequence first: a bulk INSERT binds
    its JSON as text arrays quoted in Python, which made inserting cost more than checking every line.
    """
    if connection.vendor != "postgresql":
        return [row.pk for row in Item.objects.bulk_create(rows)]
    meta = Item._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    columns = ", ".join(connection.ops.quote_name(c) for c in [meta.pk.column, *(f.column for f in fields)])
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
                       [meta.db_table, meta.pk.column, len(rows)])
        ids = [pk for (pk,) in cursor.fetchall()]
        with cursor.cursor.copy(f"COPY {connection.ops.quote_name(meta.db_table)} ({columns}) FROM STDIN") as copy:
            for pk, row in zip(ids, rows, strict=True):
                row.pk = pk
                copy.write_row([pk, *(f.get_db_prep_save(getattr(row, f.attname), connection) for f in fields)])
    return ids


def _lines(stream: IO[bytes] | Iterable[bytes], max_bytes: int):
    """The lines of `stream` without their newlines, read in pieces; `ImportRejected` as soon as it proves
    larger than `max_bytes`."""
    pending = []
    for chunk in _pieces(stream, max_bytes):
        parts = chunk.split(b"\n")
        if len(parts) > 1:
            yield b"".join([*pending, parts[0]])
            yield from parts[1:-1]
            pending = []
        pending.append(parts[-1])
    yield b"".join(pending)


def _pieces(stream: IO[bytes] | Iterable[bytes], max_bytes: int | None = None):
    """The stream in pieces (an upload's own chunks, or blocks read); `ImportRejected` as soon as they add up to
    more than `max_bytes`."""
    size = 0
    for chunk in stream.chunks() if hasattr(stream, "chunks") else _blocks(stream):
        size += len(chunk)
        if max_bytes is not None and size > max_bytes:
            raise ImportRejected([too_large(max_bytes)])
        yield chunk


def _blocks(stream, size: int = 1 << 16):
    if hasattr(stream, "read"):
        while block := stream.read(size):
            yield block
    else:
        yield from stream


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not allowed in strict JSON")


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", type(None): "null", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )


def too_large(limit: int) -> str:
    """The message for a file over the import limit."""
    return f"file: larger than the import limit of {_size(limit)}; split it into parts"


def _size(n: int) -> str:
    return f"{n / (1024 * 1024):.0f} MiB" if n >= 1024 * 1024 else f"{n} bytes"
