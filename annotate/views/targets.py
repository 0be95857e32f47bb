"""How a stored target reads on the agreement pages: the chosen candidate's text, a distribution's bars, a label,
a text, the relevant documents per query, a plan's outcome. Templates print these; they compute nothing.

Also the numbers the agreement page draws (bar widths, kappa in words), so its SVG stays logic-free.
"""

from __future__ import annotations

import functools
from typing import Any

from annotate.views import display

# Landis and Koch's reading of kappa, the usual words for it.
_KAPPA_WORDS = ((0.8, "almost perfect"), (0.6, "substantial"), (0.4, "moderate"), (0.2, "fair"), (0.0, "slight"))


def describe(mode: str, inputs: Any, target: Any) -> dict:
    """`{"form", ...}` for `_target.html`: form is choice, distribution, label, text, mask, outcome or raw."""
    editor = display.editor_name(mode)
    if editor == "choice":
        options = display.choices(inputs)
        if isinstance(target, list) and len(target) == len(options):
            return {"form": "distribution", "rows": [
                {"id": o["id"], "text": o["text"] or o["id"], "percent": _percent(p), "width": _width(p)}
                for o, p in zip(options, target, strict=True)
            ]}
        chosen = _option(options, target)
        if chosen is not None:
            return {"form": "choice", "id": chosen["id"], "text": chosen["text"] or chosen["id"]}
    elif editor == "nli" and isinstance(target, str):
        return {"form": "label", "text": target}
    elif editor == "text" and isinstance(target, str):
        return {"form": "text", "text": target}
    elif editor == "relevance" and isinstance(target, list):
        queries = inputs.get("queries") or [] if isinstance(inputs, dict) else []
        documents = inputs.get("documents") or [] if isinstance(inputs, dict) else []
        rows = []
        for q, row in enumerate(target):
            marked = [str(documents[d]) if d < len(documents) else f"document {d + 1}"
                      for d, value in enumerate(row if isinstance(row, list) else []) if value is True]
            rows.append({"query": str(queries[q]) if q < len(queries) else f"query {q + 1}", "documents": marked})
        return {"form": "mask", "rows": rows}
    elif editor == "outcome":
        options = display.choices(inputs)
        if isinstance(target, dict) and "candidate_id" in target:
            chosen = _option(options, target["candidate_id"]) or {"id": str(target["candidate_id"]), "text": ""}
            return {"form": "outcome", "rows": [{"text": chosen["text"] or chosen["id"],
                                                 "value": _number(target.get("outcome"))}]}
        if isinstance(target, list):
            return {"form": "outcome", "rows": [
                {"text": (o["text"] or o["id"]) if o else f"plan {k + 1}", "value": _number(v)}
                for k, (o, v) in enumerate(zip(options + [None] * len(target), target, strict=False))
            ]}
    return {"form": "raw", "text": display.compact(target)}


def liner(mode: str, inputs: Any):
    """`line` for one item's targets (`display.answer_history` takes it)."""
    return functools.partial(line, mode, inputs)


def line(mode: str, inputs: Any, target: Any) -> str:
    """A target on one line (an answer's history): a chosen candidate by its text and id, else compact JSON."""
    described = describe(mode, inputs, target)
    if described["form"] == "choice" and described["text"] != described["id"]:
        return f"{described['text']} ({described['id']})"
    return display.compact(target)


def kappa_words(kappa: float | None) -> str:
    """Kappa in words (Landis and Koch), or an empty string when there is none."""
    if kappa is None:
        return ""
    if abs(kappa) < 0.005:
        return "chance level"
    if kappa < 0:
        return "worse than chance"
    for floor, words in _KAPPA_WORDS:
        if kappa > floor:
            return words
    return "slight"


def fixed(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def percent(value: float | None) -> str:
    """A 0..100 value as a percent string, or a dash."""
    return "–" if value is None else f"{value:.0f}%"


def _option(options: list[dict], target: Any) -> dict | None:
    if isinstance(target, bool):
        return None
    if isinstance(target, int):
        return options[target] if 0 <= target < len(options) else None
    return next((o for o in options if o["id"] == str(target)), None)


def _percent(p: Any) -> str:
    return f"{100 * p:.0f}%" if isinstance(p, (int, float)) and not isinstance(p, bool) else ""


def _width(p: Any) -> str:
    if not isinstance(p, (int, float)) or isinstance(p, bool):
        return "0"
    return f"{max(0.0, min(1.0, float(p))) * 100:.1f}"


def _number(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
