"""A job's data: frozen at launch as revisions, written by the worker as the job's own experience files.

Launching records which reviewed answers the job uses by the ids of their current revisions (revisions are
never changed), split into training and held-out records by item. An adjudicated item contributes its
adjudicated target instead of its reviewers' answers, as an export does (`annotate.export.selected_parts`),
frozen as the id of the adjudication revision current at launch. The worker then captures those records with
a version's trainer into `jobs/<id>/data/train/` and `jobs/<id>/data/held_out/` (one experience file per
minibatch, as an export does; the held-out part only once training is done, so that it does not delay the
first step), so labels given, edited or adjudicated after launch never change a job, and a job can be re-run
exactly.

A launch may also include the project's accepted experience uploads (files traced by the admins' own programs),
frozen as their ids. They are training data only: the worker copies each into the train part as one more
minibatch, after loading the copy with the library's safe loader against the base version's tool.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db.models import Max

MANIFEST = "manifest.json"
ANSWER, ADJUDICATION = "answer", "adjudication"


@dataclass(frozen=True)
class Selected:
    """One record a launch freezes: an answer revision or an adjudication revision (`kind`) of an item."""

    item_id: int
    kind: str
    revision_id: int


@dataclass(frozen=True)
class Record:
    """One frozen record as the job trains on it."""

    item_id: int
    inputs: Any
    target: Any
    source: str


def select_records(project, filters: dict | None = None) -> list[Selected]:
    """What an export of `filters` would write, as revisions current now, in item order.

    The current revision of each final target answer of an item without an adjudication, and the current
    revision of each selected item's adjudication. Filters are the export's (`annotate.export.validate_filters`;
    already validated).
    """
    from annotate import export
    from annotate.models import AdjudicationRevision, AnswerKind, AnswerRevision

    plain, adjudicated = export.selected_parts(project, filters or {})
    latest = (
        AnswerRevision.objects.filter(answer__in=plain)
        .values("answer_id")
        .annotate(last=Max("id"))
        .values_list("last", flat=True)
    )
    answers = (
        AnswerRevision.objects.filter(pk__in=latest, kind=AnswerKind.TARGET)  # a subquery: any count of answers
        .order_by("answer__item_id", "answer_id")
        .values_list("answer__item_id", "id")
    )
    adjudications = (
        AdjudicationRevision.objects.filter(adjudication__in=adjudicated.values("pk"))
        .values("adjudication__item_id")
        .annotate(last=Max("id"))
        .values_list("adjudication__item_id", "last")
    )
    selected = [Selected(item, ANSWER, pk) for item, pk in answers]
    selected += [Selected(item, ADJUDICATION, pk) for item, pk in adjudications]
    # Stable: an item's answers keep their answer order; an adjudicated item has no answers here.
    return sorted(selected, key=lambda record: record.item_id)


def count(project, filters: dict | None = None) -> tuple[int, int]:
    """(records, of which adjudicated targets) that a launch with `filters` would freeze now, for the page."""
    from annotate import export

    plain, adjudicated = export.selected_parts(project, filters or {})
    adjudications = adjudicated.count()
    return plain.count() + adjudications, adjudications


def accepted_uploads(project):
    """The project's accepted experience uploads, oldest first: what a launch that includes uploads freezes."""
    from annotate.models import UploadState

    return project.experience_uploads.filter(state=UploadState.ACCEPTED).order_by("pk")


def count_uploads(project) -> tuple[int, int]:
    """(accepted upload files, supervision records in them) that a launch including uploads would freeze now."""
    uploads = list(accepted_uploads(project).values_list("summary", flat=True))
    return len(uploads), sum(_supervisions(summary) for summary in uploads)


def select_uploads(project) -> dict:
    """The job's frozen upload fields (`train_uploads`, `upload_records`) for the accepted uploads now.

    The rows stay locked until the launch commits: a removal (`imports.remove_upload`) locks its row before it
    looks for jobs that froze it, so it either sees this job or is done before the launch reads the rows.
    """
    rows = list(accepted_uploads(project).select_for_update().values_list("pk", "summary"))
    return {"train_uploads": [pk for pk, _ in rows], "upload_records": sum(_supervisions(s) for _, s in rows)}


def split(records: list[Selected], held_out_fraction: float, seed: int) -> dict[str, list[int]]:
    """The job's frozen fields (`train_records`, `held_out_records`, `train_adjudications`,
    `held_out_adjudications`): revision ids split by item (all records of an item on one side).

    At least one item is held out when the fraction is positive and there are two items or more; at least one
    item is always trained on.
    """
    by_item: dict[int, list[Selected]] = {}
    for record in records:
        by_item.setdefault(record.item_id, []).append(record)
    items = sorted(by_item)
    random.Random(seed).shuffle(items)
    held = 0
    if held_out_fraction > 0 and len(items) >= 2:
        held = min(len(items) - 1, max(1, math.floor(held_out_fraction * len(items) + 0.5)))
    held_items = set(items[:held])
    parts: dict[str, list[int]] = {"train_records": [], "held_out_records": [], "train_adjudications": [],
                                   "held_out_adjudications": []}
    for item in sorted(by_item):
        side = "held_out" if item in held_items else "train"
        for record in by_item[item]:
            parts[f"{side}_{'records' if record.kind == ANSWER else 'adjudications'}"].append(record.revision_id)
    return parts


def ensure(job, version, part: str) -> list[Path]:
    """The experience files of `part` ("train" | "held_out"), captured on first use with `version`'s trainer.

    Capturing records inputs and targets, not weights, so any version of the job's configuration will do.
    """
    root = job.directory / "data" / part
    if not (root / MANIFEST).is_file():
        _write(job, version, part, root)
    return [root / name for name in json.loads((root / MANIFEST).read_text())["files"]]


