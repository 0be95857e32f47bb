"""Built-in codecs of experience files: primitives, bytes, lists/tuples, mappings, finite dense real tensors
(raw little-endian bytes in base64, restored on CPU) and allowlisted dataclasses; everything else is refused
at save with a message naming it."""

from __future__ import annotations

import base64
import collections
import dataclasses
import json
import types
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import tensorcode
from tensorcode import ExperienceError, training

torch.set_num_threads(1)


@tensorcode.operation(configuration={"op": "keep"})
def keep(*args, **kwargs):
    return 0


@tensorcode.operation(configuration={"op": "first"})
def first(value):
    return value.x if dataclasses.is_dataclass(value) else value


@tensorcode.external(configuration={"op": "oracle"})
def oracle(value):
    return Record(value, {"answer": 42})


OPS = {"keep": keep, "first": first, "oracle": oracle}


@dataclasses.dataclass(frozen=True)
class Record:
    """An application record that refreezes its metadata mapping, as a frozen dataclass should."""

    x: object
    meta: object = None

    def __post_init__(self):
        if isinstance(self.meta, dict):
            object.__setattr__(self, "meta", types.MappingProxyType(dict(self.meta)))


CODECS = {"record-v1": Record}


def save_root(value, path, codecs=None):
    """Save a one-call trace whose only root is ``value``."""
    with tensorcode.trace() as session:
        keep(value)
    session.save(path, operations=OPS, codecs=codecs)


def roundtrip(value, tmp_path, codecs=None):
    """``value`` as a root after saving and loading."""
    path = tmp_path / "experience.json"
    save_root(value, path, codecs)
    loaded = training.load_experience(path, operations=OPS, codecs=codecs)
    return loaded.value(loaded.inputs[0])


def root_entry(path):
    return json.loads(path.read_text(encoding="utf-8"))["roots"][0]


# -- primitives, bytes, containers ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value",
    [None, True, False, 0, -7, 2**70, 1.5, -0.0, 1e-300, 1.0, "", "naïve ✓ \x00 \"quoted\" \\ \n", "$"],
    ids=repr,
)
def test_primitives_round_trip_with_their_type(tmp_path, value):
    loaded = roundtrip(value, tmp_path)
    assert type(loaded) is type(value)
    assert loaded == value
    if isinstance(value, float):
        assert str(loaded) == str(value)  # -0.0 keeps its sign


@pytest.mark.parametrize("value", [b"", b"\x00\xff\x10 raw", bytearray(b"\x01\x02")], ids=repr)
def test_bytes_round_trip_as_bytes(tmp_path, value):
    loaded = roundtrip(value, tmp_path)
    assert type(loaded) is bytes and loaded == bytes(value)


def test_tuples_stay_tuples_and_lists_stay_lists(tmp_path):
    value = ([1, (2, 3)], (), [], ((4,), [5, [6, ()]]))
    loaded = roundtrip(value, tmp_path)
    assert loaded == value
    assert type(loaded) is tuple and type(loaded[0]) is list and type(loaded[0][1]) is tuple
    assert type(loaded[3][0]) is tuple and type(loaded[3][1][1][1]) is tuple


def test_mappings_round_trip_with_non_string_keys_in_order(tmp_path):
    value = {"b": 1, 2: "two", (1, "x"): [None], None: {"nested": b"\x00"}, False: 0.5, "$": "not a tag"}
    loaded = roundtrip(value, tmp_path)
    assert loaded == value
    assert list(loaded) == list(value)


def test_mapping_proxy_becomes_a_data_mapping(tmp_path):
    loaded = roundtrip(types.MappingProxyType({"a": 1, "b": (2,)}), tmp_path)
    assert type(loaded) is dict and loaded == {"a": 1, "b": (2,)}


