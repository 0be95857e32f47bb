"""Experience files written by an attacker: links, pipes and devices, sizes near and past the limits, shapes
that overflow, nesting, millions of containers and keys. Each is refused with ``ExperienceError`` naming the
problem, quickly and without reading more than the file; nothing else ever escapes."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
import torch

import tensorcode
from tensorcode import ExperienceError, experience, training
from tensorcode._fingerprint import describe
from tensorcode.experience import MAX_BYTES, MIN_CONTAINERS
from tests.work import counted

torch.set_num_threads(1)


@tensorcode.operation(configuration={"op": "total"})
def total(x):
    return x.sum()


OPS = {"total": total}


def document(root) -> dict:
    """A valid experience document whose one call consumes ``root`` (an encoded value)."""
    return {
        "format": "tensorcode.experience",
        "version": 1,
        "bindings": {"total": describe(total)},
        "roots": [root],
        "calls": [{"op": "total", "kind": "pure", "args": {"$": "tuple", "items": [{"$": "root", "index": 0}]},
                   "kwargs": {"$": "dict", "items": []}, "result": None}],
        "supervisions": [],
    }


def write(path: Path, value) -> Path:
    path.write_bytes(value if isinstance(value, bytes) else json.dumps(value).encode())
    return path


def load(path, **limits):
    return training.load_experience(path, operations=OPS, **limits)


def refused(path, match: str, *, most_calls: int = 50_000, **limits) -> ExperienceError:
    """Load `path`, expecting `match`; the refusal must be quick, counted as calls made (`tests.work`), not timed."""
    with pytest.raises(ExperienceError, match=match) as info, counted() as work:
        load(path, **limits)
    assert work.calls < most_calls, f"refusing took {work.calls:,} calls: the loader walked the hostile input"
    assert len(str(info.value)) < 600, "the message repeats the hostile content"
    return info.value


def tensor(shape, b64="", dtype="float32") -> dict:
    return {"$": "tensor", "dtype": dtype, "shape": shape, "b64": b64}


# -- what the path names ----------------------------------------------------------------------------------------
def test_a_named_pipe_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "experience.json"
    os.mkfifo(fifo)
    refused(fifo, "named pipe, not a regular file")


def test_a_link_to_a_device_is_refused_without_reading_it(tmp_path):
    link = tmp_path / "experience.json"
    link.symlink_to("/dev/zero")
    refused(link, "character device, not a regular file")


def test_a_link_to_a_pipe_is_refused(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    (tmp_path / "experience.json").symlink_to(fifo)
    refused(tmp_path / "experience.json", "named pipe")


def test_a_link_to_a_regular_file_is_followed(tmp_path):
    real = write(tmp_path / "real.json", document(tensor([2], "AAAAAAAAAAA=")))
    (tmp_path / "link.json").symlink_to(real)
    assert load(tmp_path / "link.json")._roots[0].shape == (2,)


def test_a_pipe_swapped_in_after_the_look_is_caught_on_the_open_descriptor(tmp_path, monkeypatch):
    """The check is repeated on the open file, so replacing the path between stat and open gains nothing."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    real = write(tmp_path / "experience.json", document(None))
    opened = os.open

    def swapped(path, flags, *args):
        return opened(fifo if Path(path) == real else path, flags, *args)

    monkeypatch.setattr(os, "open", swapped)
    refused(real, "named pipe")


# -- size --------------------------------------------------------------------------------------------------------
def test_a_file_over_max_bytes_is_refused_before_reading(tmp_path):
    path = write(tmp_path / "e.json", document("x" * 1000))
    size = path.stat().st_size
    refused(path, f"{size:,} bytes, over the limit of {size - 1:,} bytes; pass a larger max_bytes", max_bytes=size - 1)
    assert load(path, max_bytes=size)._roots[0] == "x" * 1000


def test_a_sparse_file_past_the_default_limit_is_refused_at_once(tmp_path):
    path = tmp_path / "huge.json"
    with open(path, "wb") as handle:
        handle.truncate(MAX_BYTES + 1)  # no disk used; reading it would take seconds and 256 MiB
    refused(path, "over the limit of 268,435,456 bytes")


