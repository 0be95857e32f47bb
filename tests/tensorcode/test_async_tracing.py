"""Awaited operations inside ``trace()``: live tensors and gradients, pending work, cancellation, mutation while a
call is in flight, and tasks that outlive their session. Events order the steps; nothing sleeps."""

from __future__ import annotations

import asyncio
import contextvars

import pytest
import torch
from torch import nn

from tensorcode import ExperienceError, TraceError, operation, trace

torch.set_num_threads(1)


class Gate:
    """Holds an awaited operation in flight: ``started`` is set once it runs, it returns after ``release()``."""

    def __init__(self):
        self.started = asyncio.Event()
        self.opened = asyncio.Event()

    def release(self):
        self.opened.set()


def gated_operation(gate: Gate, *, fail: bool = False):
    async def gated(x):
        gate.started.set()
        await gate.opened.wait()
        if fail:
            raise ValueError("remote said no")
        return x * 2

    return operation(gated, configuration={"op": "gated", "fail": fail})


@operation
def halve(x):
    return x / 2


@operation
async def project(x, lin):
    """Awaits, then calls a module: the module call belongs to this captured call."""
    await asyncio.sleep(0)
    return lin(x) * 2


@operation
async def passthrough(x):
    await asyncio.sleep(0)
    return x


@operation
async def plus_one(x):
    await asyncio.sleep(0)
    return x + 1


@operation
def make_list(x):
    return [x, x * 2]


def run(coroutine):
    return asyncio.run(coroutine)


def test_awaited_operation_preserves_live_tensors_and_native_gradients():
    lin = nn.Linear(4, 4)

    async def main():
        with trace() as session:
            h = lin(torch.randn(1, 4))
            y = await project(h, lin)
            same = await passthrough(y)
        return session, h, y, same

    session, h, y, same = run(main())
    assert [call.op for call in session.calls] == [lin, project, passthrough]
    assert session.calls[1].dependencies == (0,) and session.calls[2].dependencies == (1,)
    assert session.calls[1].value is y and same is y
    assert y.grad_fn is not None
    y.sum().backward()
    assert lin.weight.grad is not None and lin.weight.grad.abs().sum() > 0


def test_concurrent_awaited_calls_are_recorded_separately():
    lin = nn.Linear(4, 4)

    async def main():
        with trace() as session:
            a, b = lin(torch.randn(1, 4)), lin(torch.randn(1, 4))
            ya, yb = await asyncio.gather(project(a, lin), project(b, lin))
        return session, a, b, ya, yb

    session, a, b, ya, yb = run(main())
    assert len(session.calls) == 4
    assert session.calls[session.ref(ya).call].dependencies == (session.ref(a).call,)
    assert session.calls[session.ref(yb).call].dependencies == (session.ref(b).call,)


def test_pending_work_must_be_awaited_before_referencing_releasing_or_saving(tmp_path):
    lin = nn.Linear(4, 4)
    gate = Gate()
    gated = gated_operation(gate)

    async def main():
        with trace() as session:
            h = lin(torch.randn(1, 4))
            task = asyncio.create_task(gated(h))
            await gate.started.wait()
            for action in (
                lambda: session.ref(h),
                lambda: session.supervise(h, 1),
                lambda: session.example(h),
                lambda: session.replay(h),
                session.release,
            ):
                with pytest.raises(TraceError, match=r"1 captured call\(s\) are still pending; await them"):
                    action()
            with pytest.raises(ExperienceError, match="still pending"):
                session.save(tmp_path / "e.json", operations={"lin": lin, "gated": gated})
            gate.release()
            y = await task
        return session, y

    session, y = run(main())
    assert session.ref(y).call == 1
    session.save(tmp_path / "e.json", operations={"lin": lin, "gated": gated}, release=True)
    assert session.released