def test_plain_json_objects_are_always_tagged(tmp_path):
    """A mapping is stored as tagged pairs, so a user key named "$" can never pose as a codec tag."""
    path = tmp_path / "experience.json"
    save_root({"$": "pickle"}, path)
    assert root_entry(path) == {"$": "dict", "items": [["$", "pickle"]]}


# -- tensors -------------------------------------------------------------------------------------------------------
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool]


def sample(dtype, shape=(2, 3)):
    generator = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=generator) * 100).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, generator=generator, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tensors_restore_exactly_on_cpu_with_dtype_and_shape(tmp_path, dtype):
    tensor = sample(dtype)
    loaded = roundtrip(tensor, tmp_path)
    assert loaded.dtype == dtype and loaded.shape == tensor.shape and loaded.device.type == "cpu"
    assert torch.equal(loaded, tensor)
    loaded.zero_()  # restored tensors own writable memory, not the file's buffer
    assert not torch.equal(loaded, tensor)


@pytest.mark.parametrize(
    "tensor",
    [torch.tensor(3.5), torch.zeros(0, 3), torch.arange(12.0).reshape(3, 4).t(), torch.arange(10)[::3],
     torch.ones(2, 2, requires_grad=True), nn.Parameter(torch.ones(3))],
    ids=["scalar", "empty", "transposed", "strided", "requires-grad", "parameter"],
)
def test_tensor_layouts_restore_as_plain_dense_tensors(tmp_path, tensor):
    loaded = roundtrip(tensor, tmp_path)
    assert type(loaded) is torch.Tensor and not loaded.requires_grad
    assert loaded.shape == tensor.shape and torch.equal(loaded, tensor.detach())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tensor_payload_is_base64_of_raw_little_endian_bytes(tmp_path, dtype):
    tensor = sample(dtype)
    path = tmp_path / "experience.json"
    save_root(tensor, path)
    entry = root_entry(path)
    assert set(entry) == {"$", "dtype", "shape", "b64"}
    assert entry["$"] == "tensor" and entry["dtype"] == str(dtype).removeprefix("torch.") and entry["shape"] == [2, 3]
    array = tensor.view(torch.int16).numpy() if dtype == torch.bfloat16 else tensor.numpy()
    assert base64.b64decode(entry["b64"], validate=True) == array.astype(array.dtype.newbyteorder("<")).tobytes()


@pytest.mark.parametrize("shape", [(64, 64, 3), (1_000_000,)], ids=["image-64x64x3", "1M-elements"])
def test_tensor_files_stay_within_1_4x_of_the_raw_bytes(tmp_path, shape):
    tensor = torch.rand(shape, generator=torch.Generator().manual_seed(0))
    path = tmp_path / "experience.json"
    save_root(tensor, path)
    raw = tensor.numel() * tensor.element_size()
    assert path.stat().st_size <= 1.4 * raw
    assert "[0." not in path.read_text(encoding="utf-8")  # never nested number lists
    assert torch.equal(training.load_experience(path, operations=OPS).value(tensorcode.InputRef(0)), tensor)


def test_many_tensor_payloads_land_in_their_own_places(tmp_path):
    """Payloads are spliced into the written file; strings shaped like the splice markers stay strings."""
    tensors = [sample(DTYPES[i % len(DTYPES)], (i % 4, 3)) for i in range(40)]
    decoys = ['0123abcd:0', '"0123abcd:1"', "b64", ":".join(["f" * 32, "0"])]
    value = {"tensors": tensors, "decoys": decoys, "nested": [(t, str(i)) for i, t in enumerate(tensors[:5])]}
    loaded = roundtrip(value, tmp_path)
    assert loaded["decoys"] == decoys
    assert all(a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(loaded["tensors"], tensors, strict=True))
    assert [i for _, i in loaded["nested"]] == ["0", "1", "2", "3", "4"]
    assert all(torch.equal(a, b) for (a, _), b in zip(loaded["nested"], tensors, strict=False))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_restore_on_cpu(tmp_path):
    tensor = torch.arange(6.0, device="cuda").reshape(2, 3)
    loaded = roundtrip(tensor, tmp_path)
    assert loaded.device.type == "cpu" and torch.equal(loaded, tensor.cpu())


