"""Scale is not bad input: a chain of 100,000 dependent calls supervises, saves, loads, replays and trains one
step under Python's default recursion limit, because every walk of the DAG is iterative."""

from __future__ import annotations

import sys
import time

import pytest
import torch
from torch import nn

import tensorcode
from tensorcode import OutputRef, training

torch.set_num_threads(1)
CALLS = 100_000
pytestmark = pytest.mark.scale


class Shift(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x):  # (1,) -> (1,)
        return x + self.bias


@tensorcode.operation(configuration={"op": "halve"})
def halve(x):
    return x * 0.5


@pytest.fixture
def default_recursion_limit():
    """Run under CPython's default limit even if something in the process raised it."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


def test_100000_call_chain_supervises_saves_loads_replays_and_trains(tmp_path, default_recursion_limit):
    timings = {}
    start = time.perf_counter()
    shift = Shift()
    ops = {"shift": shift, "halve": halve}
    with tensorcode.trace() as session:
        x = torch.ones(1)
        for _ in range(CALLS // 2):
            x = halve(shift(x))
    assert len(session.calls) == CALLS
    assert session.calls[-1].dependencies == (CALLS - 2,)
    session.supervise(x, torch.full((1,), 2.0), loss="mse", source="scale")
    example = session.example(x)
    assert len(example.calls) == CALLS and len(example.roots) == 1
    timings["trace"] = time.perf_counter() - start

    path = tmp_path / "chain.json"
    session.save(path, operations=ops, release=True)
    timings["save"] = time.perf_counter() - start - sum(timings.values())

    loaded = training.load_experience(path, operations=ops)
    assert len(loaded.calls) == CALLS and loaded.calls[-1].dependencies == (CALLS - 2,)
    timings["load"] = time.perf_counter() - start - sum(timings.values())

    # x_{k+1} = (x_k + b) / 2 from x_0 = 1 converges to b = 0.
    replayed = loaded.replay(loaded.supervisions[0].output)
    assert torch.allclose(replayed, torch.zeros(1), atol=1e-6)
    assert torch.equal(session.replay(OutputRef(CALLS - 1)), replayed)  # the released original replays too
    timings["replay"] = time.perf_counter() - start - sum(timings.values())

    trainer = training.Trainer.from_ops(ops, lr=0.5)
    loss = trainer.step(loaded)
    assert loss == pytest.approx(4.0, abs=1e-4)
    assert shift.bias.item() > 0  # d(out)/d(bias) ~ 1 at the fixed point, the target is 2
    timings["train"] = time.perf_counter() - start - sum(timings.values())
    print("100k-call chain, seconds:", {k: round(v, 2) for k, v in timings.items()})
