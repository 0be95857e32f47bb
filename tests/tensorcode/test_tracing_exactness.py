"""Tracing under an adversary: lasting structural changes to a call's inputs, operations that change what replay
hands them, references carried to another trace, and traces used from several threads, tasks and contexts.

Every case either rejects the capture before its output becomes replayable, or behaves the same as it would
with no other trace, thread or task around. Threads and tasks are ordered with events; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from torch import nn

import tensorcode
from tensorcode import ExperienceError, InputRef, OutputRef, TraceError, external, operation, trace, training

torch.set_num_threads(1)
TIMEOUT = 30


@dataclasses.dataclass
class Batch:
    features: object
    mask: object


@operation
def replaces_mapping_entry(batch):
    batch["x"] = batch["x"] * 0  # a lasting change: the caller's mapping now holds another tensor
    return batch["x"] + 1


@operation
def replaces_list_entry(items):
    items[0] = items[0] * 0
    return items[0] + items[1]


@operation
def replaces_dataclass_field(batch):
    batch.features = batch.features * 0
    return batch.features + 1


@operation
def replaces_nested_entry(context):
    context["layers"][0] = context["layers"][0] * 0
    return context["layers"][0] + 1


@operation
def total(items):
    return sum(items)


@pytest.mark.parametrize(
    ("op", "make"),
    [
        (replaces_mapping_entry, lambda: {"x": torch.ones(2)}),
        (replaces_list_entry, lambda: [torch.ones(2), torch.ones(2)]),
        (replaces_dataclass_field, lambda: Batch(torch.ones(2), torch.ones(2))),
        (replaces_nested_entry, lambda: {"layers": [torch.ones(2)]}),
    ],
    ids=["mapping-entry", "list-entry", "dataclass-field", "nested-list-entry"],
)
def test_operation_replacing_an_entry_of_its_input_is_rejected(tmp_path, op, make):
    value = make()
    with trace() as session, pytest.raises(TraceError, match=f"an input of {op.__name__} was mutated while"):
        op(value)
    assert [call.status for call in session.calls] == ["failed"]
    with pytest.raises(TraceError, match="failed"):
        session.replay(session.calls[0].output)
    with pytest.raises(ExperienceError, match="call 0 .* failed"):
        session.save(tmp_path / "e.json", operations={"op": op})


@operation
def double(x):
    return x * 2


@operation
def swaps_second(items):
    items[1] = torch.zeros(2)
    return items[0] + items[1]


def test_an_operation_changing_a_container_that_holds_a_captured_output_changes_only_its_own_copy():
    """Such a container is rebuilt for the call (its recorded form points at the output): the caller's list stays
    as it was, and the live output is what replay computes."""
    with trace() as session:
        h = double(torch.ones(2))
        items = [h, torch.ones(2)]
        out = swaps_second(items)
    assert items[0] is h and torch.equal(items[1], torch.ones(2))
    assert torch.equal(session.replay(out), out)


def test_entries_changed_back_before_the_call_returns_are_not_a_lasting_change():
    """Only lasting changes are detected (the spec says so); the record still matches what the call returned."""

    @operation
    def borrows(batch):
        saved = batch["x"]
        batch["x"] = saved * 0
        batch["x"] = saved
        return saved + 1

    with trace() as session:
        borrows({"x": torch.ones(2)})
    assert torch.equal(session.replay(session.calls[0].output), torch.full((2,), 2.0))


class Gate:
    def __init__(self):
        self.started = asyncio.Event()
        self.opened = asyncio.Event()


def gated_sum(gate: Gate):
    async def gated(batch):
        gate.started.set()
        await gate.opened.wait()
        return sum(batch["items"]) if isinstance(batch, dict) else batch.features + 1

    return operation(gated, configuration={"op": "gated-sum"})


@pytest.mark.parametrize(
    ("make", "change"),
    [
        (lambda: {"items": [torch.ones(2)]}, lambda b: b["items"].__setitem__(0, torch.zeros(2))),
        (lambda: {"items": [torch.ones(2)]}, lambda b: b.__setitem__("items", [torch.zeros(2)])),
        (lambda: {"items": [torch.ones(2)]}, lambda b: b["items"].append(torch.zeros(2))),
        (lambda: Batch(torch.ones(2), None), lambda b: setattr(b, "features", torch.zeros(2))),
        (lambda: {"items": [double(torch.ones(2)), torch.ones(2)]}, lambda b: b["items"].pop()),
    ],
    ids=["nested-list-entry", "mapping-entry", "list-append", "dataclass-field", "holding-captured-output"],
)
def test_structural_change_while_an_awaited_call_is_pending_rejects_the_capture(tmp_path, make, change):
    gate = Gate()
    gated = gated_sum(gate)

    async def main():
        with trace() as session:
            batch = make()
            task = asyncio.create_task(gated(batch))
            await gate.started.wait()
            change(batch)  # another coroutine changes the input while the call is in flight
            gate.opened.set()
            with pytest.raises(TraceError, match="mutated while the call ran"):
                await task
        return session

    session = asyncio.run(main())
    assert session.calls[-1].status == "failed"
    with pytest.raises(ExperienceError, match="failed"):
        session.save(tmp_path / "e.json", operations={"gated": gated, "double": double})


# -- replay never changes the stored record ---------------------------------------------------------------------
class Scrubber(nn.Module):
    """Changes what it is given: in place on tensors, and the structure of lists and mappings."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x, context):
        out = self.lin(x * 1) + context["bias"] + sum(context["extra"])
        if not torch.is_grad_enabled() or not self.training:
            return out
        x.add_(1.0)
        context["bias"].mul_(2.0)
        context["extra"].append(torch.ones(2))
        context["new"] = 1
        return out


