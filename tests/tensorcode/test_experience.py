"""Portable experience files: ``session.save`` writes versioned JSON atomically after validation, and
``training.load_experience`` returns a session bound to the supplied, already-constructed operations. Loading
never imports a class named in the file, never unpickles and never restores a callback. Replay and training of
loaded experience, and ``release`` / ``save(..., release=True)``."""

from __future__ import annotations

import builtins
import dataclasses
import gc
import importlib
import json
import os
import pickle
import re
import sys
import weakref
from pathlib import Path

import pytest
import torch
from torch import nn

import tensorcode
from tensorcode import ExperienceError, InputRef, OutputRef, TraceError, training

torch.set_num_threads(1)
LABELS = ["cat", "dog", "bird"]
TOP_LEVEL = {"format", "version", "bindings", "roots", "calls", "supervisions"}


class Head(nn.Module):
    def __init__(self, width=8, labels=LABELS):
        super().__init__()
        self.labels = list(labels)
        self.proj = nn.Linear(width, len(labels))

    def configuration(self):
        return {"labels": self.labels}

    def forward(self, x):  # (batch, width) -> (batch, labels)
        return self.proj(x)


def program(seed=0) -> dict:
    torch.manual_seed(seed)
    return {"encoder": nn.Linear(4, 8), "head": Head()}


def inputs() -> torch.Tensor:
    return torch.linspace(-1, 1, 8).reshape(2, 4)  # (batch, 4)


def capture(ops, x=None):
    with tensorcode.trace() as session:
        out = ops["head"](ops["encoder"](inputs() if x is None else x))
    session.supervise(out, ["dog", "cat"], source="human:review-42")
    return session


@pytest.fixture
def ops():
    return program()


@pytest.fixture
def folder(tmp_path) -> Path:
    """A directory holding nothing but what the test writes."""
    path = tmp_path / "experiences"
    path.mkdir()
    return path


@pytest.fixture
def saved(ops, folder) -> Path:
    path = folder / "experience.json"
    capture(ops).save(path, operations=ops)
    return path


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# -- the file ------------------------------------------------------------------------------------------------------
def test_save_writes_versioned_json_with_exactly_the_documented_fields(saved):
    document = json.loads(saved.read_text(encoding="utf-8"))
    assert set(document) == TOP_LEVEL
    assert document["format"] == "tensorcode-experience" and document["version"] == 1
    assert sorted(document["bindings"]) == ["encoder", "head"]
    assert [c["op"] for c in document["calls"]] == ["encoder", "head"]
    assert document["calls"][1]["args"] == {"$": "tuple", "items": [{"$": "ref", "call": 0, "path": []}]}
    assert document["supervisions"][0]["source"] == "human:review-42"


def test_saved_file_is_strict_json(saved):
    def refuse(name):
        raise AssertionError(f"non-standard constant {name}")

    json.loads(saved.read_text(encoding="utf-8"), parse_constant=refuse)


def test_save_load_save_is_byte_identical(ops, saved, tmp_path):
    """A loaded experience holds everything the file said: saving it again writes the same bytes."""
    again = tmp_path / "again.json"
    training.load_experience(saved, operations=ops).save(again, operations=ops)
    assert again.read_bytes() == saved.read_bytes()


# -- atomic writes -------------------------------------------------------------------------------------------------
def test_save_writes_a_temporary_file_in_the_same_directory_then_replaces(ops, folder, monkeypatch):
    replaced = []
    real = os.replace

    def spy(src, dst):
        replaced.append((Path(src), Path(dst), Path(src).read_bytes()))
        real(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    path = folder / "experience.json"
    capture(ops).save(path, operations=ops)
    [(src, dst, written)] = replaced
    assert dst == path and src.parent == path.parent and src != path
    assert written == path.read_bytes()
    assert listing(folder) == ["experience.json"]  # the temporary file is gone


@pytest.mark.parametrize("durable", [True, False])
def test_save_fsyncs_the_file_before_publishing_it_unless_told_not_to(ops, folder, monkeypatch, durable):
    """By default the data is on disk before the file appears under its name; `durable=False` (a caller saving
    many files that makes them durable together) skips the fsync but still publishes the whole file or none."""
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append("fsync")
        real_fsync(fd)

    def replace(src, dst):
        events.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path = folder / "experience.json"
    capture(ops).save(path, operations=ops, durable=durable)
    assert events == (["fsync", "replace"] if durable else ["replace"])
    assert listing(folder) == ["experience.json"]
    assert training.load_experience(path, operations=ops).supervisions[0].source == "human:review-42"


def _fail_replace(src, dst):
    raise OSError("simulated: rename failed")


def _fail_fsync(fd):
    raise OSError("simulated: disk full")


def _interrupt_fsync(fd):
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    ("target", "replacement", "error"),
    [("replace", _fail_replace, OSError), ("fsync", _fail_fsync, OSError), ("fsync", _interrupt_fsync,
                                                                                 KeyboardInterrupt)],
    ids=["replace-fails", "write-fails", "interrupted"],
)
def test_failed_write_leaves_the_existing_file_untouched(ops, saved, monkeypatch, target, replacement, error):
    before = saved.read_bytes()
    session = capture(ops, inputs() * 2)
    monkeypatch.setattr(os, target, replacement)
    with pytest.raises(error):
        session.save(saved, operations=ops)
    monkeypatch.undo()
    assert saved.read_bytes() == before
    assert listing(saved.parent) == [saved.name]  # no temporary file left behind


