"""One small valid example (inputs without the mode envelope, and a target) for every tool and mode."""

from __future__ import annotations

import torch

EVIDENCE = [{"source_id": "log:1", "text": "disk full on alpha"}, {"source_id": "log:2", "text": "beta is fine"}]


def _pixels() -> torch.Tensor:
    return torch.rand(3, 12, 16, generator=torch.Generator().manual_seed(0))


def good(name: str, mode: str) -> tuple[object, object]:
    """``(inputs, target)`` that the tool registered as ``name`` accepts in ``mode``."""
    if (name, mode) in {("decision", "rank"), ("investigator", "rank")}:
        hypotheses = [{"id": "a", "text": "alpha failed"}, {"id": "b", "text": "beta failed"}]
        return {"question": "which server failed?", "evidence": EVIDENCE, "hypotheses": hypotheses}, "a"
    if (name, mode) == ("investigator", "verification"):
        return {"premise": "the disk on alpha is full", "hypothesis": "alpha has a full disk"}, "entailment"
    if (name, mode) == ("investigator", "proposal"):
        return {"question": "which server failed?", "evidence": EVIDENCE}, "alpha failed"
    if (name, mode) == ("investigator", "retrieval"):
        return {"queries": ["disk full"], "documents": ["alpha disk full", "beta is fine"]}, [[True, False]]
    if (name, mode) == ("planner", "outcomes"):
        plans = [{"id": "p1", "text": "restart alpha"}, {"id": "p2", "text": "wait an hour"}]
        return {"goal": "restore service", "evidence": EVIDENCE, "plans": plans}, {"candidate_id": "p1", "outcome": 2.5}
    if (name, mode) == ("planner", "proposal"):
        return {"goal": "restore service", "evidence": EVIDENCE}, "restart alpha"
    if (name, mode) == ("scene", "rank"):
        candidates = [{"id": "c", "text": "a red circle"}, {"id": "s", "text": "a blue square"}]
        inputs = {"pixels": _pixels(), "source_id": "image:1", "question": "what is shown?", "candidates": candidates}
        return inputs, "c"
    if (name, mode) == ("scene", "language"):
        return {"pixels": _pixels(), "source_id": "image:1", "question": "what is shown?"}, "a red circle"
    if (name, mode) == ("chatbot", "reply"):
        return "hello there", "hi, how can I help?"
    raise KeyError((name, mode))