def test_replaying_an_operation_that_changes_its_inputs_gives_the_same_value_every_time(tmp_path):
    scrubber = Scrubber()
    x, context = torch.ones(1, 2), {"bias": torch.ones(2), "extra": [torch.ones(2)]}
    with torch.no_grad(), trace() as session:
        out = scrubber(x, context)
    first, second, third = (session.replay(out) for _ in range(3))
    assert torch.equal(first, second) and torch.equal(second, third) and torch.allclose(first, out)
    assert torch.equal(session.value(InputRef(0)), torch.ones(1, 2))
    stored = session.value(InputRef(1))
    assert stored.keys() == {"bias", "extra"} and len(stored["extra"]) == 1 and torch.equal(stored["bias"], x[0])

    session.supervise(out, torch.zeros(1, 2), loss="mse", source="human:1")
    session.save(tmp_path / "e.json", operations={"scrubber": scrubber}, release=True)
    loaded = training.load_experience(tmp_path / "e.json", operations={"scrubber": scrubber})
    replays = [loaded.replay(loaded.supervisions[0].output).detach() for _ in range(3)]
    assert all(torch.equal(r, replays[0]) for r in replays)
    # A learning rate of zero: only a changed record could change the loss from one epoch to the next.
    trainer = training.Trainer.from_ops({"scrubber": scrubber}, optimizer=lambda ps: torch.optim.SGD(ps, lr=0.0))
    losses = trainer.fit([loaded], epochs=3)
    assert losses[0] == losses[1] == losses[2]


@external
def fetch(x):
    return {"rows": [x * 3]}


def test_replay_hands_copies_of_recorded_boundary_results():
    with torch.no_grad(), trace() as session:
        rows = fetch(torch.ones(2))
        out = reader(rows)
    assert out is not None
    values = [session.replay(out, boundary="recorded") for _ in range(3)]
    assert all(torch.equal(v, values[0]) for v in values)
    assert torch.equal(session.calls[0].recorded["rows"][0], torch.full((2,), 3.0))


@operation
def reader(result):
    """Reads its input while captured; when replayed it also writes to it, in place and structurally."""
    value = result["rows"][0] * 1
    if tensorcode._tracing.current_session() is None:  # replay runs operations outside any trace
        result["rows"][0].add_(100.0)
        result["rows"].append(torch.zeros(2))
    return value


def test_value_of_an_input_is_a_copy_of_the_stored_snapshot():
    with trace() as session:
        double(torch.ones(2))
    session.value(InputRef(0)).add_(5.0)
    assert torch.equal(session.value(InputRef(0)), torch.ones(2))


