"""``tensorcode.trace``: what is captured, dependencies by identity, roots, references, examples, mutation stamps,
and the global state a trace installs.

Supervision and failed calls are in ``test_supervision.py``, replay/release/fingerprints in ``test_replay.py``,
awaited calls in ``test_async_tracing.py``.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

import tensorcode
from tensorcode import ExperienceError, InputRef, OutputRef, TraceError, external, operation, trace

torch.set_num_threads(1)


class Encoder(nn.Module):
    """A module with submodules, so nested calls happen inside one captured call."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):  # (batch, 4) -> (batch, 8)
        return torch.relu(self.norm(self.proj(x)))


class Table(nn.Module):
    """Returns the same buffer object on every call: its outputs alias each other."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.arange(6.0).reshape(2, 3))

    def forward(self):
        return self.table


@dataclasses.dataclass
class Batch:
    features: object
    mask: object


@dataclasses.dataclass(frozen=True, slots=True)
class Frozen:
    features: object


@operation
def combine(items):
    """Sums the tensors of a list, tuple, mapping or ``Batch``."""
    if isinstance(items, dict):
        items = list(items.values())
    if isinstance(items, (Batch, Frozen)):
        items = [items.features]
    return sum(items)


@operation
def scaled(x, *, context):
    return x * context["scale"]


@operation
def halve(x):
    return x / 2


@operation
def pair(x):
    return x + 1, x - 1


@operation
def mean_value(x):
    return float(x.mean())


@operation
def identity(x):
    return x


@external
def remote_score(x):
    """A remote service stand-in."""
    return x.sum(-1) * 3


def test_trace_returns_public_trace_and_public_reference_types():
    session = trace()
    assert isinstance(session, tensorcode.Trace)
    assert {"trace", "Trace", "InputRef", "OutputRef"} <= set(tensorcode.__all__)
    assert OutputRef(2)[0]["logits"] == OutputRef(2, (0, "logits"))


def test_capture_engine_is_private():
    public = {name for name in dir(tensorcode) if not name.startswith("_")}
    assert not public & {"capture", "Call", "Supervision", "Example", "tracing", "Ref", "Root"}
    assert tensorcode.Trace.__module__ == "tensorcode._trace"


def test_sequential_module_call_is_one_recorded_call():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(3, 4)
    with trace() as session:
        y = model(x)
    assert len(session.calls) == 1
    assert session.calls[0].op is model
    assert session.calls[0].value is y


def test_submodule_calls_inside_a_captured_call_are_not_recorded():
    encoder, head = Encoder(), nn.Linear(8, 2)
    with trace() as session:
        y = head(encoder(torch.randn(2, 4)))
    assert [call.op for call in session.calls] == [encoder, head]
    assert session.calls[1].dependencies == (0,)
    assert session.value(session.ref(y)) is y


def test_operation_called_inside_a_module_belongs_to_that_call():
    class Uses(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return halve(self.lin(x))

    model = Uses()
    with trace() as session:
        model(torch.randn(1, 4))
    assert [call.op for call in session.calls] == [model]


def test_module_called_inside_an_operation_belongs_to_that_call():
    lin = nn.Linear(4, 4)

    @operation(configuration={"uses": "lin"})
    def wrapped(x):
        return lin(x) * 2

    with trace() as session:
        wrapped(torch.randn(1, 4))
    assert [call.op for call in session.calls] == [wrapped]


def test_calls_outside_the_block_are_not_recorded():
    lin = nn.Linear(4, 4)
    with trace() as session:
        lin(torch.randn(1, 4))
    lin(torch.randn(1, 4))
    halve(torch.ones(1))
    assert len(session.calls) == 1


def test_undeclared_plain_function_is_not_captured_and_its_result_is_a_detached_root():
    """Plain Python transformations do not become differentiable because they were observed."""
    encoder, head = Encoder(), nn.Linear(8, 2)

    def double(t):
        return t * 2

    with trace() as session:
        h = encoder(torch.randn(2, 4))
        y = head(double(h))
    assert [call.op for call in session.calls] == [encoder, head]
    assert session.calls[1].dependencies == ()
    assert session.example(y).calls == (1,)
    root = session.value(session.calls[1].inputs[0])
    assert not root.requires_grad
    assert torch.equal(root, (h * 2).detach())


def test_declared_operation_is_pure_by_default_and_external_is_a_boundary():
    x = torch.randn(2, 4)
    with trace() as session:
        halve(x)
        score = remote_score(x)
    assert halve.kind == "pure" and halve.replayable
    assert remote_score.kind == "external" and not remote_score.replayable
    assert [call.kind for call in session.calls] == ["pure", "external"]
    assert torch.equal(session.calls[1].recorded, score)
    assert session.calls[0].recorded is None


def test_operation_declared_with_a_wrapper_and_a_name():
    def add_one(x):
        return x + 1

    op = operation(add_one, configuration={"adds": 1}, name="add-one")
    with trace() as session:
        assert op(1) == 2
    assert op.__name__ == "add-one"
    assert session.calls[0].name == "add-one"


def test_operation_kind_must_be_pure_or_external():
    with pytest.raises(ValueError, match="'pure' or 'external'"):
        tensorcode.Operation(halve.fn, kind="sometimes")


def test_captured_module_output_keeps_native_gradients():
    lin = nn.Linear(4, 2)
    with trace() as session:
        y = lin(torch.randn(3, 4))
    assert y.grad_fn is not None and session.calls[0].value is y
    y.sum().backward()
    assert lin.weight.grad is not None and lin.weight.grad.abs().sum() > 0


def _with_list(h, x):
    return combine([h, x])


def _with_tuple(h, x):
    return combine((x, h))


def _with_dict(h, x):
    return combine({"a": x, "b": h})


def _with_dataclass(h, x):
    return combine(Batch(features=h, mask=x))


def _with_frozen_slots_dataclass(h, x):
    return combine(Frozen(features=h))


def _with_context(h, x):
    return scaled(x, context={"scale": h})


@pytest.mark.parametrize(
    "use",
    [_with_list, _with_tuple, _with_dict, _with_dataclass, _with_frozen_slots_dataclass, _with_context],
    ids=["list", "tuple", "dict", "dataclass", "frozen-slots-dataclass", "keyword-context"],
)
def test_captured_output_inside_an_argument_is_a_dependency(use):
    lin = nn.Linear(4, 4)
    x = torch.randn(1, 4)
    with trace() as session:
        h = lin(x)
        y = use(h, torch.ones(1, 4))
    assert session.calls[1].dependencies == (0,)
    assert torch.allclose(session.replay(y), y)
    with torch.no_grad():
        lin.bias += 1.0
    assert not torch.allclose(session.replay(y), y), "replay must recompute through the dependency"


def test_arguments_that_are_not_captured_outputs_are_snapshotted_roots():
    lin = nn.Linear(4, 4)
    x, ones = torch.randn(1, 4), torch.ones(1, 4)
    with trace() as session:
        h = lin(x)
        combine([h, ones, 5])
    assert session.inputs == [InputRef(0), InputRef(1), InputRef(2)]
    assert session.calls[0].inputs == [InputRef(0)]
    assert session.calls[1].inputs == [InputRef(1), InputRef(2)]
    assert torch.equal(session.value(InputRef(0)), x) and session.value(InputRef(0)) is not x
    assert session.value(InputRef(2)) == 5


def test_root_keeps_its_value_when_the_input_is_mutated_after_the_call():
    lin = nn.Linear(4, 4)
    x = torch.ones(1, 4)
    settings = {"items": [torch.ones(2)]}
    with trace() as session:
        y = lin(x)
        identity(settings)
    expected = lin(torch.ones(1, 4))
    x.add_(5)
    settings["items"][0].mul_(7)
    settings["items"].append(torch.zeros(2))
    assert torch.equal(session.value(InputRef(0)), torch.ones(1, 4))
    assert torch.equal(session.value(InputRef(1))["items"][0], torch.ones(2))
    assert len(session.value(InputRef(1))["items"]) == 1
    assert torch.allclose(session.replay(y), expected)
    assert torch.allclose(session.replay(y), y)


def test_root_snapshot_is_detached_from_autograd():
    lin = nn.Linear(4, 4)
    x = torch.randn(1, 4, requires_grad=True)
    with trace() as session:
        lin(x)
    assert x.requires_grad and not session.value(InputRef(0)).requires_grad


def test_output_ref_argument_is_an_explicit_dependency():
    lin, head = nn.Linear(4, 4), nn.Linear(4, 2)
    received = []

    @operation(configuration={"op": "spy"})
    def spy(value):
        received.append(value)
        return value * 1

    with trace() as session:
        h = lin(torch.randn(1, 4))
        y = head(session.calls[0].output)
        spy(session.ref(h))
    assert session.calls[1].dependencies == (0,)
    assert session.calls[2].dependencies == (0,)
    assert received[0] is h
    assert torch.allclose(y, head(h))


def test_output_ref_with_a_path_reaches_an_element_of_an_output():
    with trace() as session:
        plus, minus = pair(torch.ones(2))
        y = halve(session.calls[0].output[1])
    assert torch.equal(y, minus / 2)
    assert session.calls[1].dependencies == (0,)
    assert session.ref(plus) == OutputRef(0, (0,))
    assert session.ref(minus) == OutputRef(0, (1,))


def test_scalar_output_is_reused_through_an_explicit_handle():
    with trace() as session:
        value = mean_value(torch.ones(3))
        doubled = halve(session.calls[0].output)
    assert value == 1.0 and doubled == 0.5
    assert session.calls[1].dependencies == (0,)
    assert session.replay(session.calls[1].output) == 0.5


def test_equal_valued_independent_outputs_are_not_merged():
    lin, head = nn.Linear(4, 4), nn.Linear(4, 2)
    x = torch.ones(1, 4)
    with trace() as session:
        a = lin(x)
        b = lin(x.clone())
        ya = head(a)
        yb = head(b)
    assert torch.equal(a, b)
    assert session.ref(a) == OutputRef(0) and session.ref(b) == OutputRef(1)
    assert session.calls[2].dependencies == (0,) and session.calls[3].dependencies == (1,)
    assert session.ref(ya) != session.ref(yb)
    assert len(session.inputs) == 2


def test_ref_returns_an_output_ref_found_by_identity():
    lin = nn.Linear(4, 4)
    with trace() as session:
        y = lin(torch.randn(1, 4))
    ref = session.ref(y)
    assert isinstance(ref, OutputRef) and ref == OutputRef(0)
    assert session.ref(ref) == ref


@pytest.mark.parametrize("scalar", [1.5, 3, "label", True, None])
def test_ref_refuses_scalars_and_points_to_calls_output(scalar):
    @operation(configuration={"returns": repr(scalar)})
    def constant(x):
        return scalar

    with trace() as session:
        value = constant(torch.ones(1))
    with pytest.raises(TraceError, match=r"session\.calls\[index\]\.output"):
        session.ref(value)
    assert session.ref(session.calls[0].output) == OutputRef(0)


def test_ref_refuses_an_ambiguous_alias_and_points_to_calls_output():
    table = Table()
    with trace() as session:
        first = table()
        second = table()
    assert first is second
    with pytest.raises(TraceError, match=r"ambiguous alias.*\[0, 1\].*session\.calls\[index\]\.output"):
        session.ref(first)
    assert session.supervise(session.calls[1].output, 0).output == OutputRef(1)


def test_identity_operation_output_aliasing_its_dependency_is_ambiguous():
    lin = nn.Linear(4, 4)
    with trace() as session:
        h = lin(torch.randn(1, 4))
        same = identity(h)
    assert same is h
    with pytest.raises(TraceError, match="ambiguous alias"):
        session.ref(h)


def test_ref_refuses_objects_that_are_not_captured_outputs():
    lin = nn.Linear(4, 4)
    x = torch.randn(1, 4)
    with trace() as session:
        lin(x)
    with pytest.raises(TraceError, match="not a captured output"):
        session.ref(x)
    with pytest.raises(TraceError, match="does not name a call"):
        session.ref(OutputRef(5))


def test_example_returns_the_dependency_closure_and_its_external_roots():
    encoder, head, other = Encoder(), nn.Linear(8, 2), nn.Linear(4, 4)
    with trace() as session:
        unrelated = other(torch.randn(1, 4))
        h = encoder(torch.randn(1, 4))
        y = head(h)
        combine([y, torch.zeros(1, 2)])
    example = session.example(y)
    assert example.target == OutputRef(2)
    assert example.calls == (1, 2)
    assert example.roots == (InputRef(1),)
    assert session.example(unrelated).calls == (0,)
    assert session.example(session.calls[3].output).roots == (InputRef(1), InputRef(2))


def test_example_does_not_release_memory():
    lin = nn.Linear(4, 4)
    with trace() as session:
        y = lin(torch.randn(1, 4))
    session.example(y)
    assert not session.released
    assert session.calls[0].value is y
    assert session.ref(y) == OutputRef(0)


# -- mutation ---------------------------------------------------------------------------------------------------
def test_reuse_rejects_a_mutated_intermediate():
    lin, head = nn.Linear(4, 4), nn.Linear(4, 2)
    with trace() as session:
        h = lin(torch.randn(1, 4))
        h.add_(1.0)
        with pytest.raises(TraceError, match="call 0 .* mutated before reuse"):
            head(h)
        with pytest.raises(TraceError, match="mutated before reuse"):
            head(session.calls[0].output)
    assert len(session.calls) == 1


def test_reuse_of_an_unchanged_intermediate_is_allowed():
    lin, head = nn.Linear(4, 4), nn.Linear(4, 2)
    with trace() as session, torch.inference_mode():
        h = lin(torch.randn(1, 4))
        head(h)
    assert session.calls[1].dependencies == (0,)
    session.validate(persist=True)


def test_save_rejects_a_mutated_intermediate(tmp_path):
    lin = nn.Linear(4, 4)
    with trace() as session:
        h = lin(torch.randn(1, 4))
    with torch.no_grad():
        h.mul_(2)
    path = tmp_path / "experience.json"
    with pytest.raises(ExperienceError, match="call 0 .* mutated"):
        session.save(path, operations={"lin": lin})
    assert not path.exists()


def test_release_rejects_a_mutated_intermediate_and_keeps_live_results():
    lin = nn.Linear(4, 4)
    with trace() as session:
        h = lin(torch.randn(1, 4))
    h.sub_(1.0)
    with pytest.raises(TraceError, match="mutated"):
        session.release()
    assert not session.released
    assert session.calls[0].value is h


def test_mutating_a_view_of_an_intermediate_is_detected():
    lin, head = nn.Linear(4, 4), nn.Linear(4, 2)
    with trace():
        h = lin(torch.randn(2, 4))
        h[0].zero_()
        with pytest.raises(TraceError, match="mutated before reuse"):
            head(h)


@operation
def make_list(x):
    return [x, x * 2]


@operation
def make_dict(x):
    return {"a": x, "b": x * 2}


@operation
def make_batch(x):
    return Batch(features=x, mask=x > 0)


@pytest.mark.parametrize(
    ("make", "change"),
    [
        (make_list, lambda out: out.append(torch.zeros(2))),
        (make_list, lambda out: out.__setitem__(0, torch.zeros(2))),
        (make_dict, lambda out: out.__setitem__("c", torch.zeros(2))),
        (make_dict, lambda out: out.pop("a")),
        (make_batch, lambda out: setattr(out, "features", torch.zeros(2))),
    ],
    ids=["list-append", "list-replace", "dict-add", "dict-remove", "dataclass-field"],
)
def test_structural_change_of_a_container_output_is_rejected(tmp_path, make, change):
    with trace() as session:
        out = make(torch.ones(2))
        change(out)
        with pytest.raises(TraceError, match="call 0 .* mutated before reuse"):
            identity(out)
    with pytest.raises(TraceError, match="mutated"):
        session.release()
    with pytest.raises(ExperienceError, match="mutated"):
        session.save(tmp_path / "e.json", operations={"make": make, "identity": identity})


def test_inference_mode_output_mutation_is_caught_by_the_content_stamp():
    lin, head = nn.Linear(4, 4), nn.Linear(4, 2)
    with torch.inference_mode(), trace() as session:
        h = lin(torch.randn(1, 4))
        assert h.is_inference()
        h.mul_(3.0)
        with pytest.raises(TraceError, match="mutated before reuse"):
            head(h)
    with pytest.raises(TraceError, match="mutated"):
        session.validate()


def test_inference_mode_zero_dim_and_bfloat16_outputs_are_stamped():
    loss = nn.MSELoss()
    with torch.inference_mode(), trace() as session:
        scalar = loss(torch.ones(3), torch.zeros(3))
        low = nn.Linear(4, 4).to(torch.bfloat16)(torch.ones(1, 4, dtype=torch.bfloat16))
        session.validate()
        scalar.add_(1.0)
        low.add_(1.0)
    assert scalar.dim() == 0
    with pytest.raises(TraceError, match="call 0 .* mutated"):
        session.validate()


def test_in_place_write_to_an_input_during_the_call_fails_the_capture(tmp_path):
    lin, relu = nn.Linear(4, 4), nn.ReLU(inplace=True)
    with torch.no_grad(), trace() as session:
        h = lin(torch.randn(1, 4))
        with pytest.raises(TraceError, match="mutated while the call ran"):
            relu(h)
        x = torch.randn(1, 4)
        with pytest.raises(TraceError, match="mutated while the call ran"):
            relu(x)
    assert [call.status for call in session.calls] == ["ok", "failed", "failed"]
    with pytest.raises(TraceError, match="failed"):
        _ = session.calls[1].value
    with pytest.raises(ExperienceError, match="call 1 .* failed"):
        session.save(tmp_path / "e.json", operations={"lin": lin, "relu": relu})


@operation
def masked(x, *, context):
    context["mask"].add_(1.0)  # writes to its context: not allowed while captured
    return x * 2


@operation
def scales_first(items):
    items[0].mul_(3.0)
    return items[1] * 2


def test_in_place_write_to_a_tensor_inside_a_container_argument_fails_the_capture():
    """Context and container elements are inputs too: their version counters are watched."""
    with trace() as session:
        with pytest.raises(TraceError, match="an input of masked was mutated while the call ran"):
            masked(torch.ones(2), context={"mask": torch.zeros(2)})
        with pytest.raises(TraceError, match="an input of scales_first was mutated while the call ran"):
            scales_first([torch.ones(2), torch.ones(2)])
    assert [call.status for call in session.calls] == ["failed", "failed"]


# -- global state -------------------------------------------------------------------------------------------------
def test_module_calls_outside_a_trace_are_not_captured_and_leave_no_state():
    """The module hook stays installed after the first trace (swapping it costs ~100 us per trace); calls outside a
    trace pass straight through to torch."""
    lin = nn.Linear(4, 4)
    with trace() as session:
        lin(torch.randn(1, 4))
    assert tensorcode._tracing.current_session() is None
    x = torch.randn(1, 4)
    assert torch.equal(lin(x), nn.functional.linear(x, lin.weight, lin.bias))
    assert len(session.calls) == 1


def test_global_state_is_restored_after_an_exception_inside_the_block():
    lin = nn.Linear(4, 4)
    with pytest.raises(KeyError), trace() as session:
        lin(torch.randn(1, 4))
        raise KeyError("boom")
    assert tensorcode._tracing.current_session() is None
    lin(torch.randn(1, 4))
    assert len(session.calls) == 1 and session.closed


def test_nested_traces_record_into_the_innermost_and_restore_the_outer():
    lin = nn.Linear(4, 4)
    with trace() as outer:
        lin(torch.randn(1, 4))
        with trace() as inner:
            lin(torch.randn(1, 4))
        assert tensorcode._tracing.current_session() is outer
        lin(torch.randn(1, 4))
    assert tensorcode._tracing.current_session() is None
    assert (len(outer.calls), len(inner.calls)) == (2, 1)


def test_a_trace_can_be_entered_only_once():
    session = trace()
    with session:
        pass
    with pytest.raises(TraceError, match="entered only once"), session:
        pass
    assert tensorcode._tracing.current_session() is None


def test_closed_trace_does_not_capture():
    lin = nn.Linear(4, 4)
    with trace() as session:
        pass
    lin(torch.randn(1, 4))
    halve(torch.ones(1))
    assert session.closed and session.calls == []