# -- containers, nesting, keys ------------------------------------------------------------------------------------
def test_millions_of_empty_containers_are_refused_by_count_before_parsing(tmp_path):
    path = write(tmp_path / "e.json", json.dumps(document([[]] * 2_000_000)).encode())
    refused(path, "2,000,0[0-9][0-9] JSON arrays and objects, over the limit of")


def test_the_container_limit_follows_the_file_size_and_can_be_raised(tmp_path):
    containers = MIN_CONTAINERS + 10
    path = write(tmp_path / "e.json", document([[]] * containers))
    refused(path, "over the limit of 100,000; pass a larger max_containers")
    assert len(load(path, max_containers=containers + 20)._roots[0]) == containers


def test_a_file_just_under_the_container_limit_loads(tmp_path):
    path = write(tmp_path / "e.json", document([[]] * (MIN_CONTAINERS - 20)))
    assert len(load(path)._roots[0]) == MIN_CONTAINERS - 20


@pytest.mark.parametrize(
    ("opening", "depth"), [("[", 50_000), ("[", 5_000), ('{"$":"tuple","items":[', 5_000), ("[ ", 5_000)]
)
def test_deep_nesting_is_refused_without_recursion_error(tmp_path, opening, depth):
    closing = {"[": "]", "[ ": "] ", '{"$":"tuple","items":[': "]}"}[opening]
    text = json.dumps(document(None)).replace("null", opening * depth + closing * depth, 1)
    refused(write(tmp_path / "e.json", text.encode()), "nested too deeply")


def test_a_deep_binding_fingerprint_is_refused_without_recursion_error(tmp_path):
    doc = document(None)
    text = json.dumps(doc).replace('"total": {', '"total": {"deep": ' + "[" * 150 + "]" * 150 + ",", 1)
    refused(write(tmp_path / "e.json", text.encode()), "nested more than 100 levels")


def test_duplicate_key_at_the_end_of_a_huge_object_is_found(tmp_path):
    keys = ",".join(f'"k{i}":0' for i in range(200_000))
    text = json.dumps(document(None)).replace('"bindings":', '"junk":{' + keys + ',"k5":1},"bindings":', 1)
    refused(write(tmp_path / "e.json", text.encode()), "duplicate key 'k5'", most_calls=2 * 200_000)


class _Key(str):
    """A key that counts how often it is compared: a quadratic duplicate search compares every pair."""

    comparisons = 0

    def __eq__(self, other):
        _Key.comparisons += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_duplicate_keys_are_found_in_linear_time():
    """list.count per key made this quadratic: 200,000 keys took minutes. Comparisons are counted, not timed."""
    n = 2_000
    items = [(_Key(f"k{i}"), 0) for i in range(n)] + [(_Key(f"k{n - 1}"), 1)]  # the last key, repeated
    _Key.comparisons = 0
    with pytest.raises(ExperienceError, match=f"duplicate key 'k{n - 1}'"):
        experience._unique_pairs(items)
    assert _Key.comparisons < 4 * n, f"{_Key.comparisons} key comparisons for {n} keys"


def test_an_object_with_many_unexpected_keys_gets_a_short_message(tmp_path):
    doc = document(None)
    doc["calls"][0].update({f"extra{i}": 0 for i in range(50_000)})
    refused(write(tmp_path / "e.json", doc), "unexpected fields")


# -- tensors -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "shape",
    [[0, 2**64], [0, 2**62, 2**62], [2**40, 0, 2**40], [2**70], [1] * 33, [0] * 10_000],
    ids=["past-int64", "strides-overflow", "zero-in-the-middle", "huge", "33-dims", "10000-dims"],
)
def test_a_shape_whose_element_count_overflows_is_refused(tmp_path, shape):
    refused(write(tmp_path / "e.json", document(tensor(shape))), "tensor")


def test_a_payload_of_the_wrong_length_is_refused_before_decoding(tmp_path):
    refused(write(tmp_path / "e.json", document(tensor([1000], "A" * 4000))), "needs 4000 bytes, payload has 3000")


def test_a_bool_payload_of_other_bytes_is_refused(tmp_path):
    refused(write(tmp_path / "e.json", document(tensor([3], "AAEC", "bool"))), "values other than 0 and 1")