def test_encoding_failure_half_way_leaves_the_existing_file_untouched(saved):
    """The first roots (megabytes of tensor) encode; the last one cannot: nothing reaches the disk."""
    before = saved.read_bytes()
    keep = tensorcode.operation(lambda *a: 0, configuration={"op": "keep"})
    with tensorcode.trace() as session:
        keep(torch.ones(500_000), [1, 2, 3], object())
    with pytest.raises(ExperienceError, match="input 2: unsupported value of type object"):
        session.save(saved, operations={"keep": keep})
    assert saved.read_bytes() == before
    assert listing(saved.parent) == [saved.name]


def test_validation_failure_leaves_the_existing_file_untouched(ops, saved):
    before = saved.read_bytes()
    with pytest.raises(ExperienceError, match="missing binding"):
        capture(ops).save(saved, operations={"encoder": ops["encoder"]})
    assert saved.read_bytes() == before


# -- save-time validation ------------------------------------------------------------------------------------------
def test_save_refuses_a_missing_binding(ops, tmp_path):
    path = tmp_path / "experience.json"
    with pytest.raises(ExperienceError, match=r"missing binding: call 1 uses Head which is not among operations "
                                              r"\['encoder'\]"):
        capture(ops).save(path, operations={"encoder": ops["encoder"]})
    assert not path.exists()


def test_save_binds_the_exact_captured_instances(ops, tmp_path):
    """An equal twin is not the captured operation: binding it would make the file lie."""
    twin = program()
    with pytest.raises(ExperienceError, match="missing binding: call 0"):
        capture(ops).save(tmp_path / "experience.json", operations=twin)


@pytest.mark.parametrize("name", ["", 3, None], ids=repr)
def test_binding_names_must_be_nonempty_strings(ops, tmp_path, name):
    with pytest.raises(ExperienceError, match="binding names must be nonempty strings"):
        capture(ops).save(tmp_path / "experience.json", operations={name: ops["encoder"], "head": ops["head"]})


def test_operations_must_be_a_mapping(ops, saved, tmp_path):
    with pytest.raises(TypeError, match="operations must be a mapping"):
        capture(ops).save(tmp_path / "other.json", operations=list(ops.values()))
    with pytest.raises(TypeError, match="operations must be a mapping"):
        training.load_experience(saved, operations=list(ops.values()))


def test_save_refuses_a_failed_call(ops, tmp_path):
    @tensorcode.operation(configuration={"op": "explode"})
    def explode(x):
        raise RuntimeError("boom")

    with tensorcode.trace() as session:
        hidden = ops["encoder"](inputs())
        with pytest.raises(RuntimeError):
            explode(hidden)
    path = tmp_path / "experience.json"
    with pytest.raises(ExperienceError, match=r"call 1 \(explode\) failed and cannot be persisted"):
        session.save(path, operations={**ops, "explode": explode})
    assert not path.exists()


def test_save_refuses_a_mutated_output(ops, tmp_path):
    with tensorcode.trace() as session:
        hidden = ops["encoder"](inputs())
    with torch.no_grad():
        hidden.add_(1)
    path = tmp_path / "experience.json"
    with pytest.raises(ExperienceError, match="output of call 0 .* was mutated after capture"):
        session.save(path, operations=ops)
    assert not path.exists()


