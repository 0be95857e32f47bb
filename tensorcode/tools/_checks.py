"""Pure checks of tool inputs and targets, shared by every tool and by ``tensorcode.tools.validate_target``.

Each function returns a normalized JSON-safe copy of what it checked, or raises ``ValueError`` whose message
starts with the field (``inputs['hypotheses'][1]['id']: duplicate id 'a'``). Nothing here imports torch: a
tensor argument (a distribution, a mask, pixels) is recognised only when torch is already loaded, which it must
be for the caller to hold a tensor.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

LABELS = ("entailment", "neutral", "contradiction")
SUM_TOLERANCE = 1e-4


# -- inputs --------------------------------------------------------------------------------------------------
def text(value: Any, field: str, limit: int | None = None) -> str:
    """A nonempty string (not only whitespace) of at most ``limit`` characters."""
    if not isinstance(value, str):
        raise ValueError(f"{field}: expected text (a string), got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{field}: text is empty")
    if limit is not None and len(value) > limit:
        raise ValueError(f"{field}: text of {len(value)} characters exceeds limits.max_text_chars={limit}")
    return value


def mapping(value: Any, field: str, required: Sequence[str], optional: Sequence[str] = ()) -> dict:
    """A mapping with every ``required`` key, possibly ``optional`` ones, and no other."""
    keys = sorted([*required, *optional])
    if not isinstance(value, dict):
        raise ValueError(f"{field}: expected a mapping with keys {', '.join(keys)}; got {type(value).__name__}")
    unknown = sorted(str(k) for k in value if k not in keys)
    if unknown:
        raise ValueError(f"{field}: unknown key {unknown[0]!r}; valid keys: {', '.join(keys)}")
    for key in required:
        if key not in value:
            raise ValueError(f"{field}: missing {key!r}")
    return value


def records(
    value: Any, field: str, id_key: str, *, limit: float, limit_name: str, text_limit: int | None, allow_empty: bool
) -> list[dict]:
    """``[{id_key, "text"}]`` with distinct nonempty ids, at most ``limit`` entries."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{field}: expected a list of {{{id_key!r}, 'text'}} mappings, got {type(value).__name__}")
    if not value and not allow_empty:
        raise ValueError(f"{field}: needs at least one entry")
    if len(value) > limit:
        raise ValueError(f"{field}: {len(value)} entries exceed limits.{limit_name}={limit}")
    seen: set[str] = set()
    normalized = []
    for i, item in enumerate(value):
        where = f"{field}[{i}]"
        mapping(item, where, (id_key, "text"))
        ident = text(item[id_key], f"{where}[{id_key!r}]", text_limit)
        if ident in seen:
            raise ValueError(f"{where}[{id_key!r}]: duplicate id {ident!r}")
        seen.add(ident)
        normalized.append({id_key: ident, "text": text(item["text"], f"{where}['text']", text_limit)})
    return normalized


def texts(value: Any, field: str, *, limit: int, limit_name: str, text_limit: int) -> list[str]:
    """A nonempty list of at most ``limit`` texts."""
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{field}: expected a nonempty list of texts")
    if len(value) > limit:
        raise ValueError(f"{field}: {len(value)} entries exceed limits.{limit_name}={limit}")
    return [text(item, f"{field}[{i}]", text_limit) for i, item in enumerate(value)]