def test_a_created_but_unstarted_call_is_pending_until_awaited():
    async def main():
        with trace() as session:
            x = halve(torch.ones(2))
            pending = plus_one(x)
            with pytest.raises(TraceError, match="still pending"):
                session.ref(x)
            y = await pending
        return session, y

    session, y = run(main())
    assert session.ref(y).call == 1


def test_cancelled_call_remains_a_failure(tmp_path):
    gate = Gate()
    gated = gated_operation(gate)

    async def main():
        with trace() as session:
            task = asyncio.create_task(gated(torch.ones(2)))
            await gate.started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        return session

    session = run(main())
    call = session.calls[0]
    assert call.status == "cancelled"
    with pytest.raises(TraceError, match="cancelled"):
        _ = call.value
    with pytest.raises(ExperienceError, match="call 0 .* cancelled and cannot be persisted"):
        session.save(tmp_path / "e.json", operations={"gated": gated})
    assert not (tmp_path / "e.json").exists()


def test_call_cancelled_or_closed_before_it_starts_is_not_left_pending(tmp_path):
    async def main():
        with trace() as session:
            x = halve(torch.ones(2))
            task = asyncio.create_task(passthrough(x))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            passthrough(x).close()
        return session

    session = run(main())
    assert [call.op for call in session.calls] == [halve]
    session.save(tmp_path / "e.json", operations={"halve": halve, "passthrough": passthrough}, release=True)
    assert session.released


def test_failed_awaited_call_remains_a_failure(tmp_path):
    gate = Gate()
    gated = gated_operation(gate, fail=True)
    gate.release()

    async def main():
        with trace() as session, pytest.raises(ValueError, match="remote said no"):
            await gated(torch.ones(2))
        return session

    session = run(main())
    assert session.calls[0].status == "failed" and "remote said no" in session.calls[0].error
    with pytest.raises(ExperienceError, match="failed and cannot be persisted"):
        session.save(tmp_path / "e.json", operations={"gated": gated})


def test_mutating_a_view_base_while_the_call_is_in_flight_rejects_the_capture(tmp_path):
    gate = Gate()
    gated = gated_operation(gate)
    base = torch.ones(2, 4)

    async def main():
        with trace() as session:
            task = asyncio.create_task(gated(base[0]))
            await gate.started.wait()
            base.add_(1.0)
            gate.release()
            with pytest.raises(TraceError, match="mutated while the call ran; the capture is rejected"):
                await task
        return session

    session = run(main())
    assert session.calls[0].status == "failed"
    with pytest.raises(TraceError, match="failed"):
        _ = session.calls[0].value
    with pytest.raises(ExperienceError, match="failed"):
        session.save(tmp_path / "e.json", operations={"gated": gated})


def test_mutating_a_context_tensor_while_the_call_is_in_flight_rejects_the_capture():
    gate = Gate()

    async def gated(x, *, context):
        gate.started.set()
        await gate.opened.wait()
        return x * context["scale"]

    op = operation(gated, configuration={"op": "gated-context"})
    scale = torch.full((2,), 2.0)

    async def main():
        with trace() as session:
            task = asyncio.create_task(op(torch.ones(2), context={"scale": scale}))
            await gate.started.wait()
            scale.fill_(5.0)
            gate.release()
            with pytest.raises(TraceError, match="mutated while the call ran"):
                await task
        return session

    session = run(main())
    assert session.calls[0].status == "failed"
    assert torch.equal(session.value(session.calls[0].inputs[-1])["scale"], torch.full((2,), 2.0))


def test_mutating_a_captured_intermediate_while_the_call_is_in_flight_rejects_the_capture():
    lin = nn.Linear(4, 4)
    gate = Gate()
    gated = gated_operation(gate)

    async def main():
        with torch.no_grad(), trace() as session:
            h = lin(torch.ones(1, 4))
            task = asyncio.create_task(gated(h))
            await gate.started.wait()
            h.mul_(5.0)
            gate.release()
            with pytest.raises(TraceError, match="mutated while the call ran"):
                await task
            with pytest.raises(TraceError, match="mutated before reuse"):
                halve(h)
        return session

    session = run(main())
    assert [call.status for call in session.calls] == ["ok", "failed"]