def test_save_refuses_pending_async_calls(ops, tmp_path):
    @tensorcode.operation(configuration={"op": "later"})
    async def later(x):
        return x

    with tensorcode.trace() as session:
        pending = later(torch.ones(1))
    try:
        with pytest.raises(ExperienceError, match="pending"):
            session.save(tmp_path / "experience.json", operations={"later": later})
    finally:
        pending.close()


@tensorcode.operation(configuration={"op": "split"})
def split(x):
    return {"parts": [x, x * 2], (1, 2): x * 3, 2.5: x * 4}


@tensorcode.operation(configuration={"op": "plus_one"})
def plus_one(x):
    return x + 1


def test_references_into_outputs_by_integer_and_string_keys_round_trip(tmp_path):
    ops = {"split": split, "plus_one": plus_one}
    with tensorcode.trace() as session:
        parts = split(torch.ones(2))
        out = plus_one(parts["parts"][1])
    session.supervise(out, torch.zeros(2), loss="mse", source="test")
    session.supervise(OutputRef(0, ("parts", 0)), torch.zeros(2), loss="mse", source="test")
    path = tmp_path / "experience.json"
    session.save(path, operations=ops)
    loaded = training.load_experience(path, operations=ops)
    assert torch.equal(loaded.replay(loaded.supervisions[0].output), torch.full((2,), 3.0))
    assert torch.equal(loaded.replay(loaded.supervisions[1].output), torch.ones(2))


@pytest.mark.parametrize("key", [(1, 2), 2.5], ids=["tuple-key", "float-key"])
def test_save_refuses_output_paths_the_loader_cannot_read(tmp_path, key):
    """Output paths hold integer and string keys only; a file that could never load is never written."""
    ops = {"split": split, "plus_one": plus_one}
    with tensorcode.trace() as session:
        plus_one(split(torch.ones(2))[key])
    path = tmp_path / "experience.json"
    refused = f"a reference into an output by key {re.escape(repr(key))}"
    with pytest.raises(ExperienceError, match=f"call 1 arguments: {refused}"):
        session.save(path, operations=ops)
    with tensorcode.trace() as session:
        split(torch.ones(2))
    session.supervise(OutputRef(0, (key,)), torch.zeros(2), loss="mse", source="test")
    with pytest.raises(ExperienceError, match=f"supervision 0: {refused}"):
        session.save(path, operations=ops)
    assert not path.exists()


# -- loading -------------------------------------------------------------------------------------------------------
def test_load_returns_a_session_bound_to_the_supplied_operations(ops, saved):
    loaded = training.load_experience(saved, operations=ops)
    assert isinstance(loaded, tensorcode.Trace)
    assert [c.op for c in loaded.calls] == [ops["encoder"], ops["head"]]
    assert all(c.op is ops[c.binding] for c in loaded.calls)
    assert [c.dependencies for c in loaded.calls] == [(), (0,)]
    assert [c.inputs for c in loaded.calls] == [[InputRef(0)], []]
    assert torch.equal(loaded.value(InputRef(0)), inputs())
    [record] = loaded.supervisions
    assert record.output == OutputRef(1) and record.target == ["dog", "cat"]
    assert record.loss == "cross_entropy" and record.source == "human:review-42"


def test_loaded_session_is_closed_to_new_captures(ops, saved):
    loaded = training.load_experience(saved, operations=ops)
    assert loaded.closed
    with pytest.raises(TraceError), loaded:
        pass


def test_replay_of_loaded_experience_uses_current_weights(ops, saved):
    with torch.no_grad():
        ops["head"].proj.weight.fill_(0.25)
    loaded = training.load_experience(saved, operations=ops)
    replayed = loaded.replay(loaded.supervisions[0].output)
    assert torch.equal(replayed, ops["head"](ops["encoder"](inputs())))
    assert replayed.requires_grad


def test_load_binds_other_already_constructed_instances(saved):
    other = program(seed=5)
    loaded = training.load_experience(saved, operations=other)
    assert loaded.calls[0].op is other["encoder"]
    assert torch.equal(loaded.replay(OutputRef(1)), other["head"](other["encoder"](inputs())))


def test_load_refuses_a_missing_binding(ops, saved):
    message = r"missing binding 'head': .* operations it is loaded with are \['encoder'\] \(another tool's file\?\)"
    with pytest.raises(ExperienceError, match=message):
        training.load_experience(saved, operations={"encoder": ops["encoder"]})