def test_large_finite_values_whose_sum_overflows_still_save(tmp_path):
    """Finiteness is about elements, not their sum: 3e38 + 3e38 overflows float32 but both are finite."""
    for tensor in (torch.full((4,), 3e38), torch.full((8,), 60000.0, dtype=torch.float16)):
        assert torch.equal(roundtrip(tensor, tmp_path), tensor)


@pytest.mark.parametrize(
    "tensor",
    [
        torch.tensor([1.0, float("nan")]),
        torch.tensor([float("inf"), 1.0]),
        torch.tensor([float("inf"), -float("inf")]),
        torch.tensor([0.0, float("-inf")], dtype=torch.bfloat16),
        torch.zeros(100_000).index_fill_(0, torch.tensor([77_777]), float("nan")),
    ],
    ids=["nan", "inf", "inf-minus-inf", "bfloat16-inf", "one-nan-in-100k"],
)
def test_non_finite_tensors_are_refused_at_save(tmp_path, tensor):
    path = tmp_path / "experience.json"
    with pytest.raises(ExperienceError, match=r"input 0: tensor holds non-finite values \(NaN or infinity\)"):
        save_root(tensor, path)
    assert not path.exists()


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
    SPARSE_CSR = torch.eye(3).to_sparse_csr()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (torch.eye(3).to_sparse(), r"sparse tensors cannot be saved; make it dense with `.to_dense\(\)`"),
        (SPARSE_CSR, r"sparse tensors cannot be saved"),
        (torch.ones(2, dtype=torch.complex64), r"complex tensors cannot be saved"),
        (torch.ones(2, dtype=torch.uint16), r"tensor dtype uint16 is not supported"),
        (torch.ones(2).to(torch.float8_e4m3fn), r"tensor dtype float8_e4m3fn is not supported"),
        (float("nan"), r"non-finite float nan cannot be saved"),
        (float("inf"), r"non-finite float inf cannot be saved"),
        (1 + 2j, r"unsupported value of type complex"),
        (object(), r"unsupported value of type object \(opaque objects cannot be saved\)"),
        ({1, 2}, r"unsupported value of type set"),
        (len, r"unsupported value of type builtin_function_or_method"),
        (collections.namedtuple("Point", "x y")(1, 2), r"unsupported value of type Point"),
        (np.float32(1.0), r"unsupported value of type float32"),
        ([{"deep": [object()]}], r"unsupported value of type object"),
    ],
    ids=["sparse-coo", "sparse-csr", "complex", "uint16", "float8", "nan", "inf", "complex-number", "object", "set",
         "builtin", "namedtuple", "numpy-scalar", "nested-object"],
)
def test_unsupported_values_are_refused_at_save_with_a_clear_error(tmp_path, value, message):
    path = tmp_path / "experience.json"
    with pytest.raises(ExperienceError, match=message):
        save_root(value, path)
    assert not path.exists()


def test_values_nested_beyond_the_codec_limit_are_refused_at_save(tmp_path):
    with tensorcode.trace() as session:
        value = [first(torch.ones(1))]
        for _ in range(99):
            value = [value]
        keep(value)  # a dependency 100 lists deep: its argument tree is one level deeper than the codec allows
    path = tmp_path / "experience.json"
    with pytest.raises(ExperienceError, match="call 1 arguments: value is nested more than 100 levels deep"):
        session.save(path, operations=OPS)
    assert not path.exists()


# -- dataclasses -----------------------------------------------------------------------------------------------------
def test_registered_dataclass_round_trips_and_refreezes_its_mapping_proxy(tmp_path):
    record = Record((torch.arange(3), [b"x"]), {"k": (1, 2)})
    assert isinstance(record.meta, types.MappingProxyType)
    loaded = roundtrip(record, tmp_path, CODECS)
    assert type(loaded) is Record
    assert torch.equal(loaded.x[0], torch.arange(3)) and loaded.x[1] == [b"x"] and type(loaded.x) is tuple
    assert isinstance(loaded.meta, types.MappingProxyType) and dict(loaded.meta) == {"k": (1, 2)}