def test_a_loaded_tensor_owns_writable_memory(tmp_path):
    path = write(tmp_path / "e.json", document(tensor([2], "AACAPwAAAEA=")))
    loaded = load(path)._roots[0]
    assert loaded.tolist() == [1.0, 2.0]
    loaded += 1  # writable, no warning about a read-only buffer
    assert load(path)._roots[0].tolist() == [1.0, 2.0]


# -- nothing but ExperienceError ----------------------------------------------------------------------------------
@pytest.mark.parametrize("failure", [MemoryError, RecursionError])
def test_memory_and_recursion_errors_become_experience_errors(tmp_path, monkeypatch, failure):
    path = write(tmp_path / "e.json", document(None))

    def fail(*args, **kwargs):
        raise failure()

    monkeypatch.setattr(json, "loads", fail)
    with pytest.raises(ExperienceError, match="memory|nested too deeply") as info:
        load(path)
    assert isinstance(info.value.__cause__, failure)


def test_a_file_growing_while_it_is_read_is_refused(tmp_path, monkeypatch):
    path = write(tmp_path / "e.json", document(None))
    from tensorcode import _files

    real = _files.read_exactly

    def grow(handle, size, *args, **kwargs):
        with open(path, "ab") as more:
            more.write(b" ")
        return real(handle, size, *args, **kwargs)

    monkeypatch.setattr(_files, "read_exactly", grow)
    refused(path, "grew while it was read")


def test_a_writer_never_connecting_to_a_pipe_cannot_hang_a_load_thread(tmp_path):
    """The whole load runs in a thread that must finish: an open() that blocked would hang it forever."""
    fifo = tmp_path / "experience.json"
    os.mkfifo(fifo)
    outcome = []
    worker = threading.Thread(target=lambda: outcome.append(pytest.raises(ExperienceError, load, fifo)))
    worker.daemon = True
    worker.start()
    worker.join(5)
    assert not worker.is_alive() and outcome


def _float_payload(count: int) -> str:
    import base64

    return base64.b64encode(torch.arange(count, dtype=torch.float32).numpy().tobytes()).decode()


@pytest.mark.parametrize("position", [-3, -5000, 1], ids=["last-quantum", "before-the-tail", "first"])
def test_a_corrupted_character_anywhere_in_a_large_payload_is_refused(tmp_path, position):
    """The tail is decoded first (truncation and corruption are likeliest there); the rest is still checked."""
    payload = list(_float_payload(10_000))
    payload[position] = "!"
    refused(write(tmp_path / "e.json", document(tensor([10_000], "".join(payload)))), "invalid base64 payload")


def test_a_large_valid_payload_loads_exactly(tmp_path):
    path = write(tmp_path / "e.json", document(tensor([10_000], _float_payload(10_000))))
    assert torch.equal(load(path)._roots[0], torch.arange(10_000, dtype=torch.float32))


@pytest.mark.parametrize("where", ["without-payload", "after-a-payload"])
def test_json_besides_payloads_over_its_limit_is_refused(tmp_path, where):
    root = [0] * 5000
    if where == "after-a-payload":
        root = {"$": "tuple", "items": [tensor([10_000], _float_payload(10_000)), root]}
    path = write(tmp_path / "e.json", json.dumps(document(root), separators=(",", ":")).encode())
    refused(path, "holds more than 8,192 bytes of JSON besides its payloads", max_structure_bytes=8192)
    load(path, max_structure_bytes=40_000)  # the payload does not count


def test_lifting_payloads_under_a_limit_gives_what_an_unlimited_lift_gives():
    from tensorcode._codec import lift_payloads

    value = {"$": "tuple", "items": [tensor([4], "A" * 20), tensor([1], "AACAPw==")]}
    raw = json.dumps(document(value), separators=(",", ":")).encode()  # as the writer writes it
    unlimited, payloads = lift_payloads(raw)
    assert [bytes(p) for p in payloads] == [b"A" * 20, b"AACAPw=="]
    for limit in range(len(unlimited) - 3, len(unlimited) + 3):
        lifted, kept = lift_payloads(raw, limit=limit)
        if limit < len(unlimited):
            assert lifted is None
        else:
            assert lifted == unlimited and [bytes(p) for p in kept] == [bytes(p) for p in payloads]