# -- references carry the identity of their trace ---------------------------------------------------------------
def two_traces():
    with trace() as first:
        a = double(torch.ones(2))
        double(a)
    with trace() as second:
        double(torch.full((2,), 5.0))
        double(torch.full((2,), 7.0))
    return first, second


def test_output_ref_from_another_trace_is_refused_everywhere():
    first, second = two_traces()
    foreign = first.ref(first.calls[1].value)
    assert foreign.call == 1
    for use in (
        lambda: second.ref(foreign),
        lambda: second.replay(foreign),
        lambda: second.example(foreign),
        lambda: second.value(foreign),
        lambda: second.supervise(foreign, torch.zeros(2), loss="mse"),
        lambda: second.replay(foreign[0]),
    ):
        with pytest.raises(TraceError, match="belongs to another trace"):
            use()
    assert second.supervisions == []
    assert torch.equal(second.replay(second.calls[1].output), torch.full((2,), 14.0))


def test_output_ref_from_another_trace_as_an_argument_rejects_the_call():
    first, _ = two_traces()
    with trace() as third:
        double(torch.ones(2))
        with pytest.raises(TraceError, match="belongs to another trace"):
            double(first.calls[0].output)
    assert len(third.calls) == 1


def test_input_ref_from_another_trace_is_refused():
    first, second = two_traces()
    for use in (
        lambda: second.value(first.inputs[0]),
        lambda: second.replay(second.calls[0].output, inputs={first.inputs[0]: torch.zeros(2)}),
    ):
        with pytest.raises(TraceError, match="belongs to another trace"):
            use()


def test_a_loaded_experience_refuses_references_into_the_trace_it_was_saved_from(tmp_path):
    first, _ = two_traces()
    record = first.supervise(first.calls[1].output, torch.zeros(2), loss="mse", source="human:1")
    first.save(tmp_path / "e.json", operations={"double": double})
    loaded = training.load_experience(tmp_path / "e.json", operations={"double": double})
    with pytest.raises(TraceError, match="belongs to another trace"):
        loaded.replay(record.output)
    assert loaded.supervisions[0].output == record.output  # same position, its own trace
    assert torch.equal(loaded.replay(loaded.supervisions[0].output), torch.full((2,), 4.0))


def test_hand_built_references_name_positions_in_the_trace_they_are_given_to():
    first, second = two_traces()
    assert torch.equal(second.replay(OutputRef(1)), torch.full((2,), 14.0))
    assert torch.equal(first.value(InputRef(0)), torch.ones(2))
    assert second.ref(OutputRef(0)).trace_id == second.trace_id != first.trace_id


# -- threads, tasks and contexts --------------------------------------------------------------------------------
class Holder:
    """A thread that keeps a trace open until released, capturing one call."""

    def __init__(self):
        self.opened, self.done = threading.Event(), threading.Event()
        self.session = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        with trace() as session:
            self.session = session
            nn.Linear(2, 2)(torch.ones(1, 2))
            self.opened.set()
            assert self.done.wait(TIMEOUT)

    def __enter__(self):
        self.thread.start()
        assert self.opened.wait(TIMEOUT)
        return self

    def __exit__(self, *exc_info):
        self.done.set()
        self.thread.join(TIMEOUT)


def closed_trace_task_outcome() -> str:
    """What a module call and an operation call do in a task created inside a trace that has since closed."""
    lin = nn.Linear(4, 4)
    go = asyncio.Event()

    async def later():
        await go.wait()
        outcomes = []
        for call in (lambda: lin(torch.ones(1, 4)), lambda: double(torch.ones(2))):
            try:
                call()
                outcomes.append("ran")
            except TraceError as exc:
                outcomes.append(str(exc))
        return outcomes

    async def main():
        with trace() as session:
            task = asyncio.create_task(later())
        go.set()
        outcomes = await task
        assert session.calls == []
        return outcomes

    return asyncio.run(main())


