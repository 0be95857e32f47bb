"""Receipts: what a tool tells a reviewer about one prediction, in one fixed JSON shape per kind.

Importable without torch, so a web process can build, check and render receipts. Every receipt has ``kind``,
``tool``, ``mode``, ``model`` (a fingerprint of the tool's name and configuration), ``confidence`` (in [0, 1]:
how sure the model is of its answer) and ``attention`` (a text or image structure, or ``None``), plus the keys
of its kind:

- ``ranking``: ``selected_id``, ``selected_index``, ``candidates`` [{``id``, ``text``, ``score``,
  ``probability``, ``attention``}].
- ``outcome``: the ranking keys plus ``prefer``; each candidate also has ``outcome``.
- ``classification``: ``selected_id``, ``selected_index``, ``candidates`` [{``id``, ``score``, ``probability``,
  ``calibrated_probability``}], ``calibration`` {``fitted``, ``temperature``}.
- ``retrieval``: ``queries`` [{``query``, ``selected_id``, ``documents`` [{``id``, ``score``, ``probability``}]}].
- ``generation``: ``text`` and ``candidates`` [{``text``, ``score``}] (score: log-probability).

Text attention is ``{"type": "text", "sources": [{"source_id", "weight", "spans": [{"start", "end",
"weight"}]}]}``: a span is a word of the source's text by character offsets, and a source's span weights sum to
the source's weight. Image attention is ``{"type": "image", "source_id", "grid": [rows, cols], "image_size":
[H, W], "weights"}`` with ``weights`` a rows x cols nested list (row-major) summing to one.

Receipts are strict JSON: a builder refuses a non-finite number with ``ValueError`` instead of emitting it.
The schema of every kind ships as ``tensorcode/schemas/receipt.schema.json``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any

__all__ = [
    "KEYS",
    "KINDS",
    "KIND_OF_MODE",
    "check",
    "classification",
    "fingerprint",
    "generation",
    "image_attention",
    "kind_of",
    "outcome",
    "ranking",
    "retrieval",
    "text_attention",
]

KINDS = ("ranking", "outcome", "classification", "retrieval", "generation")
_COMMON = ("kind", "tool", "mode", "model", "confidence", "attention")
KEYS: dict[str, tuple[str, ...]] = {
    "ranking": (*_COMMON, "selected_id", "selected_index", "candidates"),
    "outcome": (*_COMMON, "selected_id", "selected_index", "prefer", "candidates"),
    "classification": (*_COMMON, "selected_id", "selected_index", "candidates", "calibration"),
    "retrieval": (*_COMMON, "queries"),
    "generation": (*_COMMON, "text", "candidates"),
}
CANDIDATE_KEYS: dict[str, tuple[str, ...]] = {
    "ranking": ("id", "text", "score", "probability", "attention"),
    "outcome": ("id", "text", "score", "probability", "attention", "outcome"),
    "classification": ("id", "score", "probability", "calibrated_probability"),
    "generation": ("text", "score"),
}
# Which kind each tool's mode returns (the modes of ``tensorcode.tools.MODES``).
KIND_OF_MODE: dict[tuple[str, str], str] = {
    ("investigator", "rank"): "ranking",
    ("investigator", "verification"): "classification",
    ("investigator", "proposal"): "generation",
    ("investigator", "retrieval"): "retrieval",
    ("decision", "rank"): "ranking",
    ("planner", "outcomes"): "outcome",
    ("planner", "proposal"): "generation",
    ("scene", "rank"): "ranking",
    ("scene", "language"): "generation",
    ("chatbot", "reply"): "generation",
}


def kind_of(tool: str, mode: str) -> str:
    """The receipt kind that ``tool`` returns in ``mode``; ``ValueError`` for an unknown pair."""
    try:
        return KIND_OF_MODE[(tool, mode)]
    except KeyError:
        raise ValueError(f"mode: {tool!r} has no mode {mode!r} that returns a receipt") from None


def fingerprint(tool: str, configuration: dict) -> str:
    """``"<tool>:<16 hex digits>"``: a stable digest of the tool's name and its JSON configuration."""
    canonical = json.dumps({"tool": tool, "configuration": configuration}, sort_keys=True, allow_nan=False,
                           separators=(",", ":"))
    return f"{tool}:{hashlib.sha256(canonical.encode('utf-8')).hexdigest()[:16]}"


# -- attention -----------------------------------------------------------------------------------------------
def text_attention(sources: Sequence[tuple[str, float, Sequence[tuple[int, int, float]]]]) -> dict:
    """``sources`` as ``(source_id, weight, [(start, end, weight), ...])`` -> the text attention structure."""
    return {
        "type": "text",
        "sources": [
            {
                "source_id": source_id,
                "weight": _number(weight, f"attention weight of {source_id!r}"),
                "spans": [
                    {"start": int(start), "end": int(end), "weight": _number(w, f"attention weight of {source_id!r}")}
                    for start, end, w in spans
                ],
            }
            for source_id, weight, spans in sources
        ],
    }


