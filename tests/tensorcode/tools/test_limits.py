"""Documented input limits: refused by validate_inputs and by the tools before anything is allocated."""

from __future__ import annotations

import pytest
import torch
from tool_cases import good

from tensorcode import tools

torch.set_num_threads(1)


def _hypotheses(count: int) -> list[dict]:
    return [{"id": f"h{i}", "text": f"hypothesis {i}"} for i in range(count)]


def test_too_many_hypotheses_are_refused_naming_the_limit():
    inputs = {"question": "which?", "hypotheses": _hypotheses(33)}
    message = r"^inputs\['hypotheses'\]: 33 entries exceed limits.max_candidates=32$"
    with pytest.raises(ValueError, match=message):
        tools.validate_inputs("decision", "rank", inputs)
    with pytest.raises(ValueError, match=message):
        tools.create("decision")(inputs)


def test_a_larger_limit_can_be_configured():
    inputs = {"question": "which?", "hypotheses": _hypotheses(33)}
    configuration = {"limits": {"max_candidates": 64}}
    assert len(tools.validate_inputs("decision", "rank", inputs, configuration)["hypotheses"]) == 33
    assert len(tools.create("decision", **configuration)(inputs)["candidates"]) == 33


def test_limits_have_upper_bounds_themselves():
    with pytest.raises(ValueError, match=r"^limits.max_candidates: 100000 is over the upper bound 4096$"):
        tools.create("decision", limits={"max_candidates": 100_000})


def test_an_unknown_limit_is_refused_naming_the_valid_ones():
    with pytest.raises(ValueError, match="^limits: unknown field 'max_hypotheses'; valid fields: max_batch"):
        tools.validate_inputs("decision", "rank", {}, {"limits": {"max_hypotheses": 5}})


def test_too_many_evidence_passages_are_refused():
    inputs, _ = good("investigator", "rank")
    evidence = [{"source_id": f"s{i}", "text": "x"} for i in range(17)]
    with pytest.raises(ValueError, match="limits.max_evidence=16"):
        tools.validate_inputs("investigator", "rank", {**inputs, "evidence": evidence})


def test_too_many_documents_are_refused():
    with pytest.raises(ValueError, match=r"^inputs\['documents'\]: 257 entries exceed limits.max_documents=256$"):
        tools.validate_inputs("investigator", "retrieval", {"queries": ["q"], "documents": ["d"] * 257})


def test_a_batch_over_the_limit_is_refused_before_any_input_is_read():
    tool = tools.create("chatbot", limits={"max_batch": 2})
    with pytest.raises(ValueError, match="^inputs: a batch of 3 inputs exceeds limits.max_batch=2$"):
        tools.predict(tool, "reply", ["a", "b", "c"])


def test_a_text_over_the_limit_is_refused():
    with pytest.raises(ValueError, match="^inputs: text of 10001 characters exceeds limits.max_text_chars=10000$"):
        tools.validate_inputs("chatbot", "reply", "x" * 10_001)


def test_an_image_over_the_side_limit_is_refused_before_it_is_resized():
    inputs, _ = good("scene", "rank")
    huge = {**inputs, "pixels": torch.zeros(3, 1025, 8)}
    message = r"^inputs\['pixels'\]: image of 1025x8 pixels exceeds limits.max_image_side=1024$"
    with pytest.raises(ValueError, match=message):
        tools.create("scene")(huge)
    with pytest.raises(ValueError, match=message):
        tools.validate_inputs("scene", "rank", huge)


def test_limits_stay_out_of_the_training_fingerprint():
    """Raising a limit must not orphan experiences or checkpoints captured before."""
    a = tools.create("decision")._objective_op.configuration()
    b = tools.create("decision", limits={"max_batch": 1000})._objective_op.configuration()
    assert a == b
