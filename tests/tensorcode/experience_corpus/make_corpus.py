"""Regenerate the malformed experience corpus: ``python tests/tensorcode/experience_corpus/make_corpus.py``.

``base.json`` is a valid experience saved by the library from a small deterministic trace (tensors of several
dtypes, keyword arguments, bytes, a tuple, a mapping, an allowlisted dataclass, an external boundary result and
two supervision records). Every other file is ``base.json`` with one defect; ``manifest.json`` maps each file to
a substring that ``load_experience``'s error message must contain. Load them with ``operations()`` and
``CODECS``. The test suite regenerates the corpus into a temporary directory and requires identical bytes, so
the committed files always match this script.
"""

from __future__ import annotations

import base64
import copy
import json
import struct
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
if str(HERE.parents[2]) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(HERE.parents[2]))

import tensorcode  # noqa: E402

LABELS = ["no", "yes"]


@dataclass(frozen=True)
class Record:
    """An application record; its constructor refuses a weight outside [0, 1]."""

    label: str
    weight: float

    def __post_init__(self):
        if not 0 <= self.weight <= 1:
            raise ValueError(f"weight must be in [0, 1], got {self.weight}")


CODECS = {"record-v1": Record}


def _scale(x, factor=1.0):
    return x * factor


def _consult(x, record):
    return x.sum(dim=-1) * record.weight


def _combine(x, score, extra):
    return x[:, :2] + score.unsqueeze(-1) + len(extra["tag"])


def operations() -> dict:
    """The bindings every corpus file was saved with (explicit configurations: stable across torch versions)."""
    return {
        "encode": tensorcode.operation(_scale, configuration={"op": "scale", "labels": LABELS}),
        "consult": tensorcode.external(_consult, configuration={"service": "oracle-v1"}),
        "combine": tensorcode.operation(_combine, configuration={"op": "combine"}),
    }


def base_document() -> dict:
    """The valid experience, as parsed JSON: three calls, four roots, two supervision records."""
    ops = operations()
    with tensorcode.trace() as session:
        x = torch.arange(6, dtype=torch.float32).reshape(2, 3) / 4  # (batch, features)
        h = ops["encode"](x, factor=0.5)
        score = ops["consult"](h, Record("yes", 0.25))
        out = ops["combine"](h, score, {"tag": b"\x01\x02", "pair": (1, 2), 3: [True, None]})
    session.supervise(out, torch.tensor([1, 0]), source="corpus:base")
    session.supervise(session.calls[1].output, Record("no", 1.0), loss="record", source=["corpus:a", "corpus:b"])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "base.json"
        session.save(path, operations=ops, codecs=CODECS)
        return json.loads(path.read_text(encoding="utf-8"))


def tensor_entry(dtype: str, shape: list, raw: bytes) -> dict:
    return {"$": "tensor", "dtype": dtype, "shape": shape, "b64": base64.b64encode(raw).decode("ascii")}


def edit(change: Callable[[dict], None]) -> Callable[[dict], str]:
    """A case built by changing a copy of the base document in place."""

    def build(base: dict) -> str:
        document = copy.deepcopy(base)
        change(document)
        return dump(document)

    return build


def text(change: Callable[[str], str]) -> Callable[[dict], str]:
    """A case built by changing the base file's text."""
    return lambda base: change(dump(base))


def dump(document: dict) -> str:
    return json.dumps(document, separators=(",", ":"))


def _root(index: int, value) -> Callable[[dict], None]:
    def change(document):
        document["roots"][index] = value

    return change


def _first_arg(document: dict, call: int) -> dict:
    return document["calls"][call]["args"]["items"][0]


def _set(path: tuple, value) -> Callable[[dict], None]:
    def change(document):
        node = document
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return change


def _delete(path: tuple) -> Callable[[dict], None]:
    def change(document):
        node = document
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return change


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