def image_attention(source_id: str, grid: Sequence[int], image_size: Sequence[int],
                    weights: Sequence[Sequence[float]]) -> dict:
    """The image attention structure: ``weights`` is ``grid[0]`` rows of ``grid[1]`` cells, row-major."""
    return {
        "type": "image",
        "source_id": source_id,
        "grid": [int(grid[0]), int(grid[1])],
        "image_size": [int(image_size[0]), int(image_size[1])],
        "weights": [[_number(w, "image attention weight") for w in row] for row in weights],
    }


# -- kinds ---------------------------------------------------------------------------------------------------
def ranking(tool: str, mode: str, model: str, candidates: Sequence[dict], scores: Sequence[float],
            attention: Sequence[dict | None]) -> dict:
    """A ``ranking`` receipt. ``candidates`` are ``{"id", "text"}``; ``attention[k]`` is candidate ``k``'s.

    Probabilities are the softmax of the scores; the highest score is selected (the first on a tie), and its
    probability is the confidence.
    """
    return _ranked("ranking", tool, mode, model, candidates, _numbers(scores, "score"), attention)


def outcome(tool: str, mode: str, model: str, candidates: Sequence[dict], outcomes: Sequence[float],
            prefer: str, attention: Sequence[dict | None]) -> dict:
    """An ``outcome`` receipt: scores are the outcomes, negated when ``prefer`` is ``"min"``."""
    if prefer not in ("max", "min"):
        raise ValueError(f"prefer: expected 'max' or 'min', got {prefer!r}")
    values = _numbers(outcomes, "outcome")
    sign = 1.0 if prefer == "max" else -1.0
    receipt = _ranked("outcome", tool, mode, model, candidates, [sign * v for v in values], attention)
    receipt["prefer"] = prefer
    for entry, value in zip(receipt["candidates"], values, strict=True):
        entry["outcome"] = value
    return {key: receipt[key] for key in KEYS["outcome"]}


def classification(tool: str, mode: str, model: str, labels: Sequence[str], scores: Sequence[float],
                   calibrated: Sequence[float] | None, temperature: float | None,
                   attention: dict | None = None) -> dict:
    """A ``classification`` receipt over ``labels``; ``calibrated`` probabilities only from a fresh fit.

    The confidence is the selected label's calibrated probability when there is one, else its probability.
    """
    values = _numbers(scores, "score")
    probabilities = _softmax(values)
    fitted = calibrated is not None
    calibrated_values = _numbers(calibrated, "calibrated probability") if fitted else [None] * len(values)
    selected = max(range(len(values)), key=values.__getitem__)
    confidence = calibrated_values[selected] if fitted else probabilities[selected]
    return {
        **_header("classification", tool, mode, model, confidence, attention),
        "selected_id": labels[selected],
        "selected_index": selected,
        "candidates": [
            {"id": name, "score": s, "probability": p, "calibrated_probability": c}
            for name, s, p, c in zip(labels, values, probabilities, calibrated_values, strict=True)
        ],
        "calibration": {
            "fitted": fitted,
            "temperature": _number(temperature, "calibration temperature") if fitted else None,
        },
    }


def retrieval(tool: str, mode: str, model: str, queries: Sequence[str], document_ids: Sequence[str],
              scores: Sequence[Sequence[float]]) -> dict:
    """A ``retrieval`` receipt: per query, every document's score and softmax probability.

    The confidence is the least sure query's selected probability, so a review queue ordered by it surfaces
    groups with any doubtful query first.
    """
    entries, sure = [], []
    for query, row in zip(queries, scores, strict=True):
        values = _numbers(row, "retrieval score")
        probabilities = _softmax(values)
        selected = max(range(len(values)), key=values.__getitem__)
        sure.append(probabilities[selected])
        entries.append({
            "query": query,
            "selected_id": document_ids[selected],
            "documents": [
                {"id": d, "score": s, "probability": p}
                for d, s, p in zip(document_ids, values, probabilities, strict=True)
            ],
        })
    return {**_header("retrieval", tool, mode, model, min(sure), None), "queries": entries}


def generation(tool: str, mode: str, model: str, texts: Sequence[str], log_probabilities: Sequence[float],
               attention: dict | None) -> dict:
    """A ``generation`` receipt: ``texts[0]`` is the answer, every text a candidate with its log-probability.

    The confidence is the answer's geometric-mean probability per generated byte (its end mark counted), so
    long and short answers compare.
    """
    values = _numbers(log_probabilities, "log-probability")
    steps = len(texts[0].encode("utf-8")) + 1
    confidence = math.exp(min(0.0, values[0]) / steps)
    return {
        **_header("generation", tool, mode, model, confidence, attention),
        "text": texts[0],
        "candidates": [{"text": t, "score": s} for t, s in zip(texts, values, strict=True)],
    }


