"""What the item page shows, computed from stored JSON: inputs, a receipt of one kind, a trace, a target editor.

Templates stay logic-free: every number a template prints (a bar's width, a highlight's strength, a key to
press) is computed here from the receipt kinds of the contract. Adding a tool means adding one receipt partial
and one editor, named in the two tables below, not touching the views.
"""

from __future__ import annotations

import difflib
import html
import json
import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from django.utils.safestring import SafeString, mark_safe

from annotate.views import images

# Receipt kind -> its partial under templates/annotate/receipts/.
RECEIPT_TEMPLATES = {
    "ranking": "annotate/receipts/_ranking.html",
    "outcome": "annotate/receipts/_outcome.html",
    "classification": "annotate/receipts/_classification.html",
    "retrieval": "annotate/receipts/_retrieval.html",
    "generation": "annotate/receipts/_generation.html",
}

# Tool mode -> target editor under templates/annotate/editors/. Every tool's mode names one target form.
EDITORS = {
    "rank": "choice",
    "verification": "nli",
    "retrieval": "relevance",
    "proposal": "text",
    "language": "text",
    "reply": "text",
    "outcomes": "outcome",
    "outcome": "outcome",
}

# Tool mode -> the receipt kind it produces (CONTRACT.md), for receipts stored without a `kind`.
KINDS = {
    "rank": "ranking",
    "outcomes": "outcome",
    "outcome": "outcome",
    "verification": "classification",
    "retrieval": "retrieval",
    "proposal": "generation",
    "language": "generation",
    "reply": "generation",
}

NLI_LABELS = (("entailment", "e"), ("neutral", "n"), ("contradiction", "c"))

# Input fields shown as text, in this order, with the label a reviewer reads.
_TEXT_FIELDS = (
    ("question", "Question"),
    ("goal", "Goal"),
    ("premise", "Premise"),
    ("hypothesis", "Hypothesis"),
    ("text", "Message"),
    ("message", "Message"),
    ("input", "Message"),
    ("prompt", "Prompt"),
)
# Input fields that list the choices a target picks among.
_CHOICE_FIELDS = ("hypotheses", "candidates", "plans")
_TRACE_PREVIEW = 400
_WORDS = re.compile(r"\s+|\w+|[^\w\s]")


def editor_name(mode: str) -> str:
    return EDITORS.get(mode, "text")


def receipt_kind(receipt: dict | None, mode: str = "") -> str | None:
    if not isinstance(receipt, dict):
        return None
    return receipt.get("kind") or KINDS.get(receipt.get("mode") or mode)


# ---------------------------------------------------------------------------------------------- inputs


def choices(inputs: Any, receipt: dict | None = None) -> list[dict]:
    """The candidates a reviewer picks among, in input order, each with its key (1-9) and its text."""
    options: list[dict] = []
    if isinstance(inputs, dict):
        for field in _CHOICE_FIELDS:
            if isinstance(inputs.get(field), list):
                options = [
                    {"id": str(c.get("id", i)) if isinstance(c, dict) else str(i),
                     "text": c.get("text", "") if isinstance(c, dict) else str(c)}
                    for i, c in enumerate(inputs[field])
                ]
                break
    if not options and isinstance(receipt, dict):
        options = [{"id": str(c.get("id", i)), "text": c.get("text", "")}
                   for i, c in enumerate(receipt.get("candidates") or [])]
    for index, option in enumerate(options):
        option["index"] = index
        option["key"] = str(index + 1)  # past 9, two digits typed together (static/keyboard.js)
    return options


def inputs_view(inputs: Any, receipt: dict | None) -> dict:
    """Fields, evidence with the model's attention highlighted, and the image with its patch heat map."""
    attention = receipt.get("attention") if isinstance(receipt, dict) else None
    text_attention = _text_attention(attention)
    view: dict[str, Any] = {"fields": [], "evidence": [], "image": None, "raw": None, "lists": []}
    if not isinstance(inputs, dict):
        if isinstance(inputs, str):
            # Chatbot's input is the message itself; its receipt calls that source "input".
            view["fields"].append(_text_block("Message", "input", inputs, text_attention))
        else:
            view["raw"] = _pretty(inputs)
        return view
    for field, label in _TEXT_FIELDS:
        if isinstance(inputs.get(field), str):
            view["fields"].append(_text_block(label, field, inputs[field], text_attention))
    for record in inputs.get("evidence") or []:
        if isinstance(record, dict) and isinstance(record.get("text"), str):
            source = str(record.get("source_id", ""))
            view["evidence"].append(_text_block(source, source, record["text"], text_attention))
    for field, label in (("queries", "Queries"), ("documents", "Documents")):
        if isinstance(inputs.get(field), list):
            view["lists"].append({"label": label, "items": [str(x) for x in inputs[field]]})
    if "pixels" in inputs or "image" in inputs:
        view["image"] = image_view(inputs, attention)
    return view