def pixels(value: Any, field: str, max_side: int) -> Any:
    """An RGB image ``(3, H, W)`` with finite values in [0, 1]: a float tensor (returned as a detached float32
    contiguous tensor) or nested lists of numbers (returned as they are); sides at most ``max_side``."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return _tensor_pixels(torch, value, field, max_side)
    if not isinstance(value, list):
        raise ValueError(
            f"{field}: expected a float tensor of shape (3, H, W) or nested lists [3][H][W], "
            f"got {type(value).__name__}"
        )
    if len(value) != 3 or not all(isinstance(plane, list) for plane in value):
        raise ValueError(f"{field}: expected nested lists of shape [3][H][W] (RGB channels first)")
    height = len(value[0])
    width = len(value[0][0]) if height and isinstance(value[0][0], list) else 0
    if not height or not width:
        raise ValueError(f"{field}: the image is empty; expected shape [3][H][W] with H, W >= 1")
    _check_sides(height, width, field, max_side)
    for c, plane in enumerate(value):
        if len(plane) != height:
            raise ValueError(f"{field}[{c}]: expected {height} rows like channel 0, got {len(plane)}")
        for r, row in enumerate(plane):
            if not isinstance(row, list) or len(row) != width:
                raise ValueError(f"{field}[{c}][{r}]: expected a row of {width} numbers")
            for v in row:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                    raise ValueError(f"{field}[{c}][{r}]: values must be finite numbers in [0, 1], got {v!r}")
    return value


def _tensor_pixels(torch: Any, value: Any, field: str, max_side: int) -> Any:
    if value.layout != torch.strided:
        raise ValueError(f"{field}: expected a dense tensor; make it dense with `.to_dense()`")
    if not value.is_floating_point():
        raise ValueError(
            f"{field}: expected a floating-point tensor with values in [0, 1], got {value.dtype}; "
            "for 8-bit images use `pixels.float() / 255`"
        )
    if value.dim() != 3 or value.shape[0] != 3 or value.shape[1] < 1 or value.shape[2] < 1:
        raise ValueError(
            f"{field}: expected shape (3, H, W) (RGB channels first), got {tuple(value.shape)}; "
            "use `image.permute(2, 0, 1)` for (H, W, 3) data"
        )
    _check_sides(value.shape[1], value.shape[2], field, max_side)
    value = value.detach()
    if not bool(torch.isfinite(value).all()):
        raise ValueError(f"{field}: must be finite; it contains NaN or infinite values")
    low, high = float(value.min()), float(value.max())
    if low < 0.0 or high > 1.0:
        raise ValueError(f"{field}: values must lie in [0, 1], got range [{low:g}, {high:g}]")
    return value.to(torch.float32).contiguous()


def _check_sides(height: int, width: int, field: str, max_side: int) -> None:
    if max(height, width) > max_side:
        raise ValueError(f"{field}: image of {height}x{width} pixels exceeds limits.max_image_side={max_side}")


# -- batches -------------------------------------------------------------------------------------------------
def batch(payload: Any, field: str, limit: int, *, item: type | tuple[type, ...] = dict) -> tuple[list, bool]:
    """``(items, batched)``: a list is a batch (nonempty, at most ``limit``), one ``item`` is a batch of one."""
    if isinstance(payload, (list, tuple)):
        if not payload:
            raise ValueError(f"{field}: empty batch; pass one input or a nonempty list of inputs")
        if len(payload) > limit:
            raise ValueError(f"{field}: a batch of {len(payload)} inputs exceeds limits.max_batch={limit}")
        return list(payload), True
    if isinstance(payload, item):
        return [payload], False
    expected = "a mapping" if item is dict else "text"
    raise ValueError(f"{field}: expected {expected} (one input) or a list of them, got {type(payload).__name__}")


def targets_for(targets: Any, count: int, batched: bool, field: str = "targets") -> list:
    """One target per input: a batch needs an equal-length list."""
    if not batched:
        return [targets]
    if not isinstance(targets, (list, tuple)) or len(targets) != count:
        got = len(targets) if isinstance(targets, (list, tuple)) else type(targets).__name__
        raise ValueError(f"{field}: expected a list of {count} targets (one per input), got {got}")
    return list(targets)


# -- targets -------------------------------------------------------------------------------------------------
def ranking_target(target: Any, ids: Sequence[str], field: str, noun: str = "candidate") -> list[float]:
    """A candidate id, an index or a finite nonnegative distribution summing to one, as a distribution."""
    count = len(ids)
    if isinstance(target, str):
        if target not in ids:
            raise ValueError(f"{field}: unknown {noun} id {target!r}; supplied ids: {', '.join(map(repr, ids))}")
        return _one_hot(list(ids).index(target), count)
    if isinstance(target, bool):
        raise ValueError(f"{field}: a {noun} target is an id, an index or a distribution, not a bool")
    if isinstance(target, int):
        if not 0 <= target < count:
            raise ValueError(f"{field}: index {target} out of range for {count} supplied candidates")
        return _one_hot(target, count)
    target = _tensor_as_list(target, field, "a distribution")
    if isinstance(target, (list, tuple)):
        if len(target) != count:
            raise ValueError(f"{field}: distribution has {len(target)} values for {count} supplied candidates")
        values = []
        for i, p in enumerate(target):
            if isinstance(p, bool) or not isinstance(p, (int, float)):
                raise ValueError(f"{field}[{i}]: expected a number, got {type(p).__name__}")
            if not math.isfinite(p):
                raise ValueError(f"{field}[{i}]: distribution values must be finite, got {p}")
            if p < 0:
                raise ValueError(f"{field}[{i}]: distribution values must be nonnegative, got {p}")
            values.append(float(p))
        total = sum(values)
        if abs(total - 1.0) > SUM_TOLERANCE:
            raise ValueError(f"{field}: distribution must sum to one, sums to {total:.6g}")
        return [v / total for v in values]
    raise ValueError(
        f"{field}: a {noun} target is an id (str), an index (int) or a distribution (list of numbers), "
        f"got {type(target).__name__}"
    )


def label(value: Any, field: str) -> str:
    if not isinstance(value, str) or value not in LABELS:
        raise ValueError(f"{field}: verification targets are named NLI labels {list(LABELS)}, got {value!r}")
    return value


def reviewed_text(value: Any, field: str, max_length: int, noun: str) -> str:
    """Reviewed text a generator must reproduce: nonempty, at most ``max_length`` UTF-8 bytes."""
    if not isinstance(value, str):
        raise ValueError(f"{field}: a {noun} target is reviewed text (a string), got {type(value).__name__}")
    text(value, field)
    size = len(value.encode("utf-8"))
    if size > max_length:
        raise ValueError(
            f"{field}: reviewed {noun} is {size} bytes, longer than max_length={max_length}; "
            "shorten it or configure a larger max_length"
        )
    return value


def mask(value: Any, shape: tuple[int, int], field: str) -> list[list[bool]]:
    """A boolean ``[queries, documents]`` matrix with at least one positive per query."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        if value.dtype != torch.bool:
            raise ValueError(
                f"{field}: expected a boolean mask, got {value.dtype}; use `mask.bool()` if 1 marks a positive"
            )
        if tuple(value.shape) != shape:
            raise ValueError(
                f"{field}: mask has shape {list(value.shape)}, expected [queries, documents] = {list(shape)}"
            )
        value = value.cpu().tolist()
    if not isinstance(value, (list, tuple)) or len(value) != shape[0]:
        got = f"{len(value)} rows" if isinstance(value, (list, tuple)) else type(value).__name__
        raise ValueError(f"{field}: expected a [queries, documents] = {list(shape)} boolean mask, got {got}")
    rows = []
    for q, row in enumerate(value):
        if not isinstance(row, (list, tuple)) or len(row) != shape[1]:
            raise ValueError(
                f"{field}[{q}]: expected {shape[1]} booleans (one per document); the mask's shape must be "
                f"{list(shape)}"
            )
        if not all(isinstance(v, bool) for v in row):
            raise ValueError(f"{field}[{q}]: expected booleans (True marks a positive document)")
        if not any(row):
            raise ValueError(f"{field}[{q}]: the row is all false; every query needs at least one positive document")
        rows.append(list(row))
    return rows


