"""What a finished job reports: base and new versions on the held-out records, and the answers that changed."""

from __future__ import annotations

import copy
import logging

from trainingjobs import snapshot

logger = logging.getLogger(__name__)

CHANGED_SHOWN = 50  # held-out items listed with their changed prediction


def compare(job, new_version, held_out: list) -> dict:
    """`{"held_out", "base", "new", "changed", "changed_count"}`; metrics are `training.evaluate` reports."""
    from annotate import tooling
    from tensorcode import training

    if not held_out:
        return {"held_out": 0, "note": "no held-out records (held-out fraction 0 or fewer than two items)"}
    paths = [str(path) for path in held_out]
    metrics: dict = {"held_out": job.held_out_count}
    base = job.base_version
    versions = {"new": new_version} | ({"base": base} if base is not None else {})
    for name, version in versions.items():
        # evaluate may switch modes; the loader's cached tool serves predictions and must stay as it is.
        metrics[name] = training.evaluate(copy.deepcopy(tooling.load_version(version)), paths)
    if base is None:
        metrics["base"] = None
        return metrics
    changed = changed_predictions(base, new_version, snapshot.held_out_examples(job))
    metrics["changed_count"] = len(changed)
    metrics["changed"] = changed[:CHANGED_SHOWN]
    return metrics


def changed_predictions(base, new_version, examples: list) -> list[dict]:
    """The held-out items whose predicted answer differs between `base` and `new_version`, one row per item.

    `examples` are (item id, inputs, target) per held-out record. An item several reviewers answered is several
    records (a project with overlap) but one prediction: it is predicted once, and its row lists each distinct
    reviewed target with how many records gave it, first given first."""
    by_item: dict[int, tuple[object, list[list]]] = {}
    for item_id, inputs, target in examples:
        _, targets = by_item.setdefault(item_id, (inputs, []))
        for entry in targets:
            if entry[0] == target:
                entry[1] += 1
                break
        else:
            targets.append([target, 1])
    items = list(by_item)
    inputs = [by_item[item_id][0] for item_id in items]
    before, after = _predict(base, inputs), _predict(new_version, inputs)
    changed = []
    for item_id, old, new in zip(items, before, after, strict=True):
        old_answer, new_answer = answer_of(old["receipt"]), answer_of(new["receipt"])
        if old_answer != new_answer:
            targets = by_item[item_id][1]
            changed.append(
                {
                    "item": item_id,
                    "target": targets[0][0],
                    "targets": [{"target": target, "records": n} for target, n in targets],
                    "before": old_answer,
                    "after": new_answer,
                    "before_confidence": old["confidence"],
                    "after_confidence": new["confidence"],
                }
            )
    return changed


def refit_calibration(job, tool) -> dict | None:
    """Refit an Investigator verifier's calibration on the held-out pairs (new weights make the old one stale).

    Returns the fit report, or None when the project is not an Investigator verifier or nothing is held out.
    """
    project = job.project
    if project.tool != "investigator" or project.mode != "verification" or not job.held_out_count:
        return None
    examples = snapshot.held_out_examples(job)
    report = tool.calibrate_verifier([example[1] for example in examples], [example[2] for example in examples])
    return _json_safe(report)


def _predict(version, inputs: list) -> list[dict]:
    """Receipts and confidences, without the trace summaries the item pages need (cheaper)."""
    from annotate import tooling
    from tensorcode import tools

    tool = tooling.load_version(version)
    receipts = [tooling.to_json(receipt) for receipt in tools.predict(tool, version.mode, inputs)]
    return [{"receipt": receipt, "confidence": tooling.confidence_of(receipt)} for receipt in receipts]


def answer_of(receipt: dict):
    """The part of a receipt that is the model's answer, compared between versions."""
    kind = receipt.get("kind")
    if kind == "generation":
        return receipt.get("text")
    if kind == "retrieval":
        return [query.get("selected_id") for query in receipt.get("queries", [])]
    return receipt.get("selected_id")


def _json_safe(report) -> dict:
    from annotate import tooling

    try:
        return tooling.to_json(dict(report))
    except (TypeError, ValueError):
        return {"report": str(report)}