def image_view(inputs: dict, attention: Any) -> dict:
    """The Scene image as a data URL (when the pixels can be read) and the patch heat map over it."""
    src = images.data_url(inputs.get("pixels", inputs.get("image")))
    heat = None
    if isinstance(attention, dict) and attention.get("type", "image") == "image" and attention.get("weights"):
        weights = attention["weights"]
        rows = len(weights)
        cols = len(weights[0]) if rows and isinstance(weights[0], list) else 0
        flat = [w for row in weights for w in row if _finite(w)]
        low, high = min(flat, default=0.0), max(flat, default=0.0)
        spread = high - low
        # Shade by where the weight sits between the least and the most attended patch, so the picture stays
        # visible and an even spread (an untrained model's) shows as no shading rather than as a wash.
        heat = {
            "rows": rows,
            "cols": cols,
            "even": spread <= 1e-6 * max(abs(high), 1.0),
            "cells": [
                {"level": f"{(w - low) / spread if spread > 0 else 0.0:.3f}", "weight": f"{w:.3f}",
                 "row": r + 1, "col": c + 1}
                for r, row in enumerate(weights)
                for c, w in enumerate(row)
                if _finite(w)
            ],
        }
    size = attention.get("image_size") if isinstance(attention, dict) else None
    return {"src": src, "heat": heat, "source_id": inputs.get("source_id", ""), "size": size}


def _text_attention(attention: Any) -> dict[str, dict]:
    """source_id -> {"weight", "spans"} for text attention; nothing for image attention or none."""
    if not isinstance(attention, dict) or attention.get("type") != "text":
        return {}
    found = {}
    for source in attention.get("sources") or []:
        if isinstance(source, dict):
            found[str(source.get("source_id"))] = source
    return found


def _text_block(label: str, source_id: str, text: str, attention: dict[str, dict]) -> dict:
    source = attention.get(source_id)
    spans = source.get("spans") if source else None
    # One scale for every source: shading each against its own top word would colour a source the model hardly
    # read as strongly as the one it relied on.
    top = max((s.get("weight", 0) for other in attention.values() for s in other.get("spans") or []
               if isinstance(s, dict) and _finite(s.get("weight"))), default=0)
    weight = source.get("weight") if source else None
    segments = highlight(text, spans or [], top)
    return {
        "label": label,
        "source_id": source_id,
        "segments": segments,
        "html": segments_html(segments),
        "weight": _percent(weight) if _finite(weight) else None,
        "weight_width": _width(weight) if _finite(weight) else None,
    }


def highlight(text: str, spans: list[dict], top: float | None = None) -> list[dict]:
    """Split `text` into segments; a segment under an attention span carries its relative weight (0-1)."""
    if top is None:
        top = max((s.get("weight", 0) for s in spans if _finite(s.get("weight"))), default=0)
    segments: list[dict] = []
    cursor = 0
    for span in sorted((s for s in spans if isinstance(s, dict)), key=lambda s: (s.get("start", 0), s.get("end", 0))):
        start, end, weight = span.get("start"), span.get("end"), span.get("weight")
        if not (isinstance(start, int) and isinstance(end, int) and _finite(weight)):
            continue
        start, end = max(start, cursor), min(end, len(text))
        if end <= start:
            continue
        if start > cursor:
            segments.append({"text": text[cursor:start], "level": None})
        level = weight / top if top else 0.0
        segments.append({"text": text[start:end], "level": f"{max(level, 0):.3f}", "weight": f"{weight:.3f}"})
        cursor = end
    if cursor < len(text):
        segments.append({"text": text[cursor:], "level": None})
    return segments


def segments_html(segments: list[dict]) -> SafeString:
    """The highlighted text as HTML (each text escaped): built here, not in a template loop over every span."""
    parts = []
    for segment in segments:
        text = html.escape(segment["text"])
        if segment["level"]:
            parts.append(f'<mark class="attn" style="--w: {segment["level"]}" title="attention {segment["weight"]}">'
                         f"{text}</mark>")
        else:
            parts.append(text)
    return mark_safe("".join(parts))  # noqa: S308 - every text is escaped above; level and weight are numbers


# ---------------------------------------------------------------------------------------------- receipts


