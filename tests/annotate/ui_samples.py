"""Hand-made inputs and receipts, one per tool kind and mode, in the shapes of CONTRACT.md's receipt kinds.

The page tests render these without a model; the browser tests use real predictions instead.
"""

from __future__ import annotations

import copy

EVIDENCE = [
    {"source_id": "log", "text": "The database connection was refused at 09:14."},
    {"source_id": "ticket", "text": "Users report timeouts since the morning."},
]

TEXT_ATTENTION = {
    "type": "text",
    "sources": [
        {"source_id": "log", "weight": 0.8, "spans": [{"start": 4, "end": 12, "weight": 0.5},
                                                      {"start": 28, "end": 35, "weight": 0.3}]},
        {"source_id": "ticket", "weight": 0.2, "spans": [{"start": 13, "end": 21, "weight": 0.2}]},
    ],
}


def _pixels(size: int = 8) -> list:
    """A (3, size, size) image: a red square on a blue background."""
    red = [[1.0 if 2 <= y < 6 and 2 <= x < 6 else 0.1 for x in range(size)] for y in range(size)]
    green = [[0.1 for _ in range(size)] for _ in range(size)]
    blue = [[0.1 if 2 <= y < 6 and 2 <= x < 6 else 0.8 for x in range(size)] for y in range(size)]
    return [red, green, blue]


IMAGE_ATTENTION = {
    "type": "image", "source_id": "img-1", "grid": [2, 2], "image_size": [8, 8],
    "weights": [[0.1, 0.2], [0.6, 0.1]],
}


def _ranking(tool: str, mode: str, ids: list[str], texts: list[str], probabilities: list[float], attention):
    best = max(range(len(ids)), key=lambda i: probabilities[i])
    return {
        "kind": "ranking", "tool": tool, "mode": mode, "model": f"{tool}:abc123", "confidence": probabilities[best],
        "attention": attention, "selected_id": ids[best], "selected_index": best,
        "candidates": [{"id": i, "text": t, "score": p * 3, "probability": p, "attention": attention}
                       for i, t, p in zip(ids, texts, probabilities, strict=True)],
    }


def _outcome(receipt: dict, outcomes: list[float]) -> dict:
    for candidate, outcome in zip(receipt["candidates"], outcomes, strict=True):
        candidate["outcome"] = outcome
    return {**receipt, "kind": "outcome", "prefer": "max"}


