"""Exporting reviewed answers: experience files (one per minibatch) and a flat JSONL file, with a manifest.

An export streams the selected answers in id order (`iterator(chunk_size=...)`), so memory stays bounded by one
minibatch whatever the project's size. A run writes its files, `manifest.json` and `export-<id>.zip` (all of
them) into `exports/<id>/.partial-<run>/` and moves them into place only when the export succeeds.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import multiprocessing
import os
import secrets
import shutil
import time
import zipfile
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from annotate import agreement, storage, tooling
from annotate.models import (
    Adjudication,
    AdjudicationKind,
    Answer,
    AnswerKind,
    Export,
    ExportFormat,
    ExportState,
    ItemStatus,
    Project,
)

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
JSONL = "answers.jsonl"
FORMAT = "tensorcode-annotate.export"
VERSION = 1
CHUNK = 1000  # rows fetched per database round trip
MAX_MINIBATCH = 4096
PROGRESS_SECONDS = 0.5
# The columns an export writes of a plain answer, in `_jsonl_record`'s order.
_ROW = ("item_id", "item__inputs", "target", "source", "reviewer__username", "created_at", "updated_at")
# Each id is one parameter of the selecting statement, and PostgreSQL takes at most 65,535.
MAX_ITEM_IDS = 50_000
FILTER_KEYS = ("reviewers", "after", "before", "confidence_min", "confidence_max", "item_status", "item_ids",
               "agreed_only")


class NothingSelected(ValueError):
    """The filters select no reviewed answer, so there is nothing to export."""


def validate_filters(filters: Any) -> dict:
    """Normalized filters; `ValueError` naming the bad key or value (impossible ranges included).

    Keys: `reviewers` (usernames), `after`/`before` (ISO 8601 times: answers last changed at or after `after` and
    before `before`, so one selection's `before` is the next one's `after` and no answer is in both or neither),
    `confidence_min`/`confidence_max` (the item's prediction confidence, 0..1), `item_status` ("done" or
    "ready"; an item still collecting answers under overlap > 1 is "ready"), `item_ids` (ids, at most
    `MAX_ITEM_IDS`), `agreed_only` (true: leave out the answers of items whose reviewers disagree and that no
    admin has adjudicated; an adjudicated item still contributes its adjudicated target).
    """
    if filters in (None, ""):
        return {}
    if not isinstance(filters, dict):
        raise ValueError(f"filters: expected an object, got {type(filters).__name__}")
    unknown = sorted(set(filters) - set(FILTER_KEYS))
    if unknown:
        raise ValueError(f"filters: unknown key {unknown[0]!r}; valid keys: {', '.join(FILTER_KEYS)}")
    clean: dict = {}
    moments: dict = {}  # `after` and `before` as times: their texts keep their offsets, so they do not sort as times
    for key, value in filters.items():
        if value in (None, "", []):
            continue
        if key == "reviewers":
            if isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError("filters.reviewers: expected a list of usernames")
            clean[key] = sorted(set(value))
        elif key in ("after", "before"):
            moment = parse_datetime(value) if isinstance(value, str) else None
            if moment is None:
                raise ValueError(f"filters.{key}: expected an ISO 8601 time like 2026-12-01T08:00:00Z, got {value!r}")
            if timezone.is_naive(moment):
                moment = timezone.make_aware(moment, timezone.utc)
            moments[key], clean[key] = moment, moment.isoformat()
        elif key in ("confidence_min", "confidence_max"):
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise ValueError(f"filters.{key}: expected a number between 0 and 1")
            try:
                number = float(value)
            except ValueError as exc:
                raise ValueError(f"filters.{key}: expected a number between 0 and 1, got {value!r}") from exc
            if not 0.0 <= number <= 1.0:
                raise ValueError(f"filters.{key}: {number} is outside 0..1")
            clean[key] = number
        elif key == "agreed_only":
            if not isinstance(value, bool):
                raise ValueError(f"filters.agreed_only: expected true or false, got {value!r}")
            if value:
                clean[key] = True
        elif key == "item_status":
            if value not in (ItemStatus.DONE, ItemStatus.READY):
                raise ValueError(f"filters.item_status: expected 'done' or 'ready', got {value!r}")
            clean[key] = value
        elif key == "item_ids":
            if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                raise ValueError("filters.item_ids: expected a list of item ids")
            wrong = next((v for v in value if not 0 < v < 2**63), None)  # beyond a 64-bit key: the database errs
            if wrong is not None:
                raise ValueError(f"filters.item_ids: {wrong} is not an item id")
            clean[key] = sorted(set(value))
            if len(clean[key]) > MAX_ITEM_IDS:
                raise ValueError(f"filters.item_ids: at most {MAX_ITEM_IDS:,} ids, got {len(clean[key]):,}; "
                                 "select by status, confidence or time instead, or export in parts")
    if clean.get("confidence_min", 0.0) > clean.get("confidence_max", 1.0):
        raise ValueError("filters: confidence_min is greater than confidence_max, so nothing can match")
    if len(moments) == 2 and moments["after"] >= moments["before"]:
        raise ValueError("filters: 'after' is not earlier than 'before', so nothing can match")
    return clean


def selected_answers(project: Project, filters: dict) -> QuerySet[Answer]:
    """The final target answers of `project` that `filters` (already validated) select, in id order."""
    answers = Answer.objects.filter(project=project, kind=AnswerKind.TARGET)
    if "reviewers" in filters:
        answers = answers.filter(reviewer__username__in=filters["reviewers"])
    if "after" in filters:
        answers = answers.filter(updated_at__gte=datetime.fromisoformat(filters["after"]))
    if "before" in filters:
        answers = answers.filter(updated_at__lt=datetime.fromisoformat(filters["before"]))
    if "confidence_min" in filters:
        answers = answers.filter(item__confidence__gte=filters["confidence_min"])
    if "confidence_max" in filters:
        answers = answers.filter(item__confidence__lte=filters["confidence_max"])
    if "item_status" in filters:
        answers = answers.filter(item__status=filters["item_status"])
    if "item_ids" in filters:
        answers = answers.filter(item_id__in=filters["item_ids"])
    return answers.order_by("id")


def selected_records(project: Project, filters: dict) -> Iterator[Answer | Adjudication]:
    """What an export writes: the selected answers, except that an item with an adjudication contributes its
    adjudicated target once (source `adjudication:<project>/<item>/<admin>`) instead of its reviewers' answers.

    The filters select answers; an adjudicated item is exported when any of its answers is selected. Answers
    come first in id order, then adjudications in item order; both have `item`, `target` and `source`.
    """
    plain, adjudicated = selected_parts(project, filters)
    yield from plain.select_related("item", "reviewer").iterator(chunk_size=CHUNK)
    yield from adjudicated.iterator(chunk_size=CHUNK)


def selected_count(project: Project, filters: dict) -> int:
    """How many records `selected_records` yields."""
    plain, adjudicated = selected_parts(project, filters)
    return plain.count() + adjudicated.count()


def selected_parts(project: Project, filters: dict) -> tuple[QuerySet[Answer], QuerySet[Adjudication]]:
    """`selected_records` in its two parts: answers of items without an adjudication, and the adjudications.

    The one selection rule of exports and training jobs (`trainingjobs.snapshot` freezes these at launch).
    """
    answers = selected_answers(project, filters)
    plain = answers.filter(item__adjudication__isnull=True)
    if filters.get("agreed_only"):
        # An adjudicated item stays: its admin settled the disagreement, and it contributes that target only.
        plain = plain.filter(item__disagreement=False)
    adjudicated = Adjudication.objects.filter(item__in=answers.values("item_id")).select_related("item", "adjudicator")
    return plain, adjudicated.order_by("item_id")


def open_disagreements(project: Project) -> tuple[int, int]:
    """(items, their final target answers) that `agreed_only` leaves out: items whose reviewers disagree and that
    no admin has adjudicated. Two index ranges (`item_disagreement`), for the forms that offer the filter."""
    items = project.items.filter(disagreement=True, adjudication__isnull=True)
    answers = Answer.objects.filter(item__in=items, kind=AnswerKind.TARGET).count()
    return items.count(), answers


def create_export(project: Project, user, *, filters: Any = None, minibatch_size: int = 32,
                  format: str = ExportFormat.EXPERIENCE, enqueue: bool = True) -> Export:
    """Validate, count and record an export, and queue its task when the transaction commits.

    Raises `ValueError` for bad filters or minibatch size, `NothingSelected` when nothing matches.
    """
    from annotate import tasks

    clean = validate_filters(filters)
    if type(minibatch_size) is not int or not 1 <= minibatch_size <= MAX_MINIBATCH:
        raise ValueError(f"minibatch_size: expected an integer from 1 to {MAX_MINIBATCH}, got {minibatch_size!r}")
    if format not in ExportFormat.values:
        raise ValueError(f"format: expected one of {', '.join(ExportFormat.values)}, got {format!r}")
    total = selected_count(project, clean)
    if total == 0:
        raise NothingSelected("export: no reviewed answers match these filters, so there is nothing to export")
    with transaction.atomic():
        export = Export.objects.create(project=project, requested_by=user if getattr(user, "pk", None) else None,
                                       filters=clean, minibatch_size=minibatch_size, format=format, total=total)
        if enqueue:
            tasks.run_export.delay_on_commit(export.pk)
    return export


class LeaseLost(Exception):
    """Another run took this export over: this one wrote no progress for `Export.LEASE` and was taken for dead."""


def run(export: Export) -> Export:
    """Write the export's files; returns the export as this run left it.

    Safe to run twice: a finished export is left alone, and so is one whose run is alive (its heartbeat is
    younger than `Export.LEASE`). A PENDING, FAILED or stalled export is taken over and started again. Each run
    writes into a directory of its own and moves its files into place under the row's lock, only while it
    still holds the export: a run taken for dead that comes back writes nothing over the one that took over.
    """
    token = secrets.token_hex(8)
    with transaction.atomic():
        locked = Export.objects.select_for_update().select_related("project").filter(pk=export.pk).first()
        if locked is None:
            return export  # deleted (in the Django admin) since its task was sent
        export = locked
        if export.state == ExportState.SUCCEEDED or (export.state == ExportState.RUNNING and not export.stalled):
            return export
        now = timezone.now()
        export.state, export.started_at, export.heartbeat_at, export.run_token = ExportState.RUNNING, now, now, token
        export.done, export.error, export.files, export.finished_at = 0, "", [], None
        export.save(update_fields=["state", "started_at", "heartbeat_at", "run_token", "done", "error", "files",
                                   "finished_at"])
    directory = storage.artifact_dir("exports", export.pk)
    for leftover in directory.iterdir():  # an earlier run's files, finished or not: this run writes them all
        shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink(missing_ok=True)
    partial = directory / f".partial-{token}"
    partial.mkdir()
    try:
        manifest = _write_files(export, partial, token)
        names = [entry["name"] for entry in manifest["files"]] + [JSONL]
        storage.write_once(partial / MANIFEST, json.dumps(manifest, indent=2).encode())
        _write_archive(partial, export.pk, [*names, MANIFEST])
        # The parts, the JSONL and the archive were written without an fsync each: made durable here at once,
        # before the row can say they are there.
        storage.make_durable(partial, [*names, archive_name(export.pk)])
        with transaction.atomic():
            if not Export.objects.select_for_update().filter(pk=export.pk, run_token=token).exists():
                raise LeaseLost
            for name in [*names, MANIFEST, archive_name(export.pk)]:
                (partial / name).replace(directory / name)
            storage.sync_directory(directory)
            Export.objects.filter(pk=export.pk).update(
                state=ExportState.SUCCEEDED, done=manifest["examples"], total=manifest["examples"],
                files=[*names, MANIFEST, archive_name(export.pk)], finished_at=timezone.now(),
            )
    except LeaseLost:
        logger.warning("export %s: another run took it over; this one stopped", export.pk)
    except Exception as exc:
        failed = Export.objects.filter(pk=export.pk, run_token=token).update(
            state=ExportState.FAILED, error=f"{type(exc).__name__}: {exc}"[:2000], finished_at=timezone.now()
        )
        if failed:
            raise
        logger.warning("export %s: a run taken over failed (%s: %s)", export.pk, type(exc).__name__, exc)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return Export.objects.filter(pk=export.pk).first() or export  # gone if a run taken for dead outlived its project


def archive_name(export_id: int) -> str:
    return f"export-{export_id}.zip"


def archive_path(export: Export) -> Path:
    """The zip of a finished export (what the download link serves)."""
    return export.directory / archive_name(export.pk)


def jsonl_record(answer: Answer | Adjudication) -> dict:
    """One line of the flat export. An adjudicated target names its admin as `reviewer` and its kind as
    `adjudication`; a distribution also lists the candidate ids its values belong to, in order."""
    if isinstance(answer, Adjudication):
        record = {"item": answer.item_id, "inputs": answer.item.inputs, "target": answer.target,
                  "source": answer.source, "reviewer": answer.adjudicator.get_username(),
                  "adjudication": answer.kind}
        if answer.kind == AdjudicationKind.DISTRIBUTION:
            record["candidates"] = agreement.candidate_ids(answer.item.inputs)
        return {**record, "created_at": answer.created_at.isoformat(), "updated_at": answer.updated_at.isoformat()}
    return _jsonl_record((answer.item_id, answer.item.inputs, answer.target, answer.source,
                          answer.reviewer.get_username(), answer.created_at, answer.updated_at))


# -- internals -------------------------------------------------------------------------------------------------
def _entries(project: Project, filters: dict) -> Iterator[tuple[dict, Any, Any, str]]:
    """`selected_records` as `(JSONL record, inputs, target, source)`, in the same order.

    Plain answers are read as tuples of the columns written, not model instances: at 100,000 answers building
    three model objects per row (answer, item, reviewer) costs more than the database does.
    """
    plain, adjudicated = selected_parts(project, filters)
    for row in plain.values_list(*_ROW).iterator(chunk_size=CHUNK):
        yield _jsonl_record(row), row[1], row[2], row[3]
    for adjudication in adjudicated.iterator(chunk_size=CHUNK):
        yield jsonl_record(adjudication), adjudication.item.inputs, adjudication.target, adjudication.source


def _write_files(export: Export, partial: Path, token: str) -> dict:
    project = export.project
    experience = export.format == ExportFormat.EXPERIENCE
    trainer = tooling.trainer_for_project(project) if experience else None
    # Each experience file is saved in a directory of its own and then moved beside the others: an atomic save
    # looks through its directory for abandoned temporaries, so saving among thousands of finished parts
    # would make the export quadratic in its number of files.
    scratch = partial / ".saving"
    scratch.mkdir()
    files: list[dict] = []
    done = 0
    next_report = time.monotonic()
    with (partial / JSONL).open("w", encoding="utf-8") as jsonl, _Captures(trainer, project.mode) as captures:
        for batch in _minibatches(_entries(project, export.filters), export.minibatch_size):
            jsonl.write("".join(json.dumps(entry[0], ensure_ascii=False) + "\n" for entry in batch))
            if experience:
                name = f"part-{len(files) + 1:05d}.json"
                done += captures.submit(
                    [entry[1] for entry in batch], [entry[2] for entry in batch], [entry[3] for entry in batch],
                    scratch / name, partial / name,
                )
                files.append({"name": name, "examples": len(batch), "first_item": batch[0][0]["item"],
                              "last_item": batch[-1][0]["item"]})
            else:
                done += len(batch)
            if time.monotonic() >= next_report:  # progress at most twice a second: each update is a commit
                if not Export.objects.filter(pk=export.pk, run_token=token).update(
                        done=done, total=max(done, export.total), heartbeat_at=timezone.now()):
                    raise LeaseLost
                next_report = time.monotonic() + PROGRESS_SECONDS
        done += captures.finish()
    scratch.rmdir()
    if done == 0:
        raise NothingSelected("export: no reviewed answers match these filters any more")
    version = project.current_version
    return {
        "format": FORMAT,
        "version": VERSION,
        "export": export.pk,
        "project": project.slug,
        "tool": project.tool,
        "mode": project.mode,
        # The files bind to the tool that captured them (the current version's); the project's configuration is
        # only where a fresh tool starts, and may have been changed since that version was made.
        "configuration": trainer.tool.configuration() if experience else project.configuration,
        "model_version": version.pk if version else None,
        "filters": export.filters,
        "minibatch_size": export.minibatch_size,
        "examples": done,
        "files": files,
        "jsonl": JSONL,
        "created_at": timezone.now().isoformat(),
        "how_to_load": "tensorcode.training.load_experience(path, "
                       "operations=Trainer.from_tool(<the project's tool>).operations)",
    }


def _jsonl_record(row: tuple) -> dict:
    item, inputs, target, source, reviewer, created_at, updated_at = row
    return {"item": item, "inputs": inputs, "target": target, "source": source, "reviewer": reviewer,
            "created_at": created_at.isoformat(), "updated_at": updated_at.isoformat()}


class _Captures:
    """Captures minibatches into experience files, in this process and `TC_EXPORT_PROCESSES - 1` forked ones.

    Capturing runs the model on every minibatch and is most of an export's time; it is CPU-bound, so on a
    machine with several cores minibatches are captured in parallel: each goes to a worker process when one
    is free, and is captured here otherwise, between reading answers and writing JSONL. The workers are forked
    when the second minibatch arrives (a one-minibatch export is not worth a fork), after this process has
    captured the first, so they share its trainer, its imports and what the model's first run set up, page for
    page (torch alone is 190 MB a process), and never touch the database. A file is complete once its capture
    returns; a capture that fails, or a worker that dies, fails the export with the reason.
    """

    def __init__(self, trainer, mode: str):
        self.trainer, self.mode = trainer, mode
        self.workers = max(0, settings.TC_EXPORT_PROCESSES - 1)
        self.pool: ProcessPoolExecutor | None = None
        self.pending: deque[tuple[Future, int, str]] = deque()
        self.held: tuple | None = None  # the first minibatch, until a second shows the export needs workers

    def submit(self, inputs: list, targets: list, sources: list[str], saving: Path, final: Path) -> int:
        """Capture one minibatch into `final` (saved at `saving` first); returns the examples finished now."""
        part = (self.mode, inputs, targets, sources, saving, final)
        if not self.workers:
            _capture_part(self.trainer, *part)
            return len(inputs)
        if self.pool is None and self.held is None:
            self.held = part
            return 0
        if self.pool is None:
            # The first minibatch is captured here before forking: the model's first run sets up what it needs
            # lazily (about 10 MB), and workers forked after it share that instead of each making their own.
            _capture_part(self.trainer, *self.held)
            finished, self.held = len(self.held[1]), None
            gc.freeze()  # the workers' collections leave the inherited objects (and so their pages) alone
            self.pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("fork"),
                                            initializer=_adopt_trainer, initargs=(self.trainer, os.getpid()))
            with _forking_allowed():
                self._send(part)  # the first task forks every worker
            return finished
        finished = 0
        while self.pending and self.pending[0][0].done():
            finished += self._oldest()
        if len(self.pending) < 2 * self.workers:  # one running and one waiting: a worker never idles
            self._send(part)
        else:  # the workers have enough to do: this process captures this one
            _capture_part(self.trainer, *part)
            finished += len(inputs)
        return finished

    def finish(self) -> int:
        """Capture a held minibatch and wait for every capture still running; returns the examples finished."""
        if self.held is not None:
            _capture_part(self.trainer, *self.held)
            finished, self.held = len(self.held[1]), None
            return finished
        finished = 0
        while self.pending:
            finished += self._oldest()
        return finished

    def _send(self, part: tuple) -> None:
        future = self.pool.submit(_capture_in_worker, *part)
        self.pending.append((future, len(part[1]), part[-1].name))

    def _oldest(self) -> int:
        future, examples, name = self.pending.popleft()
        try:
            future.result()  # a worker's own exception is raised here as it was raised there
        except BrokenProcessPool as exc:
            raise RuntimeError(f"a capture process died (killed, or out of memory?) while {name} or a part "
                               "beside it was being written") from exc
        return examples

    def __enter__(self) -> _Captures:
        return self

    def __exit__(self, *exc) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            gc.unfreeze()


@contextlib.contextmanager
def _forking_allowed():
    """Let a daemonic process, such as a Celery prefork pool's child (the CPU workers' default), fork workers.

    `multiprocessing` refuses children to a daemonic process so that none outlives it. Capture workers die with
    the process that forked them (`_exit_with_parent`) and are joined before its export returns, so here the
    refusal would guard nothing and only make every export from a prefork worker run on one core.
    """
    config = multiprocessing.current_process()._config
    daemon = config.pop("daemon", None)
    try:
        yield
    finally:
        if daemon is not None:
            config["daemon"] = daemon


_worker_trainer = None  # the trainer a forked capture worker inherited (`_adopt_trainer`)


def _adopt_trainer(trainer, exporting: int) -> None:
    global _worker_trainer
    import torch

    _exit_with_parent(exporting)
    torch.set_num_threads(1)  # one core per worker: the workers are the parallelism
    _worker_trainer = trainer


def _exit_with_parent(parent: int) -> None:
    """Linux: die with the process `parent` that forked this one. A worker waits on a queue whose writing end
    it holds too, so it would otherwise outlive an exporting process that was killed, waiting forever."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: nothing to arrange
        return
    if os.getppid() != parent:  # it died before the line above
        os._exit(1)


def _capture_part(trainer, mode: str, inputs: list, targets: list, sources: list[str], saving: Path,
                  final: Path) -> None:
    tooling.capture_experience(trainer, mode, inputs, targets, sources, saving, durable=False)  # `run` syncs them
    saving.replace(final)


def _capture_in_worker(*part) -> None:
    """`_capture_part` in a forked worker, with the trainer it inherited."""
    _capture_part(_worker_trainer, *part)


def _minibatches(entries: Iterator[tuple], size: int) -> Iterator[list[tuple]]:
    batch: list[tuple] = []
    for entry in entries:
        batch.append(entry)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _write_archive(directory: Path, export_id: int, names: list[str]) -> None:
    """`export-<id>.zip` of `names` in `directory`, beside them."""
    target = directory / archive_name(export_id)
    temporary = directory / f".{target.name}.tmp"
    with zipfile.ZipFile(temporary, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in names:
            archive.write(directory / name, arcname=f"export-{export_id}/{name}")
    temporary.replace(target)