def receipt_view(receipt: dict | None, inputs: Any = None, mode: str = "", confidence: Any = None) -> dict | None:
    """The numbers one receipt partial prints (`mode` and `confidence` stand in where the receipt lacks them).

    A receipt of a shape this page does not know is shown as its JSON rather than failing the page.
    """
    if not isinstance(receipt, dict):
        return None
    try:
        return _receipt_view(receipt, inputs, mode, confidence)
    except (AttributeError, KeyError, TypeError, ValueError):
        return {"kind": receipt.get("kind"), "template": None, "json": _pretty(receipt),
                "confidence": _percent(confidence)}


def _receipt_view(receipt: dict, inputs: Any, mode: str, confidence: Any) -> dict:
    kind = receipt_kind(receipt, mode)
    confidence = receipt.get("confidence", confidence)
    view: dict[str, Any] = {
        "kind": kind,
        "tool": receipt.get("tool", ""),
        "mode": receipt.get("mode", mode),
        "model": receipt.get("model", ""),
        "confidence": _percent(confidence),
        "template": RECEIPT_TEMPLATES.get(kind),
    }
    if view["template"] is None:  # only a receipt without a partial is shown as its JSON
        view["json"] = _pretty(receipt)
    if kind in ("ranking", "outcome"):
        view["candidates"] = _ranked(receipt, inputs)
        view["prefer"] = receipt.get("prefer", "max")
    elif kind == "classification":
        calibration = receipt.get("calibration") or {}
        view["calibrated"] = bool(calibration.get("fitted"))
        view["temperature"] = calibration.get("temperature")
        keys = dict(NLI_LABELS)
        view["candidates"] = [
            {
                "id": c.get("id"),
                "key": keys.get(c.get("id"), ""),
                "percent": _percent(c.get("probability")),
                "width": _width(c.get("probability")),
                "calibrated": _percent(c.get("calibrated_probability"))
                if _finite(c.get("calibrated_probability")) else None,
                "selected": c.get("id") == receipt.get("selected_id"),
            }
            for c in receipt.get("candidates") or []
        ]
    elif kind == "retrieval":
        documents = inputs.get("documents") if isinstance(inputs, dict) else None
        view["queries"] = [
            {
                "query": q.get("query", ""),
                "documents": [
                    {
                        "id": _doc_id(d),
                        "text": _document_text(_doc_id(d), documents),
                        "percent": _percent(d.get("probability")),
                        "width": _width(d.get("probability")),
                        "selected": str(_doc_id(d)) == str(_selected_doc(q)),
                    }
                    for d in q.get("documents", q.get("candidates")) or []
                ],
            }
            for q in receipt.get("queries") or []
        ]
    elif kind == "generation":
        view["text"] = generated_text(receipt)
        view["alternatives"] = [
            {"text": c.get("text", ""), "score": f"{c['score']:.2f}" if _finite(c.get("score")) else ""}
            for c in receipt.get("candidates") or []
            if c.get("text") != receipt.get("text")
        ]
    return view


def generated_text(receipt: Any) -> str:
    """A generation receipt's answer (`text`; older receipts named it for their tool)."""
    if not isinstance(receipt, dict):
        return ""
    for key in ("text", "description", "proposal", "reply", "selected_text"):
        if isinstance(receipt.get(key), str):
            return receipt[key]
    return ""


def _ranked(receipt: dict, inputs: Any) -> list[dict]:
    """Candidates in input order (so their keys match the editor), with the receipt's numbers beside them."""
    by_id = {str(c.get("id")): c for c in receipt.get("candidates") or []}
    rows = []
    for option in choices(inputs, receipt):
        c = by_id.get(option["id"], {})
        rows.append(
            {
                **option,
                "text": option["text"] or c.get("text", ""),
                "percent": _percent(c.get("probability")),
                "width": _width(c.get("probability")),
                "score": f"{c['score']:.3f}" if _finite(c.get("score")) else "",
                "outcome": f"{c['outcome']:.3g}" if _finite(c.get("outcome")) else "",
                "selected": option["id"] == str(receipt.get("selected_id")),
            }
        )
    return rows


def _doc_id(document: dict) -> Any:
    return document.get("id", document.get("index"))


def _selected_doc(query: dict) -> Any:
    return query.get("selected_id", query.get("selected_index"))


def _document_text(ident: Any, documents: list | None) -> str:
    if not documents:
        return str(ident)
    if isinstance(ident, int) and 0 <= ident < len(documents):
        return str(documents[ident])
    if isinstance(ident, str) and ident.isdigit() and int(ident) < len(documents):
        return str(documents[int(ident)])
    return str(ident)


