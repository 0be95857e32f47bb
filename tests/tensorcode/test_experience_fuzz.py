"""Property: whatever a damaged experience file holds, ``load_experience`` either loads it or raises
``ExperienceError``. Mutations of the valid corpus file: byte flips, truncation, insertions and deletions of
bytes, and JSON-level value replacements, deletions, insertions and swaps. Each property is bounded by
``max_examples`` so the whole module takes a few seconds."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import tensorcode
from tensorcode import ExperienceError, training

torch.set_num_threads(1)
CORPUS = Path(__file__).resolve().parent / "experience_corpus"
BASE_TEXT = (CORPUS / "base.json").read_bytes()
BASE = json.loads(BASE_TEXT)
# The autouse artifact fixture is function scoped; it holds no per-example state these properties rely on.
FUZZ = settings(
    max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _load_maker():
    name = "experience_corpus_maker"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, CORPUS / "make_corpus.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


maker = _load_maker()
OPERATIONS = maker.operations()


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "experience.json"


def load_or_refuse(path: Path, data: bytes) -> None:
    """The property itself: a load succeeds or raises ExperienceError; anything else propagates and fails."""
    path.write_bytes(data)
    try:
        session = training.load_experience(path, operations=OPERATIONS, codecs=maker.CODECS)
    except ExperienceError as exc:
        assert str(exc)
    else:
        assert isinstance(session, tensorcode.Trace)


# -- byte-level mutations -----------------------------------------------------------------------------------------
def _flip(data: bytearray, position: int, mask: int) -> None:
    data[position % len(data)] ^= mask


def _truncate(data: bytearray, position: int, _mask: int) -> None:
    del data[position % len(data):]


def _insert(data: bytearray, position: int, mask: int) -> None:
    data[position % (len(data) + 1):position % (len(data) + 1)] = bytes([mask]) * (1 + mask % 3)


def _delete(data: bytearray, position: int, mask: int) -> None:
    start = position % len(data)
    del data[start:start + 1 + mask % 8]


BYTE_EDITS = st.lists(
    st.tuples(
        st.sampled_from([_flip, _truncate, _insert, _delete]),
        st.integers(min_value=0, max_value=len(BASE_TEXT) - 1),
        st.integers(min_value=1, max_value=255),
    ),
    min_size=1,
    max_size=4,
)


@FUZZ
@given(edits=BYTE_EDITS)
def test_byte_mutations_load_or_raise_experience_error(target, edits):
    data = bytearray(BASE_TEXT)
    for edit, position, mask in edits:
        if data:
            edit(data, position, mask)
    load_or_refuse(target, bytes(data))


# -- JSON-level mutations -----------------------------------------------------------------------------------------
def _paths(node, prefix=()) -> list[tuple]:
    """Every path to a value inside the document (excluding the document itself), depth first."""
    out = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        out.append((*prefix, key))
        out.extend(_paths(value, (*prefix, key)))
    return out


PATHS = _paths(BASE)
TAGS = ["$", "tensor", "ref", "root", "tuple", "dict", "bytes", "dataclass", "record-v1", "pickle", "float32",
        "int64", "bool", "bfloat16", "complex64", "encode", "consult", "combine", "pure", "external", "AAAA",
        "AAAAAA==", "tensorcode.experience", "tensorcode.Operation", "labels", "", " "]
FIELDS = ["$", "items", "call", "path", "index", "dtype", "shape", "b64", "codec", "fields", "op", "kind", "args",
          "kwargs", "result", "output", "target", "loss", "source", "label", "weight", "layout", "indices"]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-3, max_value=8)
    | st.integers()
    | st.sampled_from([2**63, -(2**63) - 1, 10**30])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(TAGS)
    | st.text(max_size=6)
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=4), children, max_size=4),
    max_leaves=12,
)


def _parent(document, path):
    node = document
    for key in path[:-1]:
        node = node[key]
    return node


def _replace(document, path, value, _other):
    _parent(document, path)[path[-1]] = value


def _remove(document, path, _value, _other):
    del _parent(document, path)[path[-1]]


def _add(document, path, value, _other):
    parent = _parent(document, path)
    if isinstance(parent, list):
        parent.insert(path[-1], value)
    else:
        parent[f"{path[-1]}_extra" if isinstance(value, dict) else "$"] = value


def _swap(document, path, _value, other):
    if path[: len(other)] == other or other[: len(path)] == path:
        return  # one contains the other
    a, b = _parent(document, path), _parent(document, other)
    a[path[-1]], b[other[-1]] = copy.deepcopy(b[other[-1]]), copy.deepcopy(a[path[-1]])


JSON_EDITS = st.lists(
    st.tuples(st.sampled_from([_replace, _remove, _add, _swap]), st.sampled_from(PATHS), VALUES,
              st.sampled_from(PATHS)),
    min_size=1,
    max_size=3,
)


@FUZZ
@given(edits=JSON_EDITS)
# Found by this test: a tensor given to a dataclass whose constructor compares it raised RuntimeError.
@example(edits=[(_swap, ("roots", 2, "fields", "weight"), None, ("supervisions", 0, "target"))])
def test_json_mutations_load_or_raise_experience_error(target, edits):
    document = copy.deepcopy(BASE)
    for edit, path, value, other in edits:
        try:
            edit(document, path, value, other)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed or retyped this path
    load_or_refuse(target, json.dumps(document, allow_nan=True).encode("utf-8"))


@FUZZ
@given(path=st.sampled_from(PATHS), value=VALUES)
def test_single_value_replacements_load_or_raise_experience_error(target, path, value):
    """One value anywhere replaced by arbitrary JSON: the most common shape of a hand-edited file."""
    document = copy.deepcopy(BASE)
    _replace(document, path, value, None)
    load_or_refuse(target, json.dumps(document, allow_nan=True).encode("utf-8"))