def test_load_accepts_unused_extra_operations(ops, saved):
    training.load_experience(saved, operations={**ops, "unused": nn.Linear(2, 2)})


def test_load_accepts_str_and_path(ops, saved):
    assert len(training.load_experience(str(saved), operations=ops).calls) == 2
    assert len(training.load_experience(saved, operations=ops).calls) == 2


@pytest.mark.parametrize("where", ["missing.json", "."], ids=["missing", "directory"])
def test_unreadable_path_is_an_experience_error(ops, tmp_path, where):
    with pytest.raises(ExperienceError, match="cannot read experience file"):
        training.load_experience(tmp_path / where, operations=ops)


def test_per_example_sources_round_trip_as_a_tuple(ops, tmp_path):
    with tensorcode.trace() as session:
        out = ops["head"](ops["encoder"](inputs()))
    session.supervise(out, [1, 0], source=["review:1", "review:2"])
    path = tmp_path / "experience.json"
    session.save(path, operations=ops)
    assert training.load_experience(path, operations=ops).supervisions[0].source == ("review:1", "review:2")


# -- nothing in a file can run code --------------------------------------------------------------------------------
PLANTED = '''
import dataclasses, pathlib
pathlib.Path(__file__).with_suffix(".imported").write_text("imported")

@dataclasses.dataclass
class Payload:
    x: object
    meta: object = None
'''


def test_classes_named_in_a_file_are_never_imported(ops, saved, tmp_path, monkeypatch):
    (tmp_path / "planted_module.py").write_text(PLANTED)
    monkeypatch.syspath_prepend(str(tmp_path))
    document = json.loads(saved.read_text(encoding="utf-8"))
    document["roots"][0] = {"$": "dataclass", "codec": "planted_module.Payload", "fields": {"x": 1, "meta": None}}
    by_codec = tmp_path / "by_codec.json"
    by_codec.write_text(json.dumps(document))
    document = json.loads(saved.read_text(encoding="utf-8"))
    document["bindings"]["head"]["type"] = "planted_module.Payload"
    by_type = tmp_path / "by_type.json"
    by_type.write_text(json.dumps(document))

    with pytest.raises(ExperienceError, match="dataclass codec 'planted_module.Payload' is not in the allowlist"):
        training.load_experience(by_codec, operations=ops)
    with pytest.raises(ExperienceError, match="fingerprint mismatch for binding 'head': type"):
        training.load_experience(by_type, operations=ops)

    @dataclasses.dataclass
    class Mine:
        x: object
        meta: object = None

    # Even a tag spelled like a class path only selects the application's registered class.
    loaded = training.load_experience(by_codec, operations=ops, codecs={"planted_module.Payload": Mine})
    assert type(loaded.value(InputRef(0))) is Mine
    assert "planted_module" not in sys.modules
    assert not (tmp_path / "planted_module.imported").exists()