SAMPLES: dict[tuple[str, str], dict] = {
    ("decision", "rank"): {
        "inputs": {"question": "Why did the service stop?", "evidence": EVIDENCE,
                   "hypotheses": [{"id": "db", "text": "The database was unreachable."},
                                  {"id": "dns", "text": "A DNS record expired."}]},
        "receipt": _ranking("decision", "rank", ["db", "dns"],
                            ["The database was unreachable.", "A DNS record expired."], [0.7, 0.3], TEXT_ATTENTION),
        "target": "db",
    },
    ("investigator", "rank"): {
        "inputs": {"question": "Who wrote the report?", "evidence": EVIDENCE,
                   "hypotheses": [{"id": "h1", "text": "Alice"}, {"id": "h2", "text": "Bob"},
                                  {"id": "h3", "text": "Carol"}]},
        "receipt": _ranking("investigator", "rank", ["h1", "h2", "h3"], ["Alice", "Bob", "Carol"],
                            [0.2, 0.5, 0.3], TEXT_ATTENTION),
        "target": "h2",
    },
    ("scene", "rank"): {
        "inputs": {"pixels": _pixels(), "source_id": "img-1", "question": "What is in the middle?",
                   "candidates": [{"id": "red", "text": "a red square"}, {"id": "blue", "text": "a blue circle"}]},
        "receipt": _ranking("scene", "rank", ["red", "blue"], ["a red square", "a blue circle"], [0.55, 0.45],
                            IMAGE_ATTENTION),
        "target": "red",
    },
    ("planner", "outcomes"): {
        "inputs": {"goal": "Cut the page load time", "evidence": EVIDENCE,
                   "plans": [{"id": "cache", "text": "Add a cache"}, {"id": "cdn", "text": "Use a CDN"}]},
        "receipt": _outcome(_ranking("planner", "outcomes", ["cache", "cdn"], ["Add a cache", "Use a CDN"],
                                     [0.6, 0.4], TEXT_ATTENTION), [1.8, 1.4]),
        "target": {"candidate_id": "cache", "outcome": 2.5},
    },
    ("investigator", "verification"): {
        "inputs": {"premise": "The database connection was refused.", "hypothesis": "The database was down."},
        "receipt": {
            "kind": "classification", "tool": "investigator", "mode": "verification", "model": "investigator:abc",
            "confidence": 0.5, "attention": None, "selected_id": "entailment", "selected_index": 0,
            "candidates": [{"id": "entailment", "score": 1.0, "probability": 0.5, "calibrated_probability": None},
                           {"id": "neutral", "score": 0.5, "probability": 0.3, "calibrated_probability": None},
                           {"id": "contradiction", "score": 0.1, "probability": 0.2, "calibrated_probability": None}],
            "calibration": {"fitted": False, "temperature": None},
        },
        "target": "neutral",
    },
    ("investigator", "retrieval"): {
        "inputs": {"queries": ["database outage", "slow pages"],
                   "documents": ["db refused connections", "pages took 9 seconds", "new logo"]},
        "receipt": {
            "kind": "retrieval", "tool": "investigator", "mode": "retrieval", "model": "investigator:abc",
            "confidence": 0.4, "attention": None,
            "queries": [
                {"query": "database outage", "selected_id": 0,
                 "documents": [{"id": 0, "score": 2.0, "probability": 0.6}, {"id": 1, "score": 1.0, "probability": 0.3},
                               {"id": 2, "score": 0.1, "probability": 0.1}]},
                {"query": "slow pages", "selected_id": 2,
                 "documents": [{"id": 2, "score": 2.0, "probability": 0.4},
                               {"id": 1, "score": 1.9, "probability": 0.35},
                               {"id": 0, "score": 0.1, "probability": 0.25}]},
            ],
        },
        "target": [[True, False, False], [False, True, False]],
    },
    ("investigator", "proposal"): {
        "inputs": {"question": "Why did the service stop?", "evidence": EVIDENCE},
        "receipt": {
            "kind": "generation", "tool": "investigator", "mode": "proposal", "model": "investigator:abc",
            "confidence": 0.2, "attention": TEXT_ATTENTION, "text": "the database was down",
            "candidates": [{"text": "the database was down", "score": -3.2}, {"text": "dns expired", "score": -5.0}],
        },
        "target": "the database refused connections",
    },
    ("planner", "proposal"): {
        "inputs": {"goal": "Cut the page load time", "evidence": EVIDENCE},
        "receipt": {
            "kind": "generation", "tool": "planner", "mode": "proposal", "model": "planner:abc",
            "confidence": 0.3, "attention": TEXT_ATTENTION, "text": "add a cache",
            "candidates": [{"text": "add a cache", "score": -2.0}],
        },
        "target": "add a cache in front of the database",
    },
    ("scene", "language"): {
        "inputs": {"pixels": _pixels(), "source_id": "img-1", "question": "Describe the image."},
        "receipt": {
            "kind": "generation", "tool": "scene", "mode": "language", "model": "scene:abc", "confidence": 0.1,
            "attention": IMAGE_ATTENTION, "text": "a red square",
            "candidates": [{"text": "a red square", "score": -1.5}],
        },
        "target": "a red square on blue",
    },
    ("chatbot", "reply"): {
        "inputs": "hello, is the service up?",
        "receipt": {
            "kind": "generation", "tool": "chatbot", "mode": "reply", "model": "chatbot:abc", "confidence": 0.05,
            "attention": None, "text": "yes it is", "candidates": [{"text": "yes it is", "score": -4.0}],
        },
        "target": "yes, it is up again",
    },
}

TRACE = {
    "version": 1,
    "model": {"tool": "decision", "mode": "rank", "version": 1, "trained": False},
    "batch": {"size": 1, "index": 0},
    "operations": [
        {"name": "decision", "type": "Decision", "kind": "call", "status": "ok", "error": None,
         "inputs": [{"type": "object", "keys": ["question"], "preview": "{\"question\": ...}"}],
         "outputs": [{"type": "object", "keys": ["kind"], "preview": "{\"kind\": \"ranking\"}"}]},
        {"name": "ranker.encoder", "type": "Linear", "kind": "module", "status": "ok",
         "inputs": [{"type": "tensor", "shape": [2, 32], "dtype": "float32"}],
         "outputs": [{"type": "tensor", "shape": [2, 8], "dtype": "float32"}]},
    ],
    "truncated": False,
}


def sample(tool: str, mode: str) -> dict:
    """A deep copy of the sample for (tool, mode): {"inputs", "receipt", "target"}."""
    return copy.deepcopy(SAMPLES[(tool, mode)])
