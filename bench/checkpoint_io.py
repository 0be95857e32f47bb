"""Checkpoint I/O: ``Trainer.save_checkpoint`` / ``load_checkpoint`` of a ~100 MB model with Adam state.

Baselines, on the same tensors (model, both Adam slots and step counters, RNG) in the same run:
- save: ``safetensors.torch.save_file`` plus a SHA-256 of the written bytes (read back);
- load (copying): read the file, SHA-256 the bytes, ``safetensors.torch.load`` them (which copies every tensor
  out);
- load (streaming): map the file, SHA-256 it in a stream over the map, and ``safetensors.torch.load_file`` it,
  which maps the file again and returns views of the map without reading them (safetensors 0.4+), so one byte
  of every page is then read to make the tensors resident: the least any checksummed load can do.
The checkpoint instead reads the file into memory of its own (a map would turn a file truncated mid-load into
a crash), hashing each chunk on a second thread while the next is read, validates everything and hands the
loaded tensors to the live parameters and optimizer. Goals: save and copying load <= 1.3x, load <= 1.3x the
streaming baseline.

Run: ``python bench/checkpoint_io.py [--repeats N] [--megabytes MB]``. Ratios compare timings of one run only.
"""

from __future__ import annotations

import argparse
import hashlib
import mmap
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load, load_file, save_file
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tensorcode import training  # noqa: E402

torch.set_num_threads(1)


def build(megabytes: int):
    """Square float32 linear layers totalling about ``megabytes`` of parameters, after one Adam step."""
    width, layers = 2048, max(1, round(megabytes * 2**20 / 4 / (2048 * 2049)))
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])
    trainer = training.Trainer.from_ops({"model": model}, optimizer=lambda ps: torch.optim.Adam(ps, lr=1e-3))
    for p in trainer.parameters:
        p.grad = torch.randn_like(p)
    trainer.optimizer.step()
    trainer.optimizer.zero_grad(set_to_none=True)
    trainer.steps = 1
    return trainer


def same_tensors(trainer) -> dict:
    """What the checkpoint stores, as a flat safetensors dict."""
    tensors = {f"model/model/{k}": v.detach() for k, v in trainer.operations["model"].state_dict().items()}
    for i, p in enumerate(trainer.parameters):
        for slot, value in trainer.optimizer.state[p].items():
            tensors[f"optimizer/{i}/{slot}"] = value
    tensors["rng/python"] = torch.tensor(random.getstate()[1], dtype=torch.int64)
    tensors["rng/torch"] = torch.get_rng_state()
    return tensors


def baseline_save(tensors: dict, path: Path) -> str:
    save_file(tensors, path)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def baseline_load(path: Path) -> dict:
    data = path.read_bytes()
    hashlib.sha256(data).hexdigest()
    return load(data)


def streaming_load(path: Path) -> dict:
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        digest = hashlib.sha256()
        view = memoryview(mapped)
        for start in range(0, len(view), 4 * 2**20):
            digest.update(view[start:start + 4 * 2**20])
        view.release()
        digest.hexdigest()
    tensors = load_file(path)
    for tensor in tensors.values():  # views of a map: touch every page, as a real load would
        if tensor.numel():
            tensor.reshape(-1).view(torch.uint8)[::4096].sum()
    return tensors


def timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--megabytes", type=int, default=100)
    args = parser.parse_args()

    trainer = build(args.megabytes)
    tensors = same_tensors(trainer)
    model_mb = sum(p.numel() * p.element_size() for p in trainer.parameters) / 2**20
    total_mb = sum(t.numel() * t.element_size() for t in tensors.values()) / 2**20
    root = Path(tempfile.mkdtemp(prefix="checkpoint-io-", dir=os.environ.get("BENCH_DIR")))
    times = {
        "baseline save": [], "checkpoint save": [], "baseline load": [], "streaming load": [], "checkpoint load": []
    }
    try:
        for repeat in range(args.repeats):
            directory = root / f"run-{repeat}"
            baseline = root / f"baseline-{repeat}.safetensors"
            # Interleaved, so drift in disk or CPU load hits both sides of each ratio alike.
            times["baseline save"].append(timed(baseline_save, tensors, baseline))
            times["checkpoint save"].append(timed(trainer.save_checkpoint, directory, {"repeat": repeat}))
            times["baseline load"].append(timed(baseline_load, baseline))
            times["streaming load"].append(timed(streaming_load, baseline))
            times["checkpoint load"].append(timed(trainer.load_checkpoint, directory))
            baseline.unlink()
            shutil.rmtree(directory)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    best = {name: min(values) for name, values in times.items()}
    print(f"model {model_mb:.0f} MiB of parameters; {total_mb:.0f} MiB of tensors with Adam state and RNG")
    print(f"best of {args.repeats} repeats (seconds):")
    for name, value in best.items():
        print(f"  {name:16s} {value:8.3f}")
    save_ratio = best["checkpoint save"] / best["baseline save"]
    load_ratio = best["checkpoint load"] / best["baseline load"]
    streaming_ratio = best["checkpoint load"] / best["streaming load"]
    print(f"save ratio {save_ratio:.2f}x, load ratio {load_ratio:.2f}x against the copying baseline (goal <= 1.3x)")
    verdict = "ok" if streaming_ratio <= 1.3 else "MISSED"
    print(f"load ratio {streaming_ratio:.2f}x against the streaming baseline (goal <= 1.3x: {verdict})")


if __name__ == "__main__":
    main()
