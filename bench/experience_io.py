"""Experience file I/O: ``session.save`` / ``training.load_experience`` of (a) a 1,000-call experience and (b)
one whose root is a 10M-element float32 tensor.

For (b) the figures are tensor payload throughput, raw tensor bytes over wall time, for save and load separately
(the load is timed until the loaded tensor has been read once), and the file size over the raw bytes. Goal: both
>= 400 MB/s (MB = 10**6 bytes) and <= 1.4x. For context, the same run also times the primitives any base64 JSON
format pays for at least once: base64 of the raw bytes each way, and writing/reading the file's bytes.

Run: ``python bench/experience_io.py [--repeats N] [--elements N] [--calls N]``. Figures are the best of the
repeats of this run only; on a shared machine rerun before reading much into them.
"""

from __future__ import annotations

import argparse
import binascii
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tensorcode  # noqa: E402
from tensorcode import training  # noqa: E402

torch.set_num_threads(1)


@tensorcode.operation(configuration={"op": "total"})
def total(x):
    return x.sum()


def chain(calls: int):
    """A supervised chain of ``calls`` alternating module and declared-operation calls on a (4, 16) batch."""
    torch.manual_seed(0)
    layer = nn.Linear(16, 16)
    squash = tensorcode.operation(torch.tanh, configuration={"op": "tanh"})
    with tensorcode.trace() as session:
        x = torch.randn(4, 16)
        for i in range(calls):
            x = layer(x) if i % 2 == 0 else squash(x)
    session.supervise(x, torch.zeros(4, 16), loss="mse", source="bench")
    return session, {"layer": layer, "squash": squash}


def big_root(elements: int):
    """One call whose only root is a ``elements``-long float32 tensor."""
    torch.manual_seed(0)
    with tensorcode.trace() as session:
        total(torch.randn(elements))
    return session, {"total": total}


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def write_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--elements", type=int, default=10_000_000)
    parser.add_argument("--calls", type=int, default=1_000)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="experience-io-", dir=os.environ.get("BENCH_DIR")))
    times: dict[str, list[float]] = {
        name: []
        for name in (
            "chain save", "chain load", "tensor save", "tensor load",
            "b64 encode", "b64 decode", "file write", "file read",
        )
    }
    try:
        chain_session, chain_ops = chain(args.calls)
        big_session, big_ops = big_root(args.elements)
        raw = big_session._roots[0].numpy().tobytes()
        chain_path, big_path, plain_path = root / "chain.json", root / "tensor.json", root / "plain.bin"
        for _ in range(args.repeats):
            seconds, _ = timed(lambda: chain_session.save(chain_path, operations=chain_ops))
            times["chain save"].append(seconds)
            seconds, loaded = timed(lambda: training.load_experience(chain_path, operations=chain_ops))
            times["chain load"].append(seconds)
            assert len(loaded.calls) == args.calls

            seconds, _ = timed(lambda: big_session.save(big_path, operations=big_ops))
            times["tensor save"].append(seconds)

            def load_and_touch():
                session = training.load_experience(big_path, operations=big_ops)
                return float(session._roots[0].sum())  # the loaded data is really there

            seconds, _ = timed(load_and_touch)
            times["tensor load"].append(seconds)

            seconds, encoded = timed(lambda: binascii.b2a_base64(raw, newline=False))
            times["b64 encode"].append(seconds)
            seconds, _ = timed(lambda data=encoded: binascii.a2b_base64(data, strict_mode=True))
            times["b64 decode"].append(seconds)
            seconds, _ = timed(lambda data=encoded: write_bytes(plain_path, data))
            times["file write"].append(seconds)
            seconds, _ = timed(plain_path.read_bytes)
            times["file read"].append(seconds)
        chain_size, big_size = chain_path.stat().st_size, big_path.stat().st_size
    finally:
        shutil.rmtree(root, ignore_errors=True)

    best = {name: min(values) for name, values in times.items()}
    mb = len(raw) / 1e6
    print(f"best of {args.repeats} repeats")
    print(f"(a) {args.calls}-call experience, {chain_size / 1e3:.0f} kB file:")
    for name in ("chain save", "chain load"):
        print(f"  {name:11s} {best[name] * 1e3:8.1f} ms  ({best[name] / args.calls * 1e6:6.1f} us per call)")
    print(f"(b) {args.elements:,}-element float32 root, {mb:.0f} MB raw:")
    for name in ("tensor save", "tensor load"):
        rate = mb / best[name]
        verdict = "ok" if rate >= 400 else "MISSED"
        print(f"  {name:11s} {best[name] * 1e3:8.1f} ms  {rate:7.0f} MB/s  (goal >= 400 MB/s: {verdict})")
    ratio = big_size / len(raw)
    verdict = "ok" if ratio <= 1.4 else "MISSED"
    print(f"  file size {big_size / 1e6:.1f} MB = {ratio:.3f}x raw bytes (goal <= 1.4x: {verdict})")
    print("  primitives on the same bytes, for context:")
    for name in ("b64 encode", "b64 decode", "file write", "file read"):
        print(f"    {name:10s} {best[name] * 1e3:8.1f} ms  {mb / best[name]:7.0f} MB/s of raw tensor bytes")


if __name__ == "__main__":
    main()