# -- checking ------------------------------------------------------------------------------------------------
def check(receipt: Any) -> dict:
    """Check a receipt's shape: known kind, the kind its tool and mode return, exact keys, strict JSON.

    Returns the receipt; raises ``ValueError`` with a one-line message naming the problem. The JSON Schema is
    the full contract; this is the quick check a web process can run on every stored receipt.
    """
    if not isinstance(receipt, dict):
        raise ValueError(f"receipt: expected a mapping, got {type(receipt).__name__}")
    kind = receipt.get("kind")
    if kind not in KINDS:
        raise ValueError(f"receipt.kind: unknown kind {kind!r}; kinds: {', '.join(KINDS)}")
    expected = kind_of(str(receipt.get("tool")), str(receipt.get("mode")))
    if expected != kind:
        raise ValueError(
            f"receipt.kind: {receipt.get('tool')}/{receipt.get('mode')} returns {expected!r} receipts, not {kind!r}"
        )
    _exact_keys(receipt, KEYS[kind], "receipt")
    attentions = [("receipt.attention", receipt["attention"])]
    for i, candidate in enumerate(_list(receipt.get("candidates", []), "receipt.candidates")):
        _exact_keys(candidate, CANDIDATE_KEYS[kind], f"receipt.candidates[{i}]")
        if "attention" in candidate:
            attentions.append((f"receipt.candidates[{i}].attention", candidate["attention"]))
    for i, query in enumerate(_list(receipt.get("queries", []), "receipt.queries")):
        _exact_keys(query, ("query", "selected_id", "documents"), f"receipt.queries[{i}]")
        for j, document in enumerate(_list(query["documents"], f"receipt.queries[{i}].documents")):
            _exact_keys(document, ("id", "score", "probability"), f"receipt.queries[{i}].documents[{j}]")
    for field, attention in attentions:
        _check_attention(attention, field)
    try:
        json.dumps(receipt, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"receipt: not strict JSON ({exc})") from exc
    confidence = receipt["confidence"]
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0.0 <= confidence <= 1.0:
        raise ValueError(f"receipt.confidence: expected a number in [0, 1], got {confidence!r}")
    return receipt


# -- helpers -------------------------------------------------------------------------------------------------
def _header(kind: str, tool: str, mode: str, model: str, confidence: float, attention: dict | None) -> dict:
    return {
        "kind": kind,
        "tool": tool,
        "mode": mode,
        "model": model,
        "confidence": min(1.0, max(0.0, float(confidence))),
        "attention": attention,
    }


def _ranked(kind: str, tool: str, mode: str, model: str, candidates: Sequence[dict], values: list[float],
            attention: Sequence[dict | None]) -> dict:
    probabilities = _softmax(values)
    selected = max(range(len(values)), key=values.__getitem__)
    return {
        **_header(kind, tool, mode, model, probabilities[selected], attention[selected]),
        "selected_id": candidates[selected]["id"],
        "selected_index": selected,
        "candidates": [
            {"id": c["id"], "text": c["text"], "score": s, "probability": p, "attention": a}
            for c, s, p, a in zip(candidates, values, probabilities, attention, strict=True)
        ],
    }


def _exact_keys(value: Any, keys: Sequence[str], field: str) -> None:
    if not isinstance(value, dict):
        raise ValueError(f"{field}: expected a mapping, got {type(value).__name__}")
    missing, unexpected = sorted(set(keys) - set(value)), sorted(set(value) - set(keys))
    if missing or unexpected:
        raise ValueError(f"{field}: missing keys {missing}, unexpected keys {unexpected}")


def _list(value: Any, field: str) -> list:
    if not isinstance(value, list):
        raise ValueError(f"{field}: expected a list, got {type(value).__name__}")
    return value


def _check_attention(attention: Any, field: str) -> None:
    if attention is None:
        return
    kind = attention.get("type") if isinstance(attention, dict) else None
    if kind == "text":
        _exact_keys(attention, ("type", "sources"), field)
        for i, source in enumerate(_list(attention["sources"], f"{field}.sources")):
            _exact_keys(source, ("source_id", "weight", "spans"), f"{field}.sources[{i}]")
            for j, span in enumerate(_list(source["spans"], f"{field}.sources[{i}].spans")):
                _exact_keys(span, ("start", "end", "weight"), f"{field}.sources[{i}].spans[{j}]")
    elif kind == "image":
        _exact_keys(attention, ("type", "source_id", "grid", "image_size", "weights"), field)
        grid = attention["grid"]
        if not (isinstance(grid, list) and len(grid) == 2 and all(type(n) is int and n > 0 for n in grid)):
            raise ValueError(f"{field}.grid: expected [rows, cols] (two positive integers), got {grid!r}")
        rows, cols = grid
        weights = _list(attention["weights"], f"{field}.weights")
        if len(weights) != rows or any(not isinstance(row, list) or len(row) != cols for row in weights):
            raise ValueError(f"{field}.weights: expected {rows} rows of {cols} weights (grid {[rows, cols]})")
    else:
        raise ValueError(f"{field}: expected a text or image attention structure or null, got type {kind!r}")


def _number(value: Any, what: str) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(
            f"the model produced a non-finite {what} ({value}); its weights may be corrupt, so no receipt is given"
        )
    return value


def _numbers(values: Sequence[float], what: str) -> list[float]:
    return [_number(v, what) for v in values]


def _softmax(values: list[float]) -> list[float]:
    top = max(values)
    exps = [math.exp(v - top) for v in values]
    total = sum(exps)
    return [e / total for e in exps]