def test_dataclass_is_stored_under_its_tag_not_its_class_name(tmp_path):
    path = tmp_path / "experience.json"
    save_root(Record(1), path, CODECS)
    entry = root_entry(path)
    assert entry == {"$": "dataclass", "codec": "record-v1", "fields": {"x": 1, "meta": None}}
    assert "Record" not in path.read_text(encoding="utf-8")


def test_dataclass_without_codec_is_refused_at_save(tmp_path):
    path = tmp_path / "experience.json"
    message = r"input 0: dataclass Record has no codec; pass codecs=\{'<tag>': Record\}"
    with pytest.raises(ExperienceError, match=message):
        save_root(Record(1), path)
    assert not path.exists()


def test_dataclass_without_codec_is_refused_at_load(tmp_path):
    path = tmp_path / "experience.json"
    save_root(Record(1), path, CODECS)
    with pytest.raises(ExperienceError, match=r"dataclass codec 'record-v1' is not in the allowlist \(codecs=\[\]\)"):
        training.load_experience(path, operations=OPS)
    with pytest.raises(ExperienceError, match=r"not in the allowlist \(codecs=\['other'\]\)"):
        training.load_experience(path, operations=OPS, codecs={"other": Record})


def test_unregistered_subclass_of_a_registered_dataclass_is_refused(tmp_path):
    @dataclasses.dataclass(frozen=True)
    class Special(Record):
        pass

    with pytest.raises(ExperienceError, match=r"dataclass \S*Special has no codec"):
        save_root(Special(1), tmp_path / "experience.json", CODECS)


def test_load_constructs_whichever_class_the_application_registers_for_the_tag(tmp_path):
    """The tag is the contract; the loader looks it up in the allowlist and never resolves a class by name."""

    @dataclasses.dataclass
    class Renamed:
        x: object
        meta: object

    path = tmp_path / "experience.json"
    save_root(Record(7, {"a": 1}), path, CODECS)
    loaded = training.load_experience(path, operations=OPS, codecs={"record-v1": Renamed})
    assert loaded.value(loaded.inputs[0]) == Renamed(7, {"a": 1})


@pytest.mark.parametrize(
    "codecs",
    [{"": Record}, {1: Record}, {"x": object}, {"x": Record(1)}, {"x": dict}],
    ids=["empty-tag", "int-tag", "plain-class", "instance", "builtin"],
)
def test_codecs_must_map_nonempty_tags_to_dataclass_types(tmp_path, codecs):
    with pytest.raises(ExperienceError, match="must map a nonempty string tag to a dataclass type"):
        save_root(1, tmp_path / "experience.json", codecs)


def test_dataclass_fields_that_do_not_match_the_registered_class_are_refused(tmp_path):
    @dataclasses.dataclass
    class Narrow:
        x: object

    path = tmp_path / "experience.json"
    save_root(Record(1), path, CODECS)
    with pytest.raises(ExperienceError, match=r"codec 'record-v1' fields \['meta', 'x'\] != \['x'\]"):
        training.load_experience(path, operations=OPS, codecs={"record-v1": Narrow})


def _dataclass_as_root(codecs, path):
    with tensorcode.trace() as session:
        keep(Record(torch.ones(2)))
    session.save(path, operations=OPS, codecs=codecs)
    return "input 0", lambda s: s.value(s.inputs[0])


def _dataclass_as_context(codecs, path):
    with tensorcode.trace() as session:
        keep(1, context=Record("ctx", {"user": "u1"}))
    session.save(path, operations=OPS, codecs=codecs)
    return "input 1", lambda s: s.value(s.inputs[1])


