"""validate_inputs / validate_target: torch-free, and the same verdict and message as Trainer.capture."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tool_cases import good

from tensorcode import tools
from tensorcode.training import Trainer

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[3]
PAIRS = [(name, mode) for name in tools.names() for mode in tools.MODES[name]]

_TEXT_TARGETS = ["", 3, ["a"], "x" * 5000]
BAD_TARGETS = {
    "rank": ["zzz", 7, -1, True, [0.5, 0.6], [1.0], [float("nan"), 1.0], {"id": "a"}, None],
    "verification": ["maybe", 1, "Entailment", None],
    "proposal": _TEXT_TARGETS,
    "language": _TEXT_TARGETS,
    "reply": _TEXT_TARGETS,
    "retrieval": [[[False, False]], [[1, 0]], [[True]], [[True, False], [True, False]], "yes"],
    "outcomes": [
        {"candidate_id": "zz", "outcome": 1.0}, {"candidate_id": "p1", "outcome": float("inf")},
        {"candidate_id": "p1"}, {"candidate_id": "p1", "outcome": 1, "note": "x"}, [1.0], "p1", [1.0, True],
    ],
}


def _bad_inputs(name: str, mode: str) -> list:
    inputs, _ = good(name, mode)
    if name == "chatbot":
        return ["", "   ", 5, {"text": "hi"}]
    first_key = sorted(inputs)[0]
    cases = [{**inputs, "bogus": 1}, {k: v for k, v in inputs.items() if k != first_key}, "text", [inputs]]
    for key in ("hypotheses", "plans", "candidates"):
        if key in inputs:
            cases.append({**inputs, key: [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]})
            cases.append({**inputs, key: [{"id": "a", "text": " "}]})
    if "evidence" in inputs:
        cases.append({**inputs, "evidence": [{"source_id": "s"}]})
    return cases


def _cases():
    for name, mode in PAIRS:
        inputs, target = good(name, mode)
        yield pytest.param(name, mode, inputs, target, id=f"{name}-{mode}-good")
        for i, bad in enumerate(BAD_TARGETS[mode]):
            yield pytest.param(name, mode, inputs, bad, id=f"{name}-{mode}-target{i}")
        for i, bad in enumerate(_bad_inputs(name, mode)):
            yield pytest.param(name, mode, bad, target, id=f"{name}-{mode}-inputs{i}")


def _verdict(call) -> str:
    try:
        call()
    except ValueError as exc:
        return str(exc)
    return "ok"


@pytest.mark.parametrize(("name", "mode", "inputs", "target"), list(_cases()))
def test_validate_target_gives_the_verdict_and_message_of_capture(name, mode, inputs, target):
    trainer = Trainer.from_tool(tools.create(name, mode=mode))
    captured = _verdict(lambda: trainer.capture({"mode": mode, "inputs": inputs}, target, source="review:1"))
    validated = _verdict(lambda: tools.validate_target(name, mode, inputs, target))
    if isinstance(inputs, list) and name != "chatbot":
        # One example's inputs are never a list; capture reads a list as a batch and refuses the lone target.
        assert validated.startswith("inputs: expected one example's inputs") and captured != "ok"
        return
    assert validated == captured
    assert "\n" not in validated


def test_validate_target_returns_json_targets():
    inputs, _ = good("decision", "rank")
    assert tools.validate_target("decision", "rank", inputs, 1) == "b"
    assert tools.validate_target("decision", "rank", inputs, [0.25, 0.75]) == [0.25, 0.75]
    plans, _ = good("planner", "outcomes")
    assert tools.validate_target("planner", "outcomes", plans, [1, 2]) == [1.0, 2.0]
    assert tools.validate_target("planner", "outcomes", plans, {"candidate_id": "p2", "outcome": 3}) == {
        "candidate_id": "p2", "outcome": 3.0,
    }


def test_validate_inputs_returns_normalized_inputs():
    inputs, _ = good("decision", "rank")
    assert tools.validate_inputs("decision", "rank", {k: v for k, v in inputs.items() if k != "evidence"}) == {
        "question": inputs["question"], "evidence": [], "hypotheses": inputs["hypotheses"],
    }


def test_validation_needs_no_torch(tmp_path):
    source = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "from tensorcode import tools\n"
        "inputs = {'question': 'q', 'hypotheses': [{'id': 'a', 'text': 'x'}]}\n"
        "assert tools.validate_target('decision', 'rank', inputs, 'a') == 'a'\n"
        "pixels = [[[0.5] * 4] * 4] * 3\n"
        "scene = {'pixels': pixels, 'source_id': 's', 'question': 'q'}\n"
        "assert tools.validate_target('scene', 'language', scene, 'a red circle') == 'a red circle'\n"
        "try:\n"
        "    tools.validate_target('decision', 'rank', inputs, 'b')\n"
        "except ValueError as exc:\n"
        "    print(exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", source], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "targets: unknown hypothesis id 'b'; supplied ids: 'a'"


def test_validate_inputs_refuses_an_unknown_tool_or_mode():
    with pytest.raises(ValueError, match="^name: unknown tool 'robot'"):
        tools.validate_inputs("robot", "rank", {})
    with pytest.raises(ValueError, match="^mode: unknown mode 'reply' for 'scene'"):
        tools.validate_inputs("scene", "reply", {})


def test_validate_inputs_checks_the_configuration_it_is_given():
    inputs, _ = good("decision", "rank")
    with pytest.raises(ValueError, match="^dim: 100000 is over the upper bound 512"):
        tools.validate_inputs("decision", "rank", inputs, {"dim": 100_000})


def test_validate_target_applies_the_configured_text_length():
    inputs, _ = good("chatbot", "reply")
    assert tools.validate_target("chatbot", "reply", inputs, "x" * 200, {"max_length": 256}) == "x" * 200
    with pytest.raises(ValueError, match="^targets: reviewed reply is 200 bytes, longer than max_length=96"):
        tools.validate_target("chatbot", "reply", inputs, "x" * 200)


def test_validate_target_refuses_training_a_frozen_retrieval_encoder():
    inputs, target = good("investigator", "retrieval")
    configuration = {"retrieval_encoder": {"frozen": True}}
    with pytest.raises(ValueError, match="^retrieval_encoder.frozen: "):
        tools.validate_target("investigator", "retrieval", inputs, target, configuration)


def test_scene_accepts_pixels_as_nested_lists():
    inputs, target = good("scene", "rank")
    listed = {**inputs, "pixels": inputs["pixels"].tolist()}
    tool = tools.create("scene")
    assert tool(listed)["selected_id"] == tool(inputs)["selected_id"]
    assert tools.validate_target("scene", "rank", listed, target) == target
