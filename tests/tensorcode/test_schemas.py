"""The JSON Schemas shipped in tensorcode/schemas: in sync with the code, and met by what the library writes."""

from __future__ import annotations

import json
from importlib import resources

import pytest
import torch
from schema_sources import SCHEMAS, tool_schema, validator
from tool_cases import good

from tensorcode import tools
from tensorcode.training import Trainer

torch.set_num_threads(1)


def test_the_schemas_ship_inside_the_package():
    names = {p.name for p in resources.files("tensorcode").joinpath("schemas").iterdir()}
    assert {"tool.schema.json", "experience.schema.json", "training.schema.json"} <= names


def test_the_tool_schema_is_the_one_the_configuration_classes_describe():
    """Regenerate with ``PYTHONPATH=. python tests/tensorcode/schema_sources.py`` after changing a bound."""
    assert json.loads((SCHEMAS / "tool.schema.json").read_text()) == json.loads(json.dumps(tool_schema()))


@pytest.mark.parametrize("name", ["tool", "experience", "training"])
def test_each_schema_is_a_valid_json_schema(name):
    validator(name).check_schema(validator(name).schema)


def test_the_tool_schema_refuses_an_out_of_bounds_configuration():
    document = {"format": "tensorcode-tool", "version": 1, "tool": "decision", "configuration": {"dim": 100_000}}
    assert not validator("tool").is_valid(document)
    document["configuration"]["dim"] = 64
    assert validator("tool").is_valid(document)


def test_the_tool_schema_refuses_a_class_path():
    document = {"format": "tensorcode-tool", "version": 1, "tool": "decision", "configuration": {}, "class": "x.Y"}
    assert not validator("tool").is_valid(document)


@pytest.mark.parametrize("name", tools.names())
def test_files_written_for_a_tool_match_their_schemas(name, tmp_path):
    """Written through the library; the conftest checks each file as it is written, this re-reads them."""
    mode = tools.MODES[name][0]
    tool = tools.create(name, mode=mode)
    tool.save_pretrained(tmp_path / "model")
    trainer = Trainer.from_tool(tool)
    inputs, target = good(name, mode)
    session = trainer.capture({"mode": mode, "inputs": inputs}, target, source="review:1")
    trainer.step(session)
    session.save(tmp_path / "experience.json", operations=trainer.operations)
    trainer.save_checkpoint(tmp_path / "checkpoint", progress={"epoch": 0, "position": 1})
    for path, kind in [
        (tmp_path / "model" / "tool.json", "tool"),
        (tmp_path / "experience.json", "experience"),
        (tmp_path / "checkpoint" / "training.json", "training"),
    ]:
        validator(kind).validate(json.loads(path.read_text()))
