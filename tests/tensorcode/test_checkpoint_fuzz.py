"""Property: whatever a damaged checkpoint directory holds, ``Trainer.load_checkpoint`` either loads it or raises
``CheckpointError``; nothing else escapes (no TypeError, RecursionError, MemoryError, safetensors or torch
error). Mutations: arbitrary JSON values anywhere in ``training.json``, its bytes, and the tensors file's bytes
with the recorded checksum and size kept consistent so the header and tensor checks are reached."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from tensorcode import training
from tensorcode.errors import CheckpointError

torch.set_num_threads(1)
FUZZ = settings(
    max_examples=120, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def make() -> training.Trainer:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.1), nn.Linear(4, 2))
    trainer = training.Trainer.from_ops({"net": net}, optimizer=lambda ps: torch.optim.Adam(ps, lr=0.01))
    for p in trainer.parameters:
        p.grad = torch.ones_like(p)
    trainer.optimizer.step()
    trainer.steps = 1
    return trainer


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("fuzz-original") / "run"
    make().save_checkpoint(directory, progress={"next": 3, "names": ["a", "b"]})
    return directory


@pytest.fixture(scope="module")
def trainer() -> training.Trainer:
    return make()


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz-work")


def fresh(original: Path, work: Path) -> tuple[Path, dict, Path]:
    directory = work / "run"
    shutil.rmtree(directory, ignore_errors=True)
    shutil.copytree(original, directory)
    record = json.loads((directory / "training.json").read_text())
    return directory, record, directory / record["tensors"]["file"]


def load_or_refuse(trainer, directory: Path) -> None:
    try:
        progress = trainer.load_checkpoint(directory)
    except CheckpointError as exc:
        assert str(exc)
    else:
        assert isinstance(progress, dict)


def _paths(node, prefix=()) -> list[tuple]:
    out = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        out.append((*prefix, key))
        out.extend(_paths(value, (*prefix, key)))
    return out


def _manifest_paths() -> list[tuple]:
    torch.manual_seed(0)
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        make().save_checkpoint(Path(scratch) / "run", progress={"next": 3, "names": ["a", "b"]})
        return _paths(json.loads((Path(scratch) / "run" / "training.json").read_text()))


PATHS = _manifest_paths()
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-3, max_value=8)
    | st.integers()
    | st.sampled_from([2**63, 2**64, -(2**63) - 1, 10**30])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(["float32", "int64", "uint8", "bool", "F32", "torch.optim.adam.Adam", "SGD", "", "0",
                      "net/0.weight", "step", "exp_avg", "tensors-" + "0" * 32 + ".safetensors", "../x"])
    | st.text(max_size=6)
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)


def _set(document, path, value) -> None:
    node = document
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _consistent(directory: Path, record: dict, tensors: Path) -> None:
    data = tensors.read_bytes()
    record["tensors"].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (directory / "training.json").write_text(json.dumps(record, allow_nan=True))


@FUZZ
@given(edits=st.lists(st.tuples(st.sampled_from(PATHS), VALUES), min_size=1, max_size=3))
def test_json_value_replacements_load_or_raise_checkpoint_error(original, work, trainer, edits):
    directory, record, _ = fresh(original, work)
    document = copy.deepcopy(record)
    for path, value in edits:
        try:
            _set(document, path, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed or retyped this path
    (directory / "training.json").write_text(json.dumps(document, allow_nan=True))
    load_or_refuse(trainer, directory)


@FUZZ
@given(position=st.integers(min_value=0), mask=st.integers(min_value=1, max_value=255),
       cut=st.booleans())
def test_training_json_byte_damage_loads_or_raises_checkpoint_error(original, work, trainer, position, mask, cut):
    directory, _, _ = fresh(original, work)
    data = bytearray((directory / "training.json").read_bytes())
    if cut:
        del data[position % len(data):]
    else:
        data[position % len(data)] ^= mask
    (directory / "training.json").write_bytes(bytes(data))
    load_or_refuse(trainer, directory)


@FUZZ
@given(
    edits=st.lists(
        st.tuples(st.integers(min_value=0, max_value=2**16), st.integers(min_value=1, max_value=255)),
        min_size=1, max_size=4,
    ),
    in_header=st.booleans(),
    cut=st.none() | st.integers(min_value=0, max_value=2**16),
)
def test_tensors_file_damage_with_a_matching_checksum_loads_or_raises(original, work, trainer, edits, in_header, cut):
    """The checksum is recomputed, so every byte of the header and every tensor value is really parsed."""
    directory, record, tensors = fresh(original, work)
    data = bytearray(tensors.read_bytes())
    header = 8 + int.from_bytes(data[:8], "little")
    for position, mask in edits:
        where = position % header if in_header else position % len(data)
        data[where] ^= mask
    if cut is not None:
        del data[cut % (len(data) + 1):]
    tensors.write_bytes(bytes(data))
    _consistent(directory, record, tensors)
    load_or_refuse(trainer, directory)