NAN32 = struct.pack("<6f", 0.0, 0.25, float("nan"), 0.75, 1.0, 1.25)
INF32 = struct.pack("<6f", 0.0, 0.25, float("inf"), 0.75, 1.0, 1.25)
# Root 0 is the (2, 3) float32 input; its payload is 24 bytes.
TENSOR = ("roots", 0)

# file name -> (builder, substring the load error must contain)
CASES: dict[str, tuple[Callable[[dict], str], str]] = {
    # JSON itself
    "truncated_json.json": (lambda base: dump(base)[: len(dump(base)) // 2], "not valid JSON"),
    "empty_file.json": (lambda base: "", "not valid JSON"),
    "trailing_garbage.json": (text(lambda t: t + "}"), "not valid JSON"),
    "not_an_object.json": (lambda base: "[]", "must be a JSON object"),
    "duplicate_keys.json": (
        text(lambda t: t.replace('{"format":', '{"version":1,"format":', 1)),
        "duplicate key 'version'",
    ),
    "duplicate_nested_keys.json": (
        text(lambda t: t.replace('"op":"encode",', '"op":"encode","op":"encode",', 1)),
        "duplicate key 'op'",
    ),
    "nan_constant.json": (text(lambda t: t.replace('"roots":[', '"roots":[NaN,', 1)), "non-finite constant NaN"),
    "infinity_constant.json": (
        text(lambda t: t.replace('"roots":[', '"roots":[-Infinity,', 1)),
        "non-finite constant -Infinity",
    ),
    "overflowing_number.json": (text(lambda t: t.replace('"roots":[', '"roots":[1e999,', 1)), "non-finite number"),
    "huge_integer.json": (text(lambda t: t.replace('"roots":[', '"roots":[' + "9" * 5000 + ",", 1)), "digits"),
    "deeply_nested_payload.json": (
        text(lambda t: t.replace('"roots":[', '"roots":[' + _nested(100_000) + ",", 1)),
        "nested too deeply",
    ),
    "nested_beyond_limit.json": (
        text(lambda t: t.replace('"roots":[', '"roots":[' + _nested(150) + ",", 1)),
        "nested more than 100 levels",
    ),
    # top level
    "unknown_format.json": (edit(_set(("format",), "tensorcode.checkpoint")), "unknown format 'tensorcode.checkpoint'"),
    "unknown_version.json": (edit(_set(("version",), 2)), "unsupported experience version 2"),
    "string_version.json": (edit(_set(("version",), "1")), "unsupported experience version '1'"),
    "boolean_version.json": (edit(_set(("version",), True)), "unsupported experience version True"),
    "missing_top_level_field.json": (edit(_delete(("supervisions",))), "missing fields ['supervisions']"),
    "extra_top_level_field.json": (edit(_set(("comment",), "hello")), "unexpected fields ['comment']"),
    "bindings_not_a_mapping.json": (edit(_set(("bindings",), [])), "bindings must be a mapping"),
    "roots_not_a_list.json": (edit(_set(("roots",), {})), "roots must be a list"),
    "calls_not_a_list.json": (edit(_set(("calls",), None)), "calls must be a list"),
    # bindings and fingerprints
    "missing_binding.json": (
        edit(lambda d: d["bindings"].__setitem__("decode", d["bindings"]["combine"])),
        "missing binding 'decode'",
    ),
    "undeclared_binding.json": (edit(_set(("calls", 2, "op"), "ghost")), "operation 'ghost' is not a declared binding"),
    "fingerprint_label_order.json": (
        edit(_set(("bindings", "encode", "configuration", "labels"), LABELS[::-1])),
        "fingerprint mismatch for binding 'encode': configuration.labels[0]",
    ),
    "fingerprint_type.json": (
        edit(_set(("bindings", "encode", "type"), "os.system")),
        "fingerprint mismatch for binding 'encode': type",
    ),
    "fingerprint_replay.json": (
        edit(_set(("bindings", "consult", "replay"), "pure")),
        "fingerprint mismatch for binding 'consult': replay",
    ),
    "fingerprint_state.json": (
        edit(_set(("bindings", "combine", "state"), [["weight", [2, 2], "float32", True]])),
        "fingerprint mismatch for binding 'combine': state",
    ),
    "kind_mismatch.json": (edit(_set(("calls", 0, "kind"), "external")), "kind 'external' does not match binding"),
    "pure_call_with_result.json": (edit(_set(("calls", 0, "result"), 1)), "a pure call stores no result"),
    "call_not_an_object.json": (edit(_set(("calls", 0), 5)), "call 0: must be an object"),
    "call_missing_field.json": (edit(_delete(("calls", 0, "kwargs"))), "call 0: missing fields ['kwargs']"),
    "arguments_not_a_tuple.json": (
        edit(lambda d: d["calls"][0].__setitem__("args", d["calls"][0]["args"]["items"])),
        "arguments must be a tuple",
    ),
    # DAG references
    "forward_reference.json": (
        edit(lambda d: _first_arg(d, 1).__setitem__("call", 2)),
        "forward reference to call 2",
    ),
    "self_reference.json": (edit(lambda d: _first_arg(d, 1).__setitem__("call", 1)), "forward reference to call 1"),
    "dangling_reference.json": (
        edit(lambda d: _first_arg(d, 1).__setitem__("call", 99)),
        "dangling reference to call 99",
    ),
    "negative_reference.json": (
        edit(lambda d: _first_arg(d, 1).__setitem__("call", -1)),
        "reference call must be a nonnegative integer",
    ),
    "dangling_root.json": (edit(lambda d: _first_arg(d, 0).__setitem__("index", 99)), "dangling reference to input 99"),
    "dangling_supervision.json": (
        edit(_set(("supervisions", 0, "output", "call"), 99)),
        "supervision 0: dangling reference to call 99",
    ),
    "reference_outside_arguments.json": (
        edit(_root(0, {"$": "ref", "call": 0, "path": []})),
        "unknown codec tag 'ref'",
    ),
    # codec tags
    "pickle_tag.json": (
        edit(_root(0, {"$": "pickle", "data": "gASVIQAAAAAAAACMBXBvc2l4lIwGc3lzdGVtlJOUjAVlY2hvIJSFlFKULg=="})),
        "unknown codec tag 'pickle'",
    ),
    "untagged_object.json": (edit(_root(0, {"module": "os", "name": "system"})), "unknown codec tag None"),
    "dataclass_not_allowlisted.json": (
        edit(_set(("supervisions", 1, "target", "codec"), "os.system")),
        "dataclass codec 'os.system' is not in the allowlist",
    ),
    "dataclass_class_path.json": (
        edit(lambda d: d["roots"][2].__setitem__("codec", "make_corpus.Record")),
        "dataclass codec 'make_corpus.Record' is not in the allowlist",
    ),
    "dataclass_codec_not_a_string.json": (
        edit(lambda d: d["roots"][2].__setitem__("codec", ["record-v1"])),
        "is not in the allowlist",
    ),
    "dataclass_missing_field.json": (
        edit(lambda d: d["roots"][2]["fields"].pop("weight")),
        "fields ['label'] != ['label', 'weight']",
    ),
    "dataclass_rejected_by_constructor.json": (
        edit(lambda d: d["roots"][2]["fields"].__setitem__("weight", -1.0)),
        "codec 'record-v1' rejected its fields",
    ),
    "mapping_item_not_a_pair.json": (
        edit(lambda d: d["roots"][3]["items"].append([1, 2, 3])),
        "mapping items must be [key, value] pairs",
    ),
    "unhashable_mapping_key.json": (
        edit(lambda d: d["roots"][3]["items"].append([[1], 2])),
        "unhashable mapping key",
    ),
    "bytes_not_base64.json": (
        edit(lambda d: d["roots"][3]["items"][0][1].__setitem__("b64", "AQI*")),
        "invalid base64",
    ),
    # tensor payloads
    "nonfinite_tensor.json": (edit(_set(TENSOR, tensor_entry("float32", [2, 3], NAN32))), "non-finite values"),
    "infinite_tensor.json": (edit(_set(TENSOR, tensor_entry("float32", [2, 3], INF32))), "non-finite values"),
    "complex_tensor.json": (
        edit(_set(TENSOR, tensor_entry("complex64", [2, 3], bytes(48)))),
        "complex tensor payloads are unsupported",
    ),
    "sparse_tensor.json": (
        edit(_set(TENSOR, {
            "$": "tensor", "layout": "sparse_coo", "dtype": "float32", "shape": [2, 3],
            "indices": [[0, 1], [2, 0]], "b64": base64.b64encode(struct.pack("<2f", 1.0, 2.0)).decode("ascii"),
        })),
        "sparse tensor payloads are unsupported",
    ),
    "base64_garbage.json": (edit(_set((*TENSOR, "b64"), "this is not base64!")), "invalid base64"),
    "base64_non_ascii.json": (edit(_set((*TENSOR, "b64"), "AAAA\u00e9AAA")), "invalid base64"),
    "base64_bad_padding.json": (edit(_set((*TENSOR, "b64"), "AAAAA")), "invalid base64"),
    "shape_byte_count_mismatch.json": (
        edit(_set((*TENSOR, "shape"), [2, 4])),
        "needs 32 bytes, payload has 24",
    ),
    "truncated_tensor_payload.json": (
        edit(_set(TENSOR, tensor_entry("float32", [2, 3], bytes(20)))),
        "needs 24 bytes, payload has 20",
    ),
    "negative_shape.json": (edit(_set((*TENSOR, "shape"), [-2, -3])), "shape must be a list of nonnegative integers"),
    "too_many_dimensions.json": (
        edit(_set(TENSOR, tensor_entry("float32", [1] * 40, bytes(4)))),
        "too many dimensions",
    ),
    "unknown_dtype.json": (edit(_set((*TENSOR, "dtype"), "float8_e4m3fn")), "unknown tensor dtype 'float8_e4m3fn'"),
    "dtype_not_a_string.json": (edit(_set((*TENSOR, "dtype"), ["float32"])), "unknown tensor dtype"),
    "bool_tensor_not_zero_or_one.json": (
        edit(_set(TENSOR, tensor_entry("bool", [2], b"\x01\x02"))),
        "bool tensor payload holds values other than 0 and 1",
    ),
    "tensor_extra_field.json": (edit(_set((*TENSOR, "requires_grad"), True)), "'tensor' entry has fields"),
    # supervision records
    "supervision_missing_field.json": (edit(_delete(("supervisions", 0, "source"))), "missing fields ['source']"),
    "empty_source.json": (edit(_set(("supervisions", 0, "source"), " ")), "source must be a nonempty provenance"),
    "empty_loss.json": (edit(_set(("supervisions", 0, "loss"), "")), "loss must be a nonempty string"),
    "bad_output_path.json": (
        edit(_set(("supervisions", 0, "output", "path"), [True])),
        "an output path is a list of integer or string keys",
    ),
}


def main(directory: Path = HERE) -> None:
    """Write ``base.json``, every case and ``manifest.json`` into ``directory``."""
    base = base_document()
    (directory / "base.json").write_text(dump(base), encoding="utf-8")
    manifest = {}
    for name, (build, expected) in CASES.items():
        (directory / name).write_text(build(base), encoding="utf-8")
        manifest[name] = expected
    manifest["invalid_utf8.json"] = "cannot read experience file"
    (directory / "invalid_utf8.json").write_bytes(b"\xff\xfe" + dump(base).encode("ascii"))
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