def outcome(target: Any, ids: Sequence[str], field: str) -> dict[int, float]:
    """Candidate index -> observed outcome, from ``{"candidate_id", "outcome"}`` or one outcome per candidate."""
    if isinstance(target, dict):
        mapping(target, field, ("candidate_id", "outcome"))
        if target["candidate_id"] not in ids:
            raise ValueError(
                f"{field}['candidate_id']: unknown plan id {target['candidate_id']!r}; "
                f"supplied ids: {', '.join(map(repr, ids))}"
            )
        return {list(ids).index(target["candidate_id"]): finite(target["outcome"], f"{field}['outcome']")}
    target = _tensor_as_list(target, field, "outcomes")
    if isinstance(target, (list, tuple)):
        if len(target) != len(ids):
            raise ValueError(f"{field}: {len(target)} outcomes for {len(ids)} supplied plans; give one per plan")
        return {k: finite(v, f"{field}[{k}]") for k, v in enumerate(target)}
    raise ValueError(
        f"{field}: a planner target is {{'candidate_id': ..., 'outcome': number}} or one outcome per plan, "
        f"got {type(target).__name__}"
    )


def finite(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{field}: expected a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{field}: outcome must be finite, got {value}")
    return float(value)


def _one_hot(index: int, count: int) -> list[float]:
    return [1.0 if i == index else 0.0 for i in range(count)]


def _tensor_as_list(value: Any, field: str, noun: str) -> Any:
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(value, torch.Tensor):
        return value
    if value.dim() != 1 or value.is_complex() or value.dtype == torch.bool:
        raise ValueError(f"{field}: {noun} tensor must be 1-D and real, got shape {tuple(value.shape)}")
    return value.detach().to("cpu", torch.float64).tolist()