def test_lasting_container_change_during_a_call_is_rejected_at_save(tmp_path):
    gate = Gate()
    gated = gated_operation(gate)

    async def main():
        with trace() as session:
            items = make_list(torch.ones(2))
            task = asyncio.create_task(gated(items[0]))
            await gate.started.wait()
            items.append(torch.zeros(2))
            gate.release()
            await task
        return session

    session = run(main())
    with pytest.raises(ExperienceError, match="call 0 .* mutated"):
        session.save(tmp_path / "e.json", operations={"make_list": make_list, "gated": gated})
    with pytest.raises(TraceError, match="call 0 .* mutated"):
        session.release()


def test_task_holding_a_closed_sessions_context_cannot_start_new_captures():
    lin = nn.Linear(4, 4)
    go = asyncio.Event()

    async def later(kind):
        await go.wait()
        if kind == "sync":
            return halve(torch.ones(2))
        if kind == "async":
            return await passthrough(torch.ones(2))
        return lin(torch.ones(1, 4))

    async def main():
        with trace() as session:
            tasks = {kind: asyncio.create_task(later(kind)) for kind in ("sync", "async", "module")}
        go.set()
        for kind in ("sync", "async", "module"):
            with pytest.raises(TraceError, match="trace is closed: a task holding its context cannot start new"):
                await tasks[kind]
        return session

    session = run(main())
    assert session.calls == []


def test_copied_context_of_a_closed_session_cannot_capture():
    with trace() as session:
        context = contextvars.copy_context()
    with pytest.raises(TraceError, match="trace is closed"):
        context.run(halve, torch.ones(2))
    assert session.calls == []


def test_awaited_operation_outside_a_trace_just_runs():
    lin = nn.Linear(4, 4)
    y = run(project(torch.ones(1, 4), lin))
    assert torch.allclose(y, lin(torch.ones(1, 4)) * 2)


def test_awaited_operation_inside_a_captured_awaited_call_is_not_recorded():
    @operation(configuration={"op": "outer"})
    async def outer(x):
        return await passthrough(halve(x))

    async def main():
        with trace() as session:
            await outer(torch.ones(2))
        return session

    session = run(main())
    assert [call.op for call in session.calls] == [outer]


class AsyncScale(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.tensor(2.0))


def test_pure_async_operation_replays_and_trains_from_synchronous_code(tmp_path):
    """Replay runs an awaited pure operation to completion, so a Trainer can train through it."""
    from tensorcode import training

    scale = AsyncScale()

    @operation(configuration={"op": "async-scale"})
    async def remote_free_scale(x):
        await asyncio.sleep(0)
        return x * scale.weight

    async def program():
        with trace() as session:
            out = await remote_free_scale(torch.ones(3))
        return session, out

    session, out = asyncio.run(program())
    session.supervise(out, torch.zeros(3), loss="mse", source="test")
    assert torch.equal(session.replay(out), out)
    operations = {"scale": remote_free_scale, "holder": scale}
    session.save(tmp_path / "async.json", operations=operations, release=True)
    loaded = training.load_experience(tmp_path / "async.json", operations=operations)
    trainer = training.Trainer.from_ops(operations, lr=0.1)
    before = scale.weight.item()
    trainer.step(loaded)
    assert scale.weight.item() < before


@operation
async def remote_double(x):
    await asyncio.sleep(0)
    return x * 2


def test_async_replay_inside_a_running_loop_is_refused_with_advice():
    async def program():
        with trace() as session:
            out = await remote_double(torch.ones(2))
        with pytest.raises(TraceError, match="running event loop"):
            session.replay(out)

    asyncio.run(program())