def document_index(ident: Any, documents: list) -> int | None:
    """Which input document a retrieval receipt's document id names (an index, its digits, or its text)."""
    if isinstance(ident, bool):
        return None
    if isinstance(ident, int):
        return ident if 0 <= ident < len(documents) else None
    if isinstance(ident, str):
        if ident.isdigit() and int(ident) < len(documents):
            return int(ident)
        if ident.startswith("d") and ident[1:].isdigit() and int(ident[1:]) < len(documents):
            return int(ident[1:])
        if ident in documents:
            return documents.index(ident)
    return None


# ---------------------------------------------------------------------------------------------- trace


def trace_view(trace: Any) -> dict | None:
    """The traced calls as rows (operation, inputs, outputs), each preview short; the whole JSON on demand.

    Reads the summary `annotate.tooling.summarize_trace` stores (`operations`, with values described by type,
    shape and a preview); a plain list of calls, or `calls`, is read the same way.
    """
    if not trace:
        return None
    calls = trace
    if isinstance(trace, dict):
        calls = trace.get("operations", trace.get("calls", []))
    rows = []
    for call in calls if isinstance(calls, list) else []:
        if not isinstance(call, dict):
            continue
        rows.append(
            {
                "operation": call.get("name") or call.get("operation") or "call",
                "type": call.get("type", ""),
                "kind": call.get("kind", ""),
                "status": call.get("status", ""),
                "error": call.get("error") or "",
                "inputs": _values(call.get("inputs", call.get("arguments"))),
                "outputs": _values(call.get("outputs", call.get("output"))),
            }
        )
    return {"calls": rows, "summary": _trace_summary(trace), "json": _pretty(trace),
            "truncated": bool(isinstance(trace, dict) and trace.get("truncated"))}


def _trace_summary(trace: Any) -> list[str]:
    """One line each for the model that ran and the batch the item was predicted in."""
    if not isinstance(trace, dict):
        return []
    lines = []
    model = trace.get("model")
    if isinstance(model, dict):
        parts = [str(model[k]) for k in ("tool", "mode") if model.get(k)]
        if model.get("version") is not None:
            parts.append(f"version {model['version']}")
        if model.get("trained") is False:
            parts.append("untrained")
        lines.append("Model: " + " · ".join(parts))
    batch = trace.get("batch")
    if isinstance(batch, dict) and isinstance(batch.get("size"), int) and isinstance(batch.get("index"), int):
        lines.append(f"Predicted as item {batch['index'] + 1} of a batch of {batch['size']}")
    for key, value in trace.items():
        if key not in ("operations", "calls", "version", "model", "batch", "truncated"):
            lines.append(f"{key}: {_preview(value)}")
    return lines


def compact(value: Any) -> str:
    """A stored target as one short line of JSON."""
    return "" if value is None else _preview(value)


def answer_history(revisions: Iterable, line: Callable[[Any], str] = compact) -> list[dict]:
    """An answer's states, oldest first: how a reviewer got to it, for the project's admins and the reviewer
    (`AnswerRevision`: every submit, skip, kept draft and undo adds one). Empty when the answer never changed:
    its one state is on the page already. `line` writes a target on one line (`targets.line` names a choice)."""
    revisions = list(revisions)
    if len(revisions) < 2:
        return []
    return [
        {"at": r.created_at, "kind": r.get_kind_display(),
         "what": (line(r.target) if r.target is not None else "") or r.skip_reason, "note": r.note}
        for r in revisions
    ]


def _values(values: Any) -> str:
    """Described values (`{"type": "tensor", "shape", "dtype"}` or `{"type", "preview"}`) as one short line."""
    if values is None:
        return ""
    if not isinstance(values, list):
        values = [values]
    parts = []
    for value in values:
        if isinstance(value, dict) and value.get("type") == "tensor":
            shape = "×".join(str(n) for n in value.get("shape") or []) or "scalar"
            parts.append(f"tensor[{shape}] {value.get('dtype', '')}".strip())
        elif isinstance(value, dict) and "preview" in value:
            parts.append(str(value["preview"]))
        elif isinstance(value, dict) and value.get("type") == "list" and "items" in value:
            parts.append(f"list of {value.get('length')}: " + _values(value["items"]))
        else:
            parts.append(_preview(value))
    return _preview(", ".join(p for p in parts if p))


# ---------------------------------------------------------------------------------------------- editors


