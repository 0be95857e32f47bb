"""Loading tool artifacts from untrusted directories: links, pipes, sizes, hostile JSON and weights."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from tensorcode import tools
from tests.work import counted

torch.set_num_threads(1)
SMALL = {"dim": 4, "buckets": 16, "max_words": 4}


@pytest.fixture
def saved(tmp_path) -> Path:
    tools.create("decision", **SMALL).save_pretrained(tmp_path / "model")
    return tmp_path / "model"


def _refused(directory: Path, message: str) -> None:
    with pytest.raises(tools.ToolError, match=message):
        tools.load_pretrained(directory)


def test_weights_linked_to_a_file_outside_the_directory_are_refused(saved, tmp_path):
    tools.create("decision", **{**SMALL, "seed": 9}).save_pretrained(tmp_path / "other")
    (saved / "model.safetensors").unlink()
    (saved / "model.safetensors").symlink_to(tmp_path / "other" / "model.safetensors")
    _refused(saved, "symbolic link leading outside")


def test_manifest_linked_to_a_device_is_refused(saved):
    (saved / "tool.json").unlink()
    (saved / "tool.json").symlink_to("/dev/zero")
    _refused(saved, "symbolic link leading outside")


def test_a_link_inside_the_directory_is_followed(saved):
    (saved / "weights.bin").write_bytes((saved / "model.safetensors").read_bytes())
    (saved / "model.safetensors").unlink()
    (saved / "model.safetensors").symlink_to("weights.bin")
    assert isinstance(tools.load_pretrained(saved), tools.get("decision"))


@pytest.mark.parametrize("name", ["tool.json", "model.safetensors"])
def test_a_named_pipe_is_refused_without_blocking(saved, name):
    (saved / name).unlink()
    os.mkfifo(saved / name)
    outcome: list = []
    worker = threading.Thread(target=lambda: outcome.append(_error(saved)), daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert outcome and "not a regular file" in outcome[0]


def test_a_directory_in_place_of_the_manifest_is_refused(saved):
    (saved / "tool.json").unlink()
    (saved / "tool.json").mkdir()
    _refused(saved, "not a regular file")


def test_a_missing_weights_file_is_refused(saved):
    (saved / "model.safetensors").unlink()
    _refused(saved, "model.safetensors: cannot read")


def test_a_manifest_over_the_size_limit_is_refused(saved):
    manifest = json.loads((saved / "tool.json").read_text())
    (saved / "tool.json").write_text(json.dumps(manifest) + " " * (1 << 20))
    _refused(saved, "over the 1048576-byte limit")


def test_very_deep_json_in_the_manifest_is_refused_cleanly(saved):
    (saved / "tool.json").write_text("[" * 200_000 + "]" * 200_000)
    _refused(saved, "nested deeper than 32 levels")


def test_moderately_deep_json_in_the_configuration_is_refused(saved):
    manifest = json.loads((saved / "tool.json").read_text())
    manifest["configuration"]["seed"] = json.loads("[" * 40 + "]" * 40)
    (saved / "tool.json").write_text(json.dumps(manifest))
    _refused(saved, "nested deeper than 32 levels")


def test_nan_in_the_manifest_is_refused(saved):
    (saved / "tool.json").write_text((saved / "tool.json").read_text().replace('"seed": 0', '"seed": NaN'))
    _refused(saved, "not valid JSON: NaN is not JSON")


def test_an_edited_size_is_refused_before_anything_is_built(saved, monkeypatch):
    manifest = json.loads((saved / "tool.json").read_text())
    manifest["configuration"]["buckets"] = 10**9
    (saved / "tool.json").write_text(json.dumps(manifest))
    built = []
    monkeypatch.setattr(tools.get("decision"), "build", lambda self: built.append(self))
    _refused(saved, r"configuration: buckets: 1000000000 is over the upper bound 65536")
    assert built == []


def test_weights_of_another_layout_are_refused_before_the_tool_is_built(saved, monkeypatch):
    state = load_file(saved / "model.safetensors")
    key = sorted(state)[0]
    state[key] = torch.zeros(4096, 4096)
    save_file(state, saved / "model.safetensors")
    built = []
    original = tools.get("decision").build

    def build(self):
        built.append(next(iter(self.parameters()), torch.zeros(0)).is_meta if list(self.parameters()) else None)
        original(self)

    monkeypatch.setattr(tools.get("decision"), "build", build)
    _refused(saved, f"{key} is \\(4096, 4096\\) F32, expected")
    assert all(flag is not False for flag in built)  # only the meta-device skeleton was built


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused(saved, value):
    state = load_file(saved / "model.safetensors")
    key = sorted(k for k, v in state.items() if v.is_floating_point())[0]
    state[key].view(-1)[0] = value
    save_file(state, saved / "model.safetensors")
    _refused(saved, f"{key} holds NaN or infinite values")


def test_weights_that_are_not_a_safetensors_file_say_so(saved):
    (saved / "model.safetensors").write_bytes(b"\x00" * 64)  # an 8-byte length of 0, then no header
    _refused(saved, r"model.safetensors: not a safetensors file \(its header: not valid JSON: Expecting value")


def test_a_header_longer_than_the_file_is_refused(saved):
    data = (saved / "model.safetensors").read_bytes()
    (saved / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + data[8:])
    _refused(saved, "header length .* is larger than the file")


def test_truncated_weights_are_refused(saved):
    data = (saved / "model.safetensors").read_bytes()
    (saved / "model.safetensors").write_bytes(data[:-4])
    _refused(saved, "the file is .* bytes; its header describes")


def test_overlapping_data_offsets_are_refused(saved):
    data = (saved / "model.safetensors").read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + length])
    keys = sorted(k for k in header if k != "__metadata__")
    header[keys[1]]["data_offsets"] = header[keys[0]]["data_offsets"]
    text = json.dumps(header).encode()
    text += b" " * (length - len(text)) if len(text) <= length else b""
    (saved / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + data[8 + length :])
    with pytest.raises(tools.ToolError):
        tools.load_pretrained(saved)


def test_a_manifest_with_an_unknown_key_is_refused(saved):
    manifest = json.loads((saved / "tool.json").read_text())
    manifest["class"] = "os.system"
    (saved / "tool.json").write_text(json.dumps(manifest))
    _refused(saved, "unknown key 'class'; valid keys: configuration, format, tool, version")


def test_a_refused_load_is_quick_even_for_a_large_hostile_header(saved):
    data = (saved / "model.safetensors").read_bytes()
    hostile = b"[" * (15 << 20)
    (saved / "model.safetensors").write_bytes(struct.pack("<Q", len(hostile)) + hostile + data)
    with counted() as work:
        _refused(saved, "nested deeper|not valid JSON")
    # Counted, not timed (`tests.work`): parsing the 15 MB header in Python would take millions of calls.
    assert work.calls < 50_000, f"refusing took {work.calls:,} calls"


def _error(directory: Path) -> str:
    try:
        tools.load_pretrained(directory)
    except tools.ToolError as exc:
        return str(exc)
    return "loaded"


_ORIGINAL: dict[str, bytes] = {}


def _original(tmp_path_factory) -> dict[str, bytes]:
    if not _ORIGINAL:
        directory = tmp_path_factory.mktemp("original")
        tools.create("decision", **SMALL).save_pretrained(directory)
        _ORIGINAL.update({name: (directory / name).read_bytes() for name in ("tool.json", "model.safetensors")})
    return _ORIGINAL


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_artifacts_load_or_raise_tool_error(tmp_path_factory, data):
    """Random byte edits, truncations and insertions into either file: a tool or a ToolError, nothing else."""
    files = dict(_original(tmp_path_factory))
    name = data.draw(st.sampled_from(sorted(files)))
    content = bytearray(files[name])
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["replace", "truncate", "insert"]))
        position = data.draw(st.integers(0, max(len(content) - 1, 0)))
        if action == "replace" and content:
            content[position] = data.draw(st.integers(0, 255))
        elif action == "truncate":
            del content[position:]
        else:
            content[position:position] = data.draw(st.binary(min_size=1, max_size=16))
    files[name] = bytes(content)
    directory = tmp_path_factory.mktemp("fuzz")
    for filename, payload in files.items():
        (directory / filename).write_bytes(payload)
    try:
        tool = tools.load_pretrained(directory)
    except tools.ToolError:
        pass
    else:
        assert not tool.training
    finally:
        shutil.rmtree(directory)


@pytest.mark.parametrize(("name", "mode"), [(n, m) for n in tools.names() for m in tools.MODES[n]])
def test_the_meta_skeleton_has_the_layout_of_a_real_build(name, mode):
    """The skeleton skips initialisers, so it must still name, shape and type every tensor as a real build."""
    from tensorcode.tools._base import meta_skeleton

    tool = tools.create(name, mode=mode)
    skeleton = meta_skeleton(type(tool), tool.configuration())
    real = {k: (v.dtype, v.shape) for k, v in tool.state_dict().items()}
    assert {k: (v.dtype, v.shape) for k, v in skeleton.state_dict().items()} == real
    assert all(v.is_meta for v in skeleton.state_dict().values())


def test_loading_a_tool_does_not_import_torch_dynamo(tmp_path):
    """torch._dynamo costs seconds to import; a tool that only predicts never needs it (``tensorcode evaluate``)."""
    for name in tools.names():
        tools.create(name, **({"dim": 8} if name != "scene" else {})).save_pretrained(tmp_path / name)
    source = (
        "import sys\nfrom tensorcode import tools\n"
        f"for name in {list(tools.names())!r}:\n"
        f"    tools.load_pretrained({str(tmp_path)!r} + '/' + name)\n"
        "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo was imported'\n"
    )
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", source], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "build",
    [
        lambda: 0.02 * torch.randn(3, 4),
        lambda: torch.randn(3, 1) + torch.randn(4),
        lambda: torch.arange(4) / 2,
        lambda: torch.arange(4) - 1.5,
        lambda: 3 - torch.arange(4, dtype=torch.int16),
        lambda: torch.stack([torch.zeros(2, dtype=torch.int32), torch.zeros(2)], dim=-1),
        lambda: torch.stack(torch.meshgrid(torch.linspace(-1, 1, 3), torch.linspace(-1, 1, 3), indexing="ij"), 1),
        lambda: torch.eye(3, 5, dtype=torch.float64),
        lambda: torch.nn.init.trunc_normal_(torch.empty(2, 3)).mul_(2),
    ],
)
def test_the_skeleton_gives_the_shapes_and_dtypes_of_a_real_computation(build):
    from tensorcode.tools._base import _SkipInitialisation

    real = build()
    with torch.device("meta"), _SkipInitialisation():
        meta = build()
    assert meta.is_meta and (meta.shape, meta.dtype) == (real.shape, real.dtype)