def held_out_examples(job) -> list[tuple[int, object, object]]:
    """(item id, inputs, reviewed or adjudicated target) of each held-out record, in the frozen order."""
    return [(r.item_id, r.inputs, r.target) for r in _records(job, "held_out")]


def _write(job, version, part: str, root: Path) -> None:
    from annotate import storage, tooling
    from trainingjobs.runner import JobFailed

    expected = job.train_count if part == "train" else job.held_out_count
    uploads = _uploads(job) if part == "train" else []  # checked before anything is captured
    if part == "train" and not expected and not uploads:
        raise JobFailed("the job has no reviewed records to train on; review items first, then launch again")
    records = _records(job, part)
    if len(records) != expected:
        raise JobFailed(f"{expected - len(records)} of the job's frozen {part} records no longer exist")
    trainer = tooling.trainer_for(version)
    root.parent.mkdir(parents=True, exist_ok=True)
    # Written into a temporary sibling and published by renaming, so a crash never leaves a partial snapshot.
    staging = Path(tempfile.mkdtemp(dir=root.parent, prefix=f".{part}-"))
    try:
        names = []
        for index in range(0, len(records), job.minibatch_size):
            batch = records[index : index + job.minibatch_size]
            name = f"{part}-{index // job.minibatch_size:05d}.json"
            try:
                tooling.capture_experience(
                    trainer,
                    job.project.mode,
                    [r.inputs for r in batch],
                    [r.target for r in batch],
                    [r.source for r in batch],
                    staging / name,
                    durable=False,  # all of the snapshot at once, below
                )
            except ValueError as exc:
                raise JobFailed(
                    f"cannot capture {part} records of items {batch[0].item_id}..{batch[-1].item_id}: {exc}"
                ) from exc
            names.append(name)
        for upload in uploads:
            names.append(_copy_upload(trainer, upload, staging))
        manifest = {"files": names, "records": getattr(job, f"{part}_records"),
                    "adjudications": getattr(job, f"{part}_adjudications")}
        if uploads:
            manifest["uploads"] = [upload.pk for upload in uploads]
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1))
        # On disk before it is published: `ensure` takes a snapshot whose manifest is there as complete.
        storage.make_durable(staging, [*names, MANIFEST])
        os.replace(staging, root)
        storage.sync_directory(root.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _records(job, part: str) -> list[Record]:
    """The frozen records of `part` that still exist, in item order (an item's answers in their frozen order)."""
    from annotate.models import AdjudicationRevision, AnswerRevision

    answer_ids, adjudication_ids = getattr(job, f"{part}_records"), getattr(job, f"{part}_adjudications")
    answers = AnswerRevision.objects.select_related("answer__item").in_bulk(answer_ids)
    adjudications = AdjudicationRevision.objects.select_related("adjudication__item", "adjudicator").in_bulk(
        adjudication_ids
    )
    records = [Record(r.answer.item_id, r.answer.item.inputs, r.target, r.answer.source)
               for r in (answers[pk] for pk in answer_ids if pk in answers)]
    # The source names the admin of the frozen revision, not whoever adjudicated the item last.
    records += [Record(r.adjudication.item_id, r.adjudication.item.inputs, r.target,
                       job.project.adjudication_source_for(r.adjudication.item_id, r.adjudicator))
                for r in (adjudications[pk] for pk in adjudication_ids if pk in adjudications)]
    return sorted(records, key=lambda record: record.item_id)  # stable: frozen answer order within an item


def _uploads(job) -> list:
    """The job's frozen experience uploads, in frozen order; JobFailed naming the first one that is gone."""
    from annotate.models import ExperienceUpload
    from trainingjobs.runner import JobFailed

    found = ExperienceUpload.objects.in_bulk(job.train_uploads)
    uploads = []
    for pk in job.train_uploads:
        upload = found.get(pk)
        if upload is None or upload.project_id != job.project_id:
            raise JobFailed(f"experience upload {pk} was deleted after the job was launched; "
                            "launch a new job to train on the uploads there are now")
        if not upload.path.is_file():
            raise JobFailed(f"the file of experience upload {pk} ({_name(upload)}) is gone from "
                            f"uploads/{pk}/; launch a new job to train on the uploads there are now")
        uploads.append(upload)
    return uploads


def _copy_upload(trainer, upload, staging: Path) -> str:
    """Copy an upload's file into the staging snapshot and load the copy with the library's safe loader.

    The copy is what the job replays, so it is the copy that must bind to the base version's tool: a base
    version of another configuration than the one the upload was checked against fails here, naming the upload,
    rather than midway through training.
    """
    from annotate import tooling
    from tensorcode import ExperienceError, TraceError
    from trainingjobs.runner import JobFailed

    name = f"upload-{upload.pk:05d}.json"
    try:
        shutil.copyfile(upload.path, staging / name)
    except OSError as exc:
        raise JobFailed(f"cannot copy experience upload {upload.pk} ({_name(upload)}): {exc.strerror or exc}") from exc
    try:
        loaded = tooling.load_experience(trainer, staging / name)
    except (ExperienceError, TraceError, ValueError, TypeError, RecursionError) as exc:
        raise JobFailed(f"experience upload {upload.pk} ({_name(upload)}) does not load against the base "
                        f"version's tool: {exc}") from exc
    if not loaded.supervisions:
        raise JobFailed(f"experience upload {upload.pk} ({_name(upload)}) has no supervision records")
    return name


def _name(upload) -> str:
    return upload.original_name or "unnamed"


def _supervisions(summary) -> int:
    count = summary.get("supervisions", 0) if isinstance(summary, dict) else 0
    return count if isinstance(count, int) and count > 0 else 0
