"""``session.replay``, ``session.release``, ``save(..., release=True)`` and operation fingerprints (configuration,
conservative fallback, tensor state) as checked by ``load_experience``."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch import nn

from tensorcode import (
    ExperienceError,
    InputRef,
    OutputRef,
    TraceError,
    external,
    operation,
    trace,
    training,
)

torch.set_num_threads(1)

COUNTS = {"double": 0, "remote": 0}


@operation
def double(x):
    COUNTS["double"] += 1
    return x * 2


@external
def remote(x):
    """A remote service stand-in that happens to return a differentiable tensor."""
    COUNTS["remote"] += 1
    return x * 3


@operation
def _add(a, b):
    return a + b


@pytest.fixture(autouse=True)
def _reset_counts():
    COUNTS.update(double=0, remote=0)


@pytest.fixture
def chain():
    """``head(remote(encoder(x)))`` plus a pure branch ``double(encoder(x))``."""
    torch.manual_seed(0)
    encoder, head = nn.Linear(4, 4), nn.Linear(4, 2)
    x = torch.randn(1, 4)
    with trace() as session:
        h = encoder(x)
        boundary = remote(h)
        y = head(boundary)
        pure = double(h)
    return session, encoder, head, x, y, pure


def test_replay_recomputes_pure_operations_with_current_parameters():
    lin = nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with trace() as session:
        y = lin(x)
        z = double(y)
    assert torch.allclose(session.replay(z), z)
    with torch.no_grad():
        lin.weight.mul_(-1.0)
    replayed = session.replay(z)
    assert torch.allclose(replayed, lin(x) * 2)
    assert not torch.allclose(replayed, z)


def test_replay_invokes_each_pure_operation_of_the_closure_once(chain):
    session, *_, pure = chain
    assert COUNTS["double"] == 1
    session.replay(pure)
    assert COUNTS["double"] == 2
    assert COUNTS["remote"] == 1


def test_replayed_output_is_a_fresh_object_with_native_gradients(chain):
    session, encoder, _, _, _, pure = chain
    replayed = session.replay(pure)
    assert replayed is not pure and replayed.requires_grad
    replayed.sum().backward()
    assert encoder.weight.grad is not None


def test_replay_rejects_external_effects_by_default_without_invoking_anything(chain):
    session, *_, y, _ = chain
    with pytest.raises(TraceError, match=r"external effect call 1 \(remote\).*boundary='recorded'"):
        session.replay(y)
    assert COUNTS == {"double": 1, "remote": 1}


def test_replay_of_a_pure_closure_works_with_externals_elsewhere(chain):
    session, *_, pure = chain
    assert torch.allclose(session.replay(pure), pure)


def test_recorded_boundary_uses_the_detached_recorded_result_without_invoking_it(chain):
    session, encoder, head, x, y, _ = chain
    recorded = session.calls[1].recorded
    assert not recorded.requires_grad
    with torch.no_grad():
        encoder.weight.zero_()  # the boundary is a constant: upstream changes do not reach the replay
    replayed = session.replay(y, boundary="recorded")
    assert COUNTS["remote"] == 1
    assert torch.allclose(replayed, y)
    assert torch.allclose(replayed, head(recorded))


def test_gradients_do_not_cross_a_recorded_boundary(chain):
    session, encoder, head, _, y, _ = chain
    session.replay(y, boundary="recorded").sum().backward()
    assert head.weight.grad is not None
    assert encoder.weight.grad is None


def test_training_uses_recorded_boundaries_as_constants(chain):
    session, encoder, head, _, y, _ = chain
    session.supervise(y, torch.zeros(1, 2), loss="mse", source="human:review-1")
    before_encoder, before_head = encoder.weight.detach().clone(), head.weight.detach().clone()
    trainer = training.Trainer.from_ops({"encoder": encoder, "remote": remote, "head": head}, lr=0.1)
    trainer.step(session)
    assert COUNTS["remote"] == 1
    assert torch.equal(encoder.weight, before_encoder)
    assert not torch.equal(head.weight, before_head)


def test_replay_rejects_an_unknown_boundary_mode(chain):
    session, *_, y, _ = chain
    with pytest.raises(ValueError, match="boundary must be 'error' or 'recorded'"):
        session.replay(y, boundary="invoke")


def test_replacement_inputs_are_keyed_by_input_ref():
    lin = nn.Linear(4, 4)
    x, other = torch.randn(1, 4), torch.randn(1, 4)
    with trace() as session:
        y = double(lin(x))
    replaced = session.replay(y, inputs={InputRef(0): other})
    assert torch.allclose(replaced, lin(other) * 2)
    assert torch.allclose(session.replay(y), y), "a replacement does not change the stored root"
    assert torch.equal(session.value(InputRef(0)), x)


def test_replacement_inputs_must_name_inputs_of_the_trace():
    lin = nn.Linear(4, 4)
    with trace() as session:
        y = lin(torch.randn(1, 4))
    with pytest.raises(TypeError, match="keyed by InputRef"):
        session.replay(y, inputs={0: torch.zeros(1, 4)})
    with pytest.raises(TraceError, match="not an input of this trace"):
        session.replay(y, inputs={InputRef(3): torch.zeros(1, 4)})


def test_replacement_input_cannot_cross_a_recorded_boundary(chain):
    session, *_, y, _ = chain
    with pytest.raises(TraceError, match=r"replacement input 0 cannot cross recorded boundary call 1 \(remote\)"):
        session.replay(y, inputs={InputRef(0): torch.zeros(1, 4)}, boundary="recorded")
    assert COUNTS["remote"] == 1


def test_replacement_input_outside_the_boundary_closure_is_allowed():
    head = nn.Linear(4, 2)
    h, extra = torch.randn(1, 4), torch.randn(1, 4)
    with trace() as session:
        boundary = remote(h)
        y = head(_add(boundary, extra))
    replaced = session.replay(y, inputs={InputRef(1): torch.zeros(1, 4)}, boundary="recorded")
    assert torch.allclose(replaced, head(boundary.detach()))
    assert COUNTS["remote"] == 1


def test_replay_inside_another_trace_is_not_captured(chain):
    session, *_, pure = chain
    with trace() as other:
        session.replay(pure)
    assert other.calls == []


# -- release --------------------------------------------------------------------------------------------------------
def test_release_drops_live_results_and_identity_lookup(chain):
    session, *_, y, pure = chain
    handle = session.ref(pure)
    session.release()
    assert session.released
    with pytest.raises(TraceError, match="released"):
        _ = session.calls[3].value
    with pytest.raises(TraceError, match=r"released.*OutputRef.*supervision\.output"):
        session.ref(pure)
    assert torch.allclose(session.replay(handle), pure), "replay from roots still works"
    assert torch.allclose(session.replay(session.calls[2].output, boundary="recorded"), y)


def test_release_drops_autograd_graphs():
    lin = nn.Linear(4, 4)
    with trace() as session:
        y = lin(torch.randn(1, 4))
    alive = weakref.ref(y)
    del y
    gc.collect()
    assert alive() is not None, "the live session keeps its outputs"
    session.release()
    gc.collect()
    assert alive() is None


def test_release_keeps_roots_dag_supervision_and_recorded_boundaries(chain):
    session, _, _, x, y, _ = chain
    record = session.supervise(y, torch.zeros(1, 2), loss="mse", source="human:review-1")
    recorded = session.calls[1].recorded
    session.release()
    assert torch.equal(session.value(InputRef(0)), x)
    assert [call.dependencies for call in session.calls] == [(), (0,), (1,), (0,)]
    assert session.supervisions == [record]
    assert session.calls[1].recorded is recorded
    assert session.example(record.output).calls == (0, 1, 2)


def test_release_validates_the_whole_session_first(chain):
    session, *_, pure = chain
    with torch.no_grad():
        session.calls[0].value.add_(1.0)
    with pytest.raises(TraceError, match="call 0 .* mutated"):
        session.release()
    assert not session.released
    assert session.calls[3].value is pure


def test_save_with_release_persists_then_releases(chain, tmp_path):
    session, encoder, head, _, y, _ = chain
    session.supervise(y, torch.zeros(1, 2), loss="mse", source="human:review-1")
    operations = {"encoder": encoder, "remote": remote, "head": head, "double": double}
    path = tmp_path / "experience.json"
    session.save(path, operations=operations, release=True)
    assert path.exists() and session.released
    loaded = training.load_experience(path, operations=operations)
    assert torch.allclose(loaded.replay(loaded.supervisions[0].output, boundary="recorded"), y)
    assert COUNTS["remote"] == 1


def test_failed_save_with_release_does_not_release(chain, tmp_path):
    session, encoder, *_ = chain
    path = tmp_path / "experience.json"
    with pytest.raises(ExperienceError, match="missing binding"):
        session.save(path, operations={"encoder": encoder}, release=True)
    assert not path.exists() and not session.released
    assert session.calls[0].value is not None


def test_save_binds_the_exact_captured_instances(tmp_path):
    lin = nn.Linear(4, 4)
    with trace() as session:
        lin(torch.randn(1, 4))
    twin = nn.Linear(4, 4)
    twin.load_state_dict(lin.state_dict())
    with pytest.raises(ExperienceError, match="missing binding"):
        session.save(tmp_path / "e.json", operations={"lin": twin})


def test_save_rejects_an_unsupported_root_payload(tmp_path):
    class Handle:
        """An opaque application object: no codec can describe it."""

    @operation(configuration={"op": "use"})
    def use(handle, x):
        return x * 2

    with trace() as session:
        use(Handle(), 1)
    path = tmp_path / "e.json"
    with pytest.raises(ExperienceError, match="input 0: unsupported value of type .*Handle"):
        session.save(path, operations={"use": use})
    assert not path.exists() and not session.released


# -- fingerprints: configuration, fallback, tensor state ------------------------------------------------------------
def _saved(tmp_path, op, *args):
    with trace() as session:
        op(*args)
    path = tmp_path / "experience.json"
    session.save(path, operations={"op": op})
    return path


def _load(path, op):
    return training.load_experience(path, operations={"op": op})


def test_updated_weights_load_and_replay_with_current_values(tmp_path):
    lin = nn.Linear(4, 3)
    path = _saved(tmp_path, lin, torch.randn(1, 4))
    with torch.no_grad():
        lin.weight.add_(1.0)
    loaded = _load(path, lin)
    assert torch.allclose(loaded.replay(OutputRef(0)), lin(loaded.value(InputRef(0))))


class Shaped(nn.Module):
    """A module whose explicit configuration never changes, so only its tensor state and type can differ."""

    def __init__(self, size=3, dtype=torch.float32, buffered=False):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size, dtype=dtype))
        if buffered:
            self.register_buffer("running", torch.zeros(size))

    def configuration(self):
        return {"kind": "shaped"}

    def forward(self, x):
        return x * self.weight


class ShapedTwin(Shaped):
    pass


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda: Shaped(size=4), r"state\[0\]"),
        (lambda: Shaped(dtype=torch.float64), r"state\[0\]"),
        (lambda: Shaped().requires_grad_(False), r"state\[0\]"),
        (lambda: Shaped(buffered=True), r"state \(length 1 != 2\)"),
        (lambda: ShapedTwin(), "type"),
        (lambda: nn.Linear(3, 3), "configuration"),
    ],
    ids=["shape", "dtype", "grad-flag", "buffer", "type", "unconfigured-type"],
)
def test_changed_tensor_state_or_type_is_a_fingerprint_mismatch(tmp_path, change, where):
    path = _saved(tmp_path, Shaped(), torch.ones(3))
    _load(path, Shaped())
    with pytest.raises(ExperienceError, match=rf"fingerprint mismatch for binding 'op': {where}"):
        _load(path, change())


def test_changed_layer_size_is_a_fingerprint_mismatch(tmp_path):
    path = _saved(tmp_path, nn.Linear(4, 3), torch.ones(4))
    with pytest.raises(ExperienceError, match="fingerprint mismatch for binding 'op': .*out_features"):
        _load(path, nn.Linear(4, 5))


def test_uninitialized_lazy_module_is_refused_with_a_clear_error(tmp_path):
    path = _saved(tmp_path, nn.Linear(4, 3), torch.ones(4))
    with pytest.raises(ExperienceError, match="binding 'op': .*uninitialized"):
        _load(path, nn.LazyLinear(3))


def test_replay_capability_is_part_of_the_fingerprint(tmp_path):
    def scale(x):
        return x * 2

    path = _saved(tmp_path, operation(scale, configuration={"scale": 2}), 1.0)
    with pytest.raises(ExperienceError, match="fingerprint mismatch for binding 'op': replay"):
        _load(path, external(scale, configuration={"scale": 2}))


def test_fallback_fields_of_a_plain_module_are_part_of_the_fingerprint(tmp_path):
    path = _saved(tmp_path, nn.Dropout(0.1), torch.ones(3))
    _load(path, nn.Dropout(0.1))
    with pytest.raises(ExperienceError, match=r"fingerprint mismatch for binding 'op': configuration\..*p"):
        _load(path, nn.Dropout(0.2))


def test_label_order_is_part_of_the_fingerprint(tmp_path):
    class Head(nn.Module):
        def __init__(self, labels):
            super().__init__()
            self.labels = labels
            self.out = nn.Linear(4, len(labels))

        def forward(self, x):
            return self.out(x)

    path = _saved(tmp_path, Head(["no", "yes"]), torch.ones(4))
    _load(path, Head(["no", "yes"]))
    with pytest.raises(ExperienceError, match=r"fingerprint mismatch.*labels\[0\]"):
        _load(path, Head(["yes", "no"]))


class _Tokenizer:
    """Opaque behaviour state: the fallback cannot describe it."""


class _Opaque(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokenizer = _Tokenizer()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x)


class _Configured(_Opaque):
    def __init__(self, vocabulary, cache_size=8):
        super().__init__()
        self.vocabulary = vocabulary
        self.cache_size = cache_size

    def configuration(self):
        return {"vocabulary": self.vocabulary}


def test_opaque_module_state_is_refused_by_the_fallback(tmp_path):
    module = _Opaque()
    with trace() as session:
        module(torch.ones(3))
    with pytest.raises(ExperienceError, match=r"'tokenizer' holds opaque behaviour state.*configuration\(\)"):
        session.save(tmp_path / "e.json", operations={"op": module})


def test_module_attribute_holding_a_lambda_is_refused(tmp_path):
    module = nn.Linear(3, 3)
    module.activation = lambda t: t
    with trace() as session:
        module(torch.ones(3))
    with pytest.raises(ExperienceError, match=r"'activation' is a lambda or closure.*configuration\(\)"):
        session.save(tmp_path / "e.json", operations={"op": module})


def test_explicit_module_configuration_is_authoritative(tmp_path):
    path = _saved(tmp_path, _Configured(["a", "b"]), torch.ones(3))
    _load(path, _Configured(["a", "b"], cache_size=99))
    with pytest.raises(ExperienceError, match=r"fingerprint mismatch.*configuration\.vocabulary"):
        _load(path, _Configured(["b", "a"]))


def test_configuration_must_be_json_safe(tmp_path):
    op = operation(double.fn, configuration={"tokenizer": _Tokenizer()})
    with trace() as session:
        op(1)
    with pytest.raises(ExperienceError, match="configuration is not JSON-safe"):
        session.save(tmp_path / "e.json", operations={"op": op})


def _make_closure(factor):
    def scale(x):
        return x * factor

    return scale


class _Stateful:
    def __init__(self):
        self.factor = 2

    def __call__(self, x):
        return x * self.factor


@pytest.mark.parametrize(
    "fn",
    [lambda x: x * 2, _make_closure(2), _Stateful()],
    ids=["lambda", "closure", "stateful-callable"],
)
def test_closures_lambdas_and_stateful_callables_need_explicit_configuration(tmp_path, fn):
    op = operation(fn)
    with trace() as session:
        op(1)
    with pytest.raises(ExperienceError, match=r"operation\(\.\.\., configuration=\{\.\.\.\}\)"):
        session.save(tmp_path / "e.json", operations={"op": op})
    declared = operation(fn, configuration={"factor": 2})
    path = _saved(tmp_path, declared, 1)
    assert _load(path, operation(fn, configuration={"factor": 2})).replay(OutputRef(0)) == 2
    with pytest.raises(ExperienceError, match=r"fingerprint mismatch.*configuration\.factor"):
        _load(path, operation(fn, configuration={"factor": 3}))


def test_module_level_function_is_described_by_its_qualified_name(tmp_path):
    path = _saved(tmp_path, double, 2)
    assert _load(path, double).replay(OutputRef(0)) == 4
    with pytest.raises(ExperienceError, match="fingerprint mismatch.*configuration.function"):
        _load(path, _add)