def _dataclass_as_target(codecs, path):
    with tensorcode.trace() as session:
        out = first(torch.ones(2))
    session.supervise(out, Record(torch.zeros(2)), loss="custom", source="test")
    session.save(path, operations=OPS, codecs=codecs)
    return "supervision 0 target", lambda s: s.supervisions[0].target


def _dataclass_as_boundary_value(codecs, path):
    with tensorcode.trace() as session:
        oracle(torch.ones(2))
    session.save(path, operations=OPS, codecs=codecs)
    return "call 0 result", lambda s: s.calls[0].recorded


def _dataclass_dependency_tree(codecs, path):
    with tensorcode.trace() as session:
        hidden = first(torch.ones(2))
        first(Record(hidden, {"k": 1}))  # a dataclass holding a captured output: a dependency
    session.save(path, operations=OPS, codecs=codecs)
    return "call 1 arguments", lambda s: s.replay(s.calls[1].output)


@pytest.mark.parametrize(
    "place",
    [_dataclass_as_root, _dataclass_as_context, _dataclass_as_target, _dataclass_as_boundary_value,
     _dataclass_dependency_tree],
    ids=["root", "context", "target", "boundary-value", "dependency-tree"],
)
def test_dataclass_allowlist_covers_every_place_a_value_is_stored(tmp_path, place):
    path = tmp_path / "experience.json"
    with pytest.raises(ExperienceError, match="dataclass Record has no codec") as info:
        place(None, path)
    assert not path.exists()
    where, read = place(CODECS, path)
    assert str(info.value).startswith(where)
    with pytest.raises(ExperienceError, match=f"{where}: dataclass codec 'record-v1' is not in the allowlist"):
        training.load_experience(path, operations=OPS)
    value = read(training.load_experience(path, operations=OPS, codecs=CODECS))
    assert value is not None


def test_dataclass_dependency_tree_replays_through_the_registered_class(tmp_path):
    path = tmp_path / "experience.json"
    _dataclass_dependency_tree(CODECS, path)
    loaded = training.load_experience(path, operations=OPS, codecs=CODECS)
    assert torch.equal(loaded.replay(loaded.calls[1].output), torch.ones(2))


def test_reconstructible_pure_intermediate_outputs_need_no_codec(tmp_path):
    """A pure call's dataclass output is recomputed by replay, so only its reference is stored."""

    @tensorcode.operation(configuration={"op": "wrap"})
    def wrap(x):
        return Record(x * 2)

    path = tmp_path / "experience.json"
    with tensorcode.trace() as session:
        first(wrap(torch.ones(2)))
    session.supervise(session.calls[1].output, torch.zeros(2), loss="mse", source="test")
    ops = {**OPS, "wrap": wrap}
    session.save(path, operations=ops)  # no codecs
    loaded = training.load_experience(path, operations=ops)
    assert torch.equal(loaded.replay(loaded.supervisions[0].output), torch.full((2,), 2.0))


def test_boundary_dataclass_with_mapping_proxy_is_refrozen_on_load(tmp_path):
    path = tmp_path / "experience.json"
    _dataclass_as_boundary_value(CODECS, path)
    recorded = training.load_experience(path, operations=OPS, codecs=CODECS).calls[0].recorded
    assert type(recorded) is Record and isinstance(recorded.meta, types.MappingProxyType)
    assert dict(recorded.meta) == {"answer": 42}


def test_text_that_looks_like_a_payload_key_is_plain_text(tmp_path):
    """The loader lifts base64 payloads out before parsing; look-alike text inside strings is untouched."""
    value = ['"b64":"AAAA"', "@0", b"\x00\x01", torch.arange(4.0), {'"b64":"': '"b64":"@1"'}]
    restored = roundtrip(value, tmp_path)
    assert restored[:2] == value[:2] and restored[2] == value[2] and restored[4] == value[4]
    assert torch.equal(restored[3], value[3])