def editor_view(mode: str, inputs: Any, receipt: dict | None, draft: Any = None) -> dict:
    """What one target editor needs: its options and its starting value (a draft, else the model's answer)."""
    name = editor_name(mode)
    view: dict[str, Any] = {"name": name, "template": f"annotate/editors/_{name}.html"}
    if name == "choice":
        view["options"] = choices(inputs, receipt)
        view["last_key"] = len(view["options"])
        view["chosen"] = str(draft) if isinstance(draft, (str, int)) and not isinstance(draft, bool) else None
        if isinstance(draft, int) and not isinstance(draft, bool) and draft < len(view["options"]):
            view["chosen"] = view["options"][draft]["id"]
        split = draft if isinstance(draft, list) and len(draft) == len(view["options"]) else None
        view["split"] = bool(split)
        for i, option in enumerate(view["options"]):
            option["share"] = _share(split[i]) if split else ""
    elif name == "nli":
        view["labels"] = [{"id": label, "key": key} for label, key in NLI_LABELS]
        view["chosen"] = draft if isinstance(draft, str) else None
    elif name == "relevance":
        view["queries"] = relevance_rows(inputs, receipt, draft)
        view["last_key"] = len(view["queries"][0]["documents"]) if view["queries"] else 0
    elif name == "text":
        model_text = generated_text(receipt)
        view["model_text"] = model_text
        view["text"] = draft if isinstance(draft, str) else model_text
        view["diff"] = word_diff(model_text, view["text"]) if view["text"] != model_text else []
    elif name == "outcome":
        view["options"] = choices(inputs, receipt)
        view["last_key"] = len(view["options"])
        predicted = {str(c.get("id")): c.get("outcome") for c in (receipt or {}).get("candidates") or []}
        all_values = draft if isinstance(draft, list) and len(draft) == len(view["options"]) else None
        one = draft if isinstance(draft, dict) else {}
        view["scope"] = "all" if all_values else "one"
        view["chosen"] = str(one.get("candidate_id")) if one.get("candidate_id") is not None else None
        view["value"] = _number(one.get("outcome"))
        for i, option in enumerate(view["options"]):
            option["predicted"] = f"{predicted[option['id']]:.3g}" if _finite(predicted.get(option["id"])) else ""
            option["value"] = _number(all_values[i]) if all_values else ""
    return view


def relevance_rows(inputs: Any, receipt: dict | None, draft: Any = None) -> list[dict]:
    """One row per query, one checkbox per document; checked from the draft, else the model's top document."""
    queries = list(inputs.get("queries") or []) if isinstance(inputs, dict) else []
    documents = list(inputs.get("documents") or []) if isinstance(inputs, dict) else []
    picked: dict[int, set[int]] = {}
    if isinstance(draft, list) and len(draft) == len(queries):
        for q, row in enumerate(draft):
            picked[q] = {d for d, v in enumerate(row or []) if v is True}
    elif isinstance(receipt, dict):
        for q, row in enumerate(receipt.get("queries") or []):
            index = document_index(_selected_doc(row), documents) if isinstance(row, dict) else None
            if index is not None:
                picked[q] = {index}
    return [
        {
            "index": q,
            "number": q + 1,
            "text": str(query),
            "documents": [
                {"index": d, "key": str(d + 1), "text": str(doc), "checked": d in picked.get(q, ())}
                for d, doc in enumerate(documents)
            ],
        }
        for q, query in enumerate(queries)
    ]


def word_diff(before: str, after: str) -> list[dict]:
    """Word-level diff of `after` against `before`: runs of {"op": "equal"|"insert"|"delete", "text"}."""
    old, new = _WORDS.findall(before), _WORDS.findall(after)
    parts = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if op in ("delete", "replace"):
            parts.append({"op": "delete", "text": "".join(old[i1:i2])})
        if op in ("insert", "replace"):
            parts.append({"op": "insert", "text": "".join(new[j1:j2])})
        if op == "equal":
            parts.append({"op": "equal", "text": "".join(old[i1:i2])})
    return parts


# ---------------------------------------------------------------------------------------------- helpers


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _percent(value: Any) -> str:
    return f"{100 * value:.0f}%" if _finite(value) else "–"


def _width(value: Any) -> str:
    """A bar width in percent, clamped to [0, 100], as a CSS-safe number."""
    return f"{min(max(100 * value, 0), 100):.1f}" if _finite(value) else "0"


def _share(value: Any) -> str:
    return f"{100 * value:.4g}" if _finite(value) else ""


def _number(value: Any) -> str:
    return f"{value:g}" if _finite(value) else ""


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def _preview(value: Any) -> str:
    if value in (None, {}, []):
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _TRACE_PREVIEW else text[: _TRACE_PREVIEW - 1] + "…"