def test_load_performs_no_import(ops, tmp_path, monkeypatch):
    """No module is imported while loading: not by name, not through importlib, and sys.modules is unchanged."""
    keep = tensorcode.external(lambda *a: {"answer": torch.ones(2)}, configuration={"service": "keep"})
    with tensorcode.trace() as session:
        out = ops["head"](ops["encoder"](inputs()))
        keep(out, b"raw", (1, 2.5), {"k": torch.zeros(3, dtype=torch.bfloat16)})
    session.supervise(out, [0, 1], source="test")
    path = tmp_path / "experience.json"
    operations = {**ops, "keep": keep}
    session.save(path, operations=operations)

    imports = []
    real_import = builtins.__import__

    def spy(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and name not in sys.modules:
            imports.append(name)
        return real_import(name, globals, locals, fromlist, level)

    def refuse(name, package=None):
        raise AssertionError(f"importlib.import_module({name!r}) during load")

    before = set(sys.modules)
    monkeypatch.setattr(builtins, "__import__", spy)
    monkeypatch.setattr(importlib, "import_module", refuse)
    loaded = training.load_experience(path, operations=operations)
    monkeypatch.undo()
    assert imports == [] and set(sys.modules) == before
    assert torch.equal(loaded.calls[2].recorded["answer"], torch.ones(2))


def test_load_never_unpickles(ops, tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("unpickling during load")

    with tensorcode.trace() as session:
        out = ops["head"](ops["encoder"](inputs()))
    session.supervise(out, torch.tensor([2, 0]), source="test")
    path = tmp_path / "experience.json"
    session.save(path, operations=ops)
    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(torch, "load", refuse)
    loaded = training.load_experience(path, operations=ops)
    assert torch.equal(loaded.supervisions[0].target, torch.tensor([2, 0]))


def test_loss_callbacks_are_never_serialized_or_restored(ops, tmp_path):
    def hinge(output, target):
        return torch.relu(1 - output[:, 0]).mean()

    with tensorcode.trace() as session:
        out = ops["head"](ops["encoder"](inputs()))
    session.supervise(out, 0, loss="hinge", source="test")
    path = tmp_path / "experience.json"
    session.save(path, operations=ops)
    assert "hinge" in path.read_text(encoding="utf-8") and "relu" not in path.read_text(encoding="utf-8")
    loaded = training.load_experience(path, operations=ops)
    assert loaded.supervisions[0].loss == "hinge"
    with pytest.raises(ValueError, match="unknown loss 'hinge'"):
        training.Trainer.from_ops(ops).step(loaded)
    assert isinstance(training.Trainer.from_ops(ops, losses={"hinge": hinge}).step(loaded), float)


# -- replay and training of loaded experience -----------------------------------------------------------------------
def boundary_program(tmp_path):
    """encoder -> external oracle (runs an inner module) -> head; saved and loaded."""
    torch.manual_seed(0)
    inner, encoder, head = nn.Linear(8, 8), nn.Linear(4, 8), Head()
    invoked = []

    @tensorcode.external(configuration={"service": "oracle-v1"})
    def oracle(hidden):
        invoked.append(1)
        return inner(hidden)

    ops = {"encoder": encoder, "oracle": oracle, "head": head}
    with tensorcode.trace() as session:
        hidden = encoder(inputs())
        out = head(oracle(hidden))
        side = head(hidden)
    session.supervise(out, ["bird", "cat"], source="test")
    session.supervise(side, ["dog", "dog"], source="test")
    path = tmp_path / "experience.json"
    session.save(path, operations=ops)
    return training.load_experience(path, operations=ops), ops, inner, invoked


def test_loaded_external_effects_are_refused_by_default(tmp_path):
    loaded, *_ = boundary_program(tmp_path)
    with pytest.raises(TraceError, match=r"replay reaches external effect call 1 \(oracle\); pass boundary='recorded'"):
        loaded.replay(OutputRef(2))


def test_recorded_boundary_uses_the_detached_recorded_result_without_invoking_it(tmp_path):
    loaded, ops, inner, invoked = boundary_program(tmp_path)
    calls_before = len(invoked)
    recorded = loaded.calls[1].recorded
    assert not recorded.requires_grad
    with torch.no_grad():
        inner.weight.fill_(7)  # invoking the oracle now would give another answer
    out = loaded.replay(OutputRef(2), boundary="recorded")
    assert len(invoked) == calls_before
    assert torch.equal(out, ops["head"](recorded))


def test_replacement_inputs_recompute_pure_paths(tmp_path):
    loaded, ops, *_ = boundary_program(tmp_path)
    other = torch.ones(2, 4)
    out = loaded.replay(OutputRef(3), inputs={InputRef(0): other})
    assert torch.equal(out, ops["head"](ops["encoder"](other)))


def test_replacement_inputs_cannot_cross_a_recorded_boundary(tmp_path):
    loaded, *_ = boundary_program(tmp_path)
    with pytest.raises(TraceError, match="replacement input 0 cannot cross recorded boundary call 1"):
        loaded.replay(OutputRef(2), inputs={InputRef(0): torch.ones(2, 4)}, boundary="recorded")


def test_training_treats_recorded_boundaries_as_constants(tmp_path):
    loaded, ops, inner, invoked = boundary_program(tmp_path)
    trainer = training.Trainer.from_ops({**ops, "inner": inner}, lr=0.5)
    snapshot = {name: p.detach().clone() for name, p in [*inner.named_parameters(), *ops["head"].named_parameters()]}
    calls_before = len(invoked)
    loss = trainer.step(loaded)
    assert isinstance(loss, float) and len(invoked) == calls_before
    assert inner.weight.grad is None and torch.equal(inner.weight, snapshot["weight"])  # gradients stop at the boundary
    assert not torch.equal(ops["head"].proj.weight, snapshot["proj.weight"])
    assert ops["encoder"].weight.grad is not None  # the pure path around the boundary still trains


def test_trainer_fits_loaded_experience_with_current_weights(ops, saved):
    loaded = training.load_experience(saved, operations=ops)
    trainer = training.Trainer.from_ops(ops, lr=0.5)
    losses = trainer.fit([loaded], epochs=5)
    assert len(losses) == 5 and losses[-1] < losses[0]
    assert trainer.steps == 5


# -- release -------------------------------------------------------------------------------------------------------
def test_save_with_release_persists_before_releasing(ops, tmp_path):
    session = capture(ops)
    path = tmp_path / "experience.json"
    session.save(path, operations=ops, release=True)
    assert session.released
    assert len(training.load_experience(path, operations=ops).calls) == 2


def test_failed_save_with_release_does_not_release(ops, tmp_path):
    session = capture(ops)
    with pytest.raises(ExperienceError, match="missing binding"):
        session.save(tmp_path / "experience.json", operations={"head": ops["head"]}, release=True)
    assert not session.released
    assert session.calls[1].value is not None


def test_release_drops_live_results_and_autograd_graphs(ops):
    with tensorcode.trace() as session:
        hidden = ops["encoder"](inputs())
        out = ops["head"](hidden)
    handle = session.ref(out)
    graphs = weakref.ref(out), weakref.ref(hidden)
    del hidden, out
    session.release()
    gc.collect()
    assert graphs[0]() is None and graphs[1]() is None
    with pytest.raises(TraceError, match="released"):
        _ = session.calls[1].value
    assert session.replay(handle).shape == (2, 3)  # a preserved handle replays from the roots


def test_release_keeps_roots_dag_supervision_and_recorded_results(tmp_path):
    torch.manual_seed(0)
    encoder = nn.Linear(4, 8)
    oracle = tensorcode.external(lambda h: h.sum(dim=-1), configuration={"service": "sum"})
    with tensorcode.trace() as session:
        hidden = encoder(inputs())
        total = oracle(hidden)
    session.supervise(session.calls[1].output, torch.zeros(2), loss="mse", source="test")
    recorded = session.calls[1].recorded
    session.save(tmp_path / "experience.json", operations={"encoder": encoder, "oracle": oracle}, release=True)
    assert torch.equal(session.value(InputRef(0)), inputs())
    assert session.calls[1].dependencies == (0,)
    assert session.supervisions[0].output == OutputRef(1)
    assert session.calls[1].recorded is recorded and torch.equal(recorded, total.detach())
    assert torch.equal(session.replay(OutputRef(1), boundary="recorded"), recorded)


def test_release_drops_mutation_stamps(ops, tmp_path):
    """Once released, the trace no longer watches its former outputs: the roots alone define the experience."""
    session = capture(ops)
    hidden = session.calls[0].value
    session.release()
    with torch.no_grad():
        hidden.fill_(100)
    path = tmp_path / "experience.json"
    session.save(path, operations=ops)
    loaded = training.load_experience(path, operations=ops)
    replayed = loaded.replay(loaded.supervisions[0].output)
    assert torch.equal(replayed, ops["head"](ops["encoder"](inputs())))


def test_supervision_output_replays_after_release(ops):
    session = capture(ops)
    session.release()
    record = session.supervisions[0]
    assert torch.equal(session.replay(record.output), ops["head"](ops["encoder"](inputs())))


def test_identity_lookup_is_unavailable_after_release(ops):
    with tensorcode.trace() as session:
        out = ops["head"](ops["encoder"](inputs()))
    session.release()
    with pytest.raises(TraceError, match="identity lookup is unavailable"):
        session.ref(out)


def test_release_validates_the_whole_session_first(ops):
    with tensorcode.trace() as session:
        hidden = ops["encoder"](inputs())
        ops["head"](hidden)
    with torch.no_grad():
        hidden.mul_(2)
    with pytest.raises(TraceError, match="was mutated"):
        session.release()
    assert not session.released
    assert session.calls[0].value is hidden


def test_a_float_version_is_not_version_one(ops, saved):
    document = json.loads(saved.read_text())
    document["version"] = 1.0
    saved.write_text(json.dumps(document))
    with pytest.raises(ExperienceError, match="unsupported experience version 1.0"):
        training.load_experience(saved, operations=ops)
