"""Tracing overhead: module calls inside ``with trace()`` versus the same calls without it.

(a) ``nn.Linear(16, 16)`` on a ``(4, 16)`` input: the added cost per call in microseconds. Goal: <= 25 us.
(b) a 2-layer ``nn.TransformerEncoder`` (d_model 256, nhead 4, seq 64, batch 8, batch_first): traced/plain.
    Goal: <= 1.05.

Each traced block opens a fresh short session (``--calls`` calls per ``with trace()``), as real use does, so
opening and closing sessions, snapshotting roots and recording calls are all in the measurement; dropping the
session afterwards is not. Plain and traced blocks alternate (their order flips every repeat) so background
load hits both alike. Blocks are timed in CPU time of this thread (``time.thread_time``; torch runs on this one
thread), so being descheduled by other processes does not count; sharing caches with them still does. The table
reports medians of the paired (adjacent) differences and ratios and, as a check, the best block of each. Both
with autograd (graph building) and under ``torch.no_grad()`` (how captures for supervision usually run).

Run: ``python bench/trace_overhead.py [--repeats N]``. Figures compare timings of one run only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tensorcode import trace  # noqa: E402

torch.set_num_threads(1)


def plain_block(model, x, calls: int) -> float:
    """Seconds per call for ``calls`` plain calls."""
    start = time.thread_time()
    for _ in range(calls):
        model(x)
    return (time.thread_time() - start) / calls


def traced_block(model, x, calls: int) -> float:
    """Seconds per call for ``calls`` calls captured by one fresh session (its teardown not timed)."""
    start = time.thread_time()
    with trace() as session:
        for _ in range(calls):
            model(x)
    elapsed = time.thread_time() - start
    assert len(session.calls) == calls
    del session
    return elapsed / calls


def measure(model, x, *, calls: int, repeats: int, grad: bool) -> dict:
    """Alternating plain/traced blocks: medians of each, medians of the paired (adjacent) differences and ratios,
    and the best block of each. Pairing cancels load that drifts slower than a block."""
    plain, traced = [], []
    with torch.set_grad_enabled(grad):
        plain_block(model, x, calls)  # warm-up: allocator, kernels, the hook's first install
        traced_block(model, x, calls)
        for repeat in range(repeats):
            if repeat % 2:
                traced.append(traced_block(model, x, calls))
                plain.append(plain_block(model, x, calls))
            else:
                plain.append(plain_block(model, x, calls))
                traced.append(traced_block(model, x, calls))
    return {
        "plain": statistics.median(plain),
        "traced": statistics.median(traced),
        "added": statistics.median(t - p for p, t in zip(plain, traced, strict=True)),
        "ratio": statistics.median(t / p for p, t in zip(plain, traced, strict=True)),
        "plain_best": min(plain),
        "traced_best": min(traced),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1000, help="blocks per mode (linear)")
    parser.add_argument("--calls", type=int, default=100, help="calls per traced session (linear)")
    parser.add_argument("--transformer-repeats", type=int, default=30, help="blocks per mode (transformer)")
    parser.add_argument("--transformer-calls", type=int, default=2, help="calls per traced session (transformer)")
    args = parser.parse_args()

    torch.manual_seed(0)
    linear, linear_x = nn.Linear(16, 16), torch.randn(4, 16)
    layer = nn.TransformerEncoderLayer(d_model=256, nhead=4, batch_first=True)
    encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    encoder_x = torch.randn(8, 64, 256)  # (batch, seq, d_model)

    rows = []
    for grad in (True, False):
        mode = "grad" if grad else "no_grad"
        stats = measure(linear, linear_x, calls=args.calls, repeats=args.repeats, grad=grad)
        rows.append(("(a) linear 16x16, (4, 16)", mode, stats))
        stats = measure(
            encoder, encoder_x, calls=args.transformer_calls, repeats=args.transformer_repeats, grad=grad
        )
        rows.append(("(b) transformer 2x256, (8, 64, 256)", mode, stats))

    print(f"torch {torch.__version__}, 1 thread, thread CPU time; medians of paired blocks (best blocks in brackets)")
    header = f"{'workload':<37}{'mode':<9}{'plain us/call':>20}{'traced us/call':>20}{'added us':>18}{'ratio':>16}"
    print(header)
    print("-" * len(header))
    for name, mode, s in rows:
        added_best = (s["traced_best"] - s["plain_best"]) * 1e6
        ratio_best = s["traced_best"] / s["plain_best"]
        print(
            f"{name:<37}{mode:<9}"
            f"{s['plain'] * 1e6:>10.1f} [{s['plain_best'] * 1e6:>7.1f}]"
            f"{s['traced'] * 1e6:>10.1f} [{s['traced_best'] * 1e6:>7.1f}]"
            f"{s['added'] * 1e6:>9.1f} [{added_best:>6.1f}]"
            f"{s['ratio']:>7.3f} [{ratio_best:>6.3f}]"
        )
    a_rows = [s for name, _, s in rows if name.startswith("(a)")]
    b_rows = [s for name, _, s in rows if name.startswith("(b)")]
    added = max(s["added"] * 1e6 for s in a_rows)
    added_best = max((s["traced_best"] - s["plain_best"]) * 1e6 for s in a_rows)
    ratio = max(s["ratio"] for s in b_rows)
    ratio_best = max(s["traced_best"] / s["plain_best"] for s in b_rows)
    print(
        f"goal (a) added cost <= 25 us per call: worst median {added:.1f} us ({_verdict(added <= 25)}), "
        f"worst best-block {added_best:.1f} us ({_verdict(added_best <= 25)})"
    )
    print(
        f"goal (b) traced/plain <= 1.05: worst median {ratio:.3f} ({_verdict(ratio <= 1.05)}), "
        f"worst best-block {ratio_best:.3f} ({_verdict(ratio_best <= 1.05)})"
    )
    print("CPU time of the benchmark thread; cache sharing with other processes can still inflate medians")


def _verdict(met: bool) -> str:
    return "met" if met else "MISSED"

if __name__ == "__main__":
    main()
