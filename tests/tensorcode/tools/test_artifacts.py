"""What every owned tool shares through ``Tool``: JSON configuration, seeds, and strict pretrained artifacts."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import load_file, save_file

from tensorcode.tools._base import Tool
from tensorcode.tools.chatbot import Chatbot
from tensorcode.tools.decision import Decision
from tensorcode.tools.investigator import Investigator
from tensorcode.tools.planner import Planner
from tensorcode.tools.scene import Scene

torch.set_num_threads(1)

TOOLS = [Investigator, Decision, Planner, Scene, Chatbot]
ids = [cls.__name__ for cls in TOOLS]


@pytest.mark.parametrize("cls", TOOLS, ids=ids)
def test_constructs_from_no_arguments_with_json_configuration(cls):
    tool = cls()
    configuration = tool.configuration()
    assert json.loads(json.dumps(configuration)) == configuration
    assert cls(**configuration).configuration() == configuration


@pytest.mark.parametrize("cls", TOOLS, ids=ids)
def test_unknown_field_is_refused_naming_it_and_the_valid_fields(cls):
    with pytest.raises(ValueError, match="unknown configuration field 'colour'") as refused:
        cls(colour="red")
    for field in cls.FIELDS:
        assert field in str(refused.value)


@pytest.mark.parametrize("cls", TOOLS, ids=ids)
def test_configuration_values_must_be_json_data(cls):
    with pytest.raises(ValueError, match="^seed: "):
        cls(seed=torch.tensor(1))


@pytest.mark.parametrize("cls", TOOLS, ids=ids)
def test_seed_makes_initialisation_reproducible(cls):
    a, b, c = cls(seed=7), cls(seed=7), cls(seed=8)
    state_a, state_b, state_c = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    assert any(not torch.equal(state_a[k], state_c[k]) for k in state_a if state_a[k].is_floating_point())


@pytest.mark.parametrize("cls", TOOLS, ids=ids)
def test_save_pretrained_writes_a_small_manifest_and_safetensors_only(cls, tmp_path):
    tool = cls(seed=3)
    tool.save_pretrained(tmp_path / "model")
    assert sorted(os.listdir(tmp_path / "model")) == ["model.safetensors", "tool.json"]
    manifest = json.loads((tmp_path / "model" / "tool.json").read_text())
    assert manifest == {
        "format": "tensorcode-tool",
        "version": 1,
        "tool": cls.NAME,
        "configuration": tool.configuration(),
    }
    restored = cls.from_pretrained(tmp_path / "model")
    saved = tool.state_dict()
    assert all(torch.equal(v, saved[k]) for k, v in restored.state_dict().items())


@pytest.mark.parametrize("cls", TOOLS, ids=ids)
def test_from_pretrained_refuses_another_tools_artifact(cls, tmp_path):
    other = Decision if cls is not Decision else Planner
    other().save_pretrained(tmp_path / "other")
    with pytest.raises(ValueError, match=f"holds a '{other.NAME}' tool, not '{cls.NAME}'"):
        cls.from_pretrained(tmp_path / "other")


@pytest.mark.parametrize("cls", TOOLS, ids=ids)
def test_from_pretrained_refuses_unknown_fields_naming_them(cls, tmp_path):
    cls().save_pretrained(tmp_path / "model")
    manifest_path = tmp_path / "model" / "tool.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["configuration"]["colour"] = "red"
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="unknown configuration field 'colour'; valid fields: "):
        cls.from_pretrained(tmp_path / "model")


@pytest.mark.parametrize("cls", TOOLS, ids=ids)
def test_from_pretrained_lists_missing_and_unexpected_weights_sorted(cls, tmp_path):
    cls().save_pretrained(tmp_path / "model")
    weights = tmp_path / "model" / "model.safetensors"
    state = load_file(weights)
    dropped = sorted(state)[:2]
    for key in dropped:
        del state[key]
    state["zz.extra"] = torch.zeros(1)
    state["aa.extra"] = torch.zeros(1)
    save_file(state, weights)
    with pytest.raises(ValueError) as refused:
        cls.from_pretrained(tmp_path / "model")
    assert f"missing weights {dropped}, unexpected weights ['aa.extra', 'zz.extra']" in str(refused.value)


@pytest.mark.parametrize("cls", TOOLS, ids=ids)
def test_from_pretrained_refuses_a_weight_of_the_wrong_shape(cls, tmp_path):
    cls().save_pretrained(tmp_path / "model")
    weights = tmp_path / "model" / "model.safetensors"
    state = load_file(weights)
    key = sorted(k for k, v in state.items() if v.dim() >= 1)[0]
    state[key] = torch.zeros(*(d + 1 for d in state[key].shape), dtype=state[key].dtype)
    save_file(state, weights)
    with pytest.raises(ValueError, match=f"{key} is"):
        cls.from_pretrained(tmp_path / "model")


def test_from_pretrained_takes_local_directories_only(tmp_path):
    with pytest.raises(ValueError, match="not a directory saved by save_pretrained"):
        Decision.from_pretrained("https://example.invalid/decision")
    (tmp_path / "file").write_text("{}")
    with pytest.raises(ValueError, match="not a directory"):
        Decision.from_pretrained(tmp_path / "file")


@pytest.mark.parametrize("broken", ["{not json", json.dumps({"format": "other", "version": 1}), "[]"])
def test_from_pretrained_refuses_a_broken_manifest(tmp_path, broken):
    Decision().save_pretrained(tmp_path / "model")
    (tmp_path / "model" / "tool.json").write_text(broken)
    with pytest.raises(ValueError, match="tool.json"):
        Decision.from_pretrained(tmp_path / "model")


class _Drifting(Tool):
    """A tool whose reported configuration differs from the one it was built from."""

    FIELDS = {"seed": 0, "width": 2}

    def build(self):
        self.layer = torch.nn.Linear(self._configuration["width"], 1)

    def configuration(self):
        return {**super().configuration(), "width": self._configuration["width"] + 1}


def test_from_pretrained_refuses_a_configuration_that_does_not_round_trip(tmp_path):
    _Drifting().save_pretrained(tmp_path / "model")
    with pytest.raises(ValueError, match="configuration does not round-trip"):
        _Drifting.from_pretrained(tmp_path / "model")


def test_a_failed_save_leaves_the_previous_artifact_untouched(tmp_path, monkeypatch):
    Decision(seed=1).save_pretrained(tmp_path / "model")
    before = {name: (tmp_path / "model" / name).read_bytes() for name in os.listdir(tmp_path / "model")}

    def fail(*args):
        raise OSError("simulated: disk full")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError, match="disk full"):
        Decision(seed=2).save_pretrained(tmp_path / "model")
    monkeypatch.undo()
    after = {name: (tmp_path / "model" / name).read_bytes() for name in os.listdir(tmp_path / "model")}
    assert after == before