def test_a_task_created_inside_a_closed_trace_behaves_the_same_whatever_other_threads_do():
    alone = closed_trace_task_outcome()
    with Holder() as holder:
        beside = closed_trace_task_outcome()
    assert alone == beside
    assert all("trace is closed: a task holding its context cannot start new captures" in o for o in alone)
    assert len(holder.session.calls) == 1


def test_untraced_calls_are_never_captured_by_a_trace_open_in_another_thread():
    lin = nn.Linear(2, 2)
    with Holder() as holder:
        for _ in range(5):
            lin(torch.ones(1, 2))
            double(torch.ones(2))
    assert len(holder.session.calls) == 1


def test_concurrent_traces_in_threads_record_exactly_their_own_calls():
    barrier = threading.Barrier(8)
    lin = nn.Linear(2, 2)

    def work(seed: int):
        barrier.wait(TIMEOUT)
        with trace() as session:
            x = torch.full((1, 2), float(seed))
            for _ in range(20):
                x = double(lin(x))
        return seed, session

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(8)))
    for seed, session in results:
        assert len(session.calls) == 40
        assert torch.equal(session.value(InputRef(0)), torch.full((1, 2), float(seed)))
        assert [call.dependencies for call in session.calls[1:]] == [(i,) for i in range(39)]


def test_a_context_copied_into_a_worker_thread_records_consistently():
    """``asyncio.to_thread`` copies the context, so calls in the worker join the trace: roots stay consistent."""

    async def main():
        with trace() as session:
            xs = [torch.full((2,), float(i)) for i in range(16)]
            await asyncio.gather(*(asyncio.to_thread(double, x) for x in xs))
        return session

    session = asyncio.run(main())
    assert len(session.calls) == 16 and len(session.inputs) == 16
    for call in session.calls:
        (root,) = call.inputs
        assert torch.equal(session.replay(call.output), session.value(root) * 2)


def test_exiting_a_trace_in_another_task_is_refused_with_the_documented_error():
    lin = nn.Linear(2, 2)

    async def main():
        session = trace()
        entered = asyncio.Event()

        async def opener():
            session.__enter__()
            lin(torch.ones(1, 2))
            entered.set()

        await asyncio.create_task(opener())
        await entered.wait()
        with pytest.raises(TraceError, match="must be exited in the context .* that entered it"):
            session.__exit__(None, None, None)
        # This context is usable: untraced calls run, a new trace captures normally.
        lin(torch.ones(1, 2))
        with trace() as fresh:
            lin(torch.ones(1, 2))
        return session, fresh

    session, fresh = asyncio.run(main())
    assert session.closed and len(session.calls) == 1 and len(fresh.calls) == 1


def test_exiting_from_a_copy_of_the_entering_context_leaves_that_copy_usable():
    lin = nn.Linear(2, 2)
    session = trace()
    session.__enter__()
    copied = contextvars.copy_context()
    try:

        def leave_and_continue():
            with pytest.raises(TraceError, match="must be exited in the context"):
                session.__exit__(None, None, None)
            assert tensorcode._tracing.current_session() is None
            lin(torch.ones(1, 2))  # runs untraced, no error
            with trace() as again:
                lin(torch.ones(1, 2))
            return again

        again = copied.run(leave_and_continue)
        assert len(again.calls) == 1 and session.closed
        with pytest.raises(TraceError, match="trace is closed"):
            lin(torch.ones(1, 2))  # the entering context still holds the (now closed) trace
    finally:
        session.__exit__(None, None, None)  # the entering context can still leave it
    assert tensorcode._tracing.current_session() is None


def test_a_thread_started_inside_a_trace_runs_outside_it():
    lin = nn.Linear(2, 2)
    outcome = []
    with trace() as session:
        worker = threading.Thread(target=lambda: outcome.append((lin(torch.ones(1, 2)), double(torch.ones(2)))))
        worker.start()
        worker.join(TIMEOUT)
    assert len(outcome) == 1 and session.calls == []


def test_exiting_twice_or_without_entering_is_the_documented_error():
    session = trace()
    with pytest.raises(TraceError, match="never entered"):
        session.__exit__(None, None, None)
    with session:
        pass
    with pytest.raises(TraceError, match="already been exited"):
        session.__exit__(None, None, None)
    assert tensorcode._tracing.current_session() is None
