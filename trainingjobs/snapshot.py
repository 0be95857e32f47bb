"""A job's data: frozen at launch as answer revisions, written by the worker as the job's own experience files.

Launching records which reviewed answers the job uses by the ids of their current revisions (revisions are
never changed), split into training and held-out records by item. The worker then captures those records with
a version's trainer into `jobs/<id>/data/train/` and `jobs/<id>/data/held_out/` (one experience file per
minibatch, as an export does; the held-out part only once training is done, so that it does not delay the
first step), so labels given or edited after launch never change a job, and a job can be re-run exactly.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import tempfile
from pathlib import Path

from django.db.models import Max

MANIFEST = "manifest.json"


def select_records(project, filters: dict | None = None):
    """The current revision of each final target answer that the export `filters` select, by item.

    Filters are the export's (`annotate.export.validate_filters`; already validated).
    """
    from annotate import export
    from annotate.models import AnswerKind, AnswerRevision

    answers = export.selected_answers(project, filters or {})
    latest = (
        AnswerRevision.objects.filter(answer__in=answers)
        .values("answer_id")
        .annotate(last=Max("id"))
        .values_list("last", flat=True)
    )
    return (
        AnswerRevision.objects.filter(pk__in=list(latest), kind=AnswerKind.TARGET)
        .select_related("answer__item")
        .order_by("answer__item_id", "answer_id")
    )


def split(records, held_out_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Revision ids for training and for evaluation, split by item (all answers of an item on one side).

    At least one item is held out when the fraction is positive and there are two items or more; at least one
    item is always trained on.
    """
    by_item: dict[int, list[int]] = {}
    for record in records:
        by_item.setdefault(record.answer.item_id, []).append(record.pk)
    items = sorted(by_item)
    random.Random(seed).shuffle(items)
    held = 0
    if held_out_fraction > 0 and len(items) >= 2:
        held = min(len(items) - 1, max(1, math.floor(held_out_fraction * len(items) + 0.5)))
    held_items = set(items[:held])
    train = [pk for item in sorted(by_item) if item not in held_items for pk in by_item[item]]
    held_out = [pk for item in sorted(held_items) for pk in by_item[item]]
    return train, held_out


def ensure(job, version, part: str) -> list[Path]:
    """The experience files of `part` ("train" | "held_out"), captured on first use with `version`'s trainer.

    Capturing records inputs and targets, not weights, so any version of the job's configuration will do.
    """
    root = job.directory / "data" / part
    if not (root / MANIFEST).is_file():
        _write(job, version, part, root)
    return [root / name for name in json.loads((root / MANIFEST).read_text())["files"]]


def held_out_examples(job) -> list[tuple[int, object, object]]:
    """(item id, inputs, reviewed target) of each held-out record, in the frozen order."""
    return [(r.answer.item_id, r.answer.item.inputs, r.target) for r in _records(job.held_out_records)]


def _write(job, version, part: str, root: Path) -> None:
    from annotate import tooling
    from trainingjobs.runner import JobFailed

    ids = job.train_records if part == "train" else job.held_out_records
    if part == "train" and not ids:
        raise JobFailed("the job has no reviewed records to train on; review items first, then launch again")
    records = _records(ids)
    if len(records) != len(ids):
        raise JobFailed(f"{len(ids) - len(records)} of the job's frozen {part} records no longer exist")
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
                    [r.answer.item.inputs for r in batch],
                    [r.target for r in batch],
                    [r.answer.source for r in batch],
                    staging / name,
                )
            except ValueError as exc:
                raise JobFailed(f"cannot capture {part} records {batch[0].pk}..{batch[-1].pk}: {exc}") from exc
            names.append(name)
        (staging / MANIFEST).write_text(json.dumps({"files": names, "records": ids}, indent=1))
        os.replace(staging, root)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _records(ids: list[int]) -> list:
    from annotate.models import AnswerRevision

    rows = AnswerRevision.objects.select_related("answer__item").in_bulk(ids)
    return [rows[pk] for pk in ids if pk in rows]
