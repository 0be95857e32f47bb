"""Tools by registered name: the registry, create, load_pretrained, predict, and artifacts free of module paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tool_cases import good

import tensorcode
from tensorcode import tools
from tensorcode.training import Trainer

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[3]

PAIRS = [(name, mode) for name in tools.names() for mode in tools.MODES[name]]
pair_ids = [f"{name}-{mode}" for name, mode in PAIRS]


def test_names_and_modes_are_the_documented_ones():
    assert tools.names() == ("chatbot", "decision", "investigator", "planner", "scene")
    assert dict(tools.MODES) == {
        "investigator": ("rank", "verification", "proposal", "retrieval"),
        "decision": ("rank",),
        "planner": ("outcomes", "proposal"),
        "scene": ("rank", "language"),
        "chatbot": ("reply",),
    }


def test_importing_the_registry_does_not_import_torch(tmp_path):
    source = (
        "import sys, tensorcode.tools as tools\n"
        "assert tools.names() and tools.MODES and issubclass(tools.ToolError, ValueError)\n"
        "print(sorted(n for n in sys.modules if n == 'torch' or n.startswith('torch.')))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", source], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("name", tools.names())
def test_get_returns_the_class_registered_under_its_name(name):
    cls = tools.get(name)
    assert issubclass(cls, tools.Tool) and name == cls.NAME


def test_get_refuses_an_unknown_name_listing_the_registered_ones():
    with pytest.raises(ValueError, match="^tool: unknown tool 'robot'; registered tools: chatbot, decision"):
        tools.get("robot")


@pytest.mark.parametrize(("name", "mode"), PAIRS, ids=pair_ids)
def test_create_builds_a_tool_that_predicts_in_that_mode(name, mode):
    tool = tools.create(name, mode=mode)
    inputs, _ = good(name, mode)
    receipts = tools.predict(tool, mode, [inputs, inputs])
    assert len(receipts) == 2 and all(isinstance(r, dict) for r in receipts)


def test_create_passes_configuration_through():
    assert tools.create("decision", dim=8).configuration()["dim"] == 8


def test_create_scene_sets_its_configured_mode():
    assert tools.create("scene", mode="language").configuration()["mode"] == "language"


def test_create_refuses_a_mode_the_tool_does_not_have():
    with pytest.raises(ValueError, match="^mode: unknown mode 'reply' for 'decision'; valid modes: rank$"):
        tools.create("decision", mode="reply")


def test_predict_refuses_a_mode_of_another_tool():
    with pytest.raises(ValueError, match="^mode: unknown mode 'language' for 'planner'"):
        tools.predict(tools.create("planner"), "language", [])


def test_predict_of_no_inputs_is_no_receipts():
    assert tools.predict(tools.create("decision"), "rank", []) == []


@pytest.mark.parametrize("name", tools.names())
def test_load_pretrained_builds_the_saved_tool_in_eval_mode(name, tmp_path):
    tools.create(name).save_pretrained(tmp_path / "model")
    loaded = tools.load_pretrained(tmp_path / "model")
    assert type(loaded) is tools.get(name) and not loaded.training


def test_from_pretrained_returns_eval_mode(tmp_path):
    tools.create("decision").save_pretrained(tmp_path / "model")
    assert not tools.get("decision").from_pretrained(tmp_path / "model").training


def _edit_manifest(directory: Path, **changes) -> None:
    manifest = json.loads((directory / "tool.json").read_text())
    manifest.update(changes)
    (directory / "tool.json").write_text(json.dumps(manifest))


def test_load_pretrained_refuses_an_unknown_tool_name(tmp_path):
    tools.create("decision").save_pretrained(tmp_path / "model")
    _edit_manifest(tmp_path / "model", tool="robot")
    with pytest.raises(tools.ToolError, match="tool: unknown tool 'robot'; registered tools: chatbot"):
        tools.load_pretrained(tmp_path / "model")


def test_load_pretrained_refuses_a_newer_format_version(tmp_path):
    tools.create("decision").save_pretrained(tmp_path / "model")
    _edit_manifest(tmp_path / "model", version=2)
    with pytest.raises(tools.ToolError, match="version: written by a newer tensorcode"):
        tools.load_pretrained(tmp_path / "model")


def test_load_pretrained_refuses_a_manifest_naming_a_class(tmp_path):
    tools.create("decision").save_pretrained(tmp_path / "model")
    (tmp_path / "model" / "tool.json").write_text(
        json.dumps({"format": "tensorcode.tool", "version": 1, "class": "x.Decision", "configuration": {}})
    )
    with pytest.raises(tools.ToolError, match="older manifest that names a Python class"):
        tools.load_pretrained(tmp_path / "model")


def test_tool_error_is_exported_and_a_value_error():
    assert tensorcode.ToolError is tools.ToolError and issubclass(tools.ToolError, ValueError)


@pytest.mark.parametrize(("name", "mode"), PAIRS, ids=pair_ids)
def test_no_file_the_library_writes_names_a_module_path(name, mode, tmp_path):
    """tool.json, model.safetensors, an experience file and a checkpoint directory of every tool and mode."""
    tool = tools.create(name, mode=mode)
    tool.save_pretrained(tmp_path / "model")
    trainer = Trainer.from_tool(tool)
    inputs, target = good(name, mode)
    envelope = [inputs] if name == "chatbot" else {"mode": mode, "inputs": [inputs]}
    session = trainer.capture(envelope, [target], source="review:test")
    session.save(tmp_path / "experience.json", operations=trainer.operations, release=True)
    trainer.save_checkpoint(tmp_path / "checkpoint", progress={"position": 1})
    written = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert len(written) >= 5
    for path in written:
        assert b"tensorcode." not in path.read_bytes(), path


def test_what_users_subclass_catch_or_annotate_with_is_exported():
    assert tools.Tool is tools.get("decision").__mro__[1]
    assert tools.CapturePlan is type(tools.create("decision").prepare_capture(*good("decision", "rank")))
    assert all(issubclass(error, (ValueError, RuntimeError)) for error in (
        tensorcode.CheckpointError, tensorcode.ExperienceError, tensorcode.FingerprintError,
        tensorcode.StaleIndexError, tensorcode.ToolError, tensorcode.TraceError,
    ))
    assert tools.StaleIndexError is tensorcode.StaleIndexError


@pytest.mark.parametrize("name", tools.names())
def test_every_tool_satisfies_the_trainer_protocol(name):
    assert isinstance(tools.create(name), tools.TrainableTool)


def test_fingerprints_name_the_registered_tool_and_still_tell_tools_apart():
    from tensorcode._fingerprint import describe, difference

    decision = describe(tools.create("decision")._objective_op)
    planner = describe(tools.create("planner")._objective_op)
    assert decision["type"] == "tool-objective" and decision["configuration"]["tool"] == "tool:decision"
    assert difference(decision, planner) is not None
    assert describe(tools.create("decision"))["type"] == "tool:decision"


def test_a_subclass_of_a_registered_tool_keeps_its_own_type_name():
    from tensorcode._fingerprint import describe

    class MyDecision(tools.get("decision")):
        pass

    assert describe(MyDecision())["type"].endswith("MyDecision")
