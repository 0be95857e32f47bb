"""What an Investigator accepts: the mode envelope, each mode's inputs and targets, validated up front.

Every function here returns plain, normalized JSON-safe data (or raises ``ValueError`` naming the field), so a
capture can be refused before anything is recorded and the recorded batch replays from its JSON form.
"""

from __future__ import annotations

from typing import Any

import torch

from ._ranking import check_text as text

MODES = ("rank", "verification", "proposal", "retrieval")
LABELS = ("entailment", "neutral", "contradiction")


def envelope(inputs: Any, modes: list[str]) -> tuple[str, Any]:
    """``(mode, payload)``: ``{"mode", "inputs"}`` selects a mode, anything else is ranking input.

    A list of envelopes of one mode, each holding one example, is a batch of that mode (payload: the list of
    their examples), so reviewed examples can be collected one envelope at a time.
    """
    if isinstance(inputs, dict) and "mode" in inputs:
        return _open(inputs, modes, "inputs")
    if isinstance(inputs, (list, tuple)) and any(isinstance(x, dict) and "mode" in x for x in inputs):
        opened = []
        for i, item in enumerate(inputs):
            if not (isinstance(item, dict) and "mode" in item):
                raise ValueError(f"inputs[{i}]: a batch of envelopes needs an envelope {{'mode', 'inputs'}} here")
            mode, payload = _open(item, modes, f"inputs[{i}]")
            if opened and mode != opened[0][0]:
                raise ValueError(f"inputs[{i}]['mode']: a batch holds one mode; got {mode!r} after {opened[0][0]!r}")
            if not isinstance(payload, dict):
                raise ValueError(f"inputs[{i}]['inputs']: each envelope of a batch holds one example (a mapping)")
            opened.append((mode, payload))
        return opened[0][0], [payload for _, payload in opened]
    if "rank" not in modes:
        raise ValueError(f"mode: plain inputs select 'rank', which is not enabled; configuration 'modes' are {modes}")
    return "rank", inputs


def _open(inputs: dict, modes: list[str], field: str) -> tuple[str, Any]:
    extra = sorted(str(k) for k in set(inputs) - {"mode", "inputs"})
    if extra:
        raise ValueError(f"{field}: unknown envelope key {extra[0]!r}; valid keys: inputs, mode")
    mode = inputs["mode"]
    if mode not in MODES:
        raise ValueError(f"{field}['mode']: unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
    if mode not in modes:
        raise ValueError(
            f"{field}['mode']: {mode!r} is not enabled in this Investigator; its configuration 'modes' are {modes}"
        )
    if "inputs" not in inputs:
        raise ValueError(f"{field}: the envelope has no 'inputs'")
    return mode, inputs["inputs"]


def batch(payload: Any, field: str = "inputs") -> tuple[list, bool]:
    """``(items, batched)``: a list is a batch of items, a mapping is one item."""
    if isinstance(payload, dict):
        return [payload], False
    if isinstance(payload, (list, tuple)):
        if not payload:
            raise ValueError(f"{field}: empty batch; supply at least one example")
        return list(payload), True
    raise ValueError(f"{field}: expected a mapping (one example) or a list of them, got {type(payload).__name__}")


def targets_for(targets: Any, count: int, batched: bool, field: str = "targets") -> list:
    """One target per example: a batch needs an equal-length list."""
    if not batched:
        return [targets]
    if not isinstance(targets, (list, tuple)):
        raise ValueError(f"{field} must be a list with one target per example ({count}), got {type(targets).__name__}")
    if len(targets) != count:
        raise ValueError(f"{field}: expected {count} targets (one per example), got {len(targets)}")
    return list(targets)


def _mapping(value: Any, field: str, keys: tuple[str, ...]) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{field}: expected a mapping with keys {', '.join(keys)}; got {type(value).__name__}")
    unknown = sorted(str(k) for k in set(value) - set(keys))
    if unknown:
        raise ValueError(f"{field}: unknown key {unknown[0]!r}; valid keys: {', '.join(keys)}")
    for key in keys:
        if key not in value:
            raise ValueError(f"{field}: missing {key!r}")
    return value


def records(value: Any, field: str) -> list[dict]:
    """Nonempty ``[{"source_id", "text"}]`` with distinct ids, normalized."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{field}: expected a list of {{'source_id', 'text'}} mappings, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{field}: needs at least one record")
    seen: set[str] = set()
    out = []
    for i, record in enumerate(value):
        where = f"{field}[{i}]"
        _mapping(record, where, ("source_id", "text"))
        ident = text(record["source_id"], f"{where}['source_id']")
        if ident in seen:
            raise ValueError(f"{where}['source_id']: duplicate id {ident!r}")
        seen.add(ident)
        out.append({"source_id": ident, "text": text(record["text"], f"{where}['text']")})
    return out


def pair(value: Any, field: str) -> dict:
    _mapping(value, field, ("premise", "hypothesis"))
    return {"premise": text(value["premise"], f"{field}['premise']"),
            "hypothesis": text(value["hypothesis"], f"{field}['hypothesis']")}


def label(value: Any, field: str) -> str:
    if not isinstance(value, str) or value not in LABELS:
        raise ValueError(f"{field}: verification targets are named NLI labels {list(LABELS)}, got {value!r}")
    return value


def proposal_target(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise ValueError(
            f"{field}: a proposal target is reviewed hypothesis text (a string), got {type(value).__name__}"
        )
    return text(value, field)


def retrieval_group(value: Any, field: str) -> dict:
    _mapping(value, field, ("queries", "documents"))
    group = {}
    for key in ("queries", "documents"):
        items = value[key]
        if not isinstance(items, (list, tuple)) or not items:
            raise ValueError(f"{field}[{key!r}]: expected a nonempty list of texts")
        group[key] = [text(item, f"{field}[{key!r}][{i}]") for i, item in enumerate(items)]
    return group


def retrieval_mask(mask: Any, group: dict, field: str) -> list[list[bool]]:
    """A boolean ``[queries, documents]`` matrix with at least one positive per query."""
    shape = [len(group["queries"]), len(group["documents"])]
    if isinstance(mask, torch.Tensor):
        if mask.dtype != torch.bool:
            raise ValueError(
                f"{field}: expected a boolean mask, got {mask.dtype}; use `mask.bool()` if 1 marks a positive"
            )
        if list(mask.shape) != shape:
            raise ValueError(f"{field}: mask has shape {list(mask.shape)}, expected [queries, documents] = {shape}")
        mask = mask.cpu().tolist()
    if not isinstance(mask, (list, tuple)) or len(mask) != shape[0]:
        got = f"{len(mask)} rows" if isinstance(mask, (list, tuple)) else type(mask).__name__
        raise ValueError(f"{field}: expected a [queries, documents] = {shape} boolean mask, got {got}")
    rows = []
    for q, row in enumerate(mask):
        if not isinstance(row, (list, tuple)) or len(row) != shape[1]:
            raise ValueError(
                f"{field}[{q}]: expected {shape[1]} booleans (one per document); the mask's shape must be {shape}"
            )
        if not all(isinstance(v, bool) for v in row):
            raise ValueError(f"{field}[{q}]: expected booleans (True marks a positive document)")
        if not any(row):
            raise ValueError(f"{field}[{q}]: the row is all false; every query needs at least one positive document")
        rows.append(list(row))
    return rows
