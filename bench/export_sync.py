"""What an export pays to make its experience files durable: an fsync per part against one sync at the end.

An export of 100,000 answers captures 3,125 minibatches of 32 and saves each as an experience file. Saved the
default way (`session.save`, an fsync before each file is published) every part waits for the disk; the site's
export saves them with `durable=False` and makes them durable together with one `syncfs`
(`annotate.storage.make_durable`). This captures the same minibatches of decision/rank incidents (the team_scale
bench's data) both ways, in alternating rounds, and prints the time per part of each, the end's sync included,
and the ratio. The baseline is the fsync per part, measured in the same run.

Run: ``python bench/export_sync.py [--parts N] [--rounds N]``. Needs no database.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tools_decision  # noqa: E402

from tensorcode import tools, training  # noqa: E402

torch.set_num_threads(1)
MINIBATCH = 32


def _syncfs(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).syncfs(fd) != 0:
            raise OSError(ctypes.get_errno(), "syncfs failed")
    finally:
        os.close(fd)


def run(trainer, batches: list, directory: Path, *, per_part: bool) -> float:
    """Capture and save every minibatch into a fresh `directory`; ms per part, the closing sync included."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir()
    started = time.perf_counter()
    for n, (inputs, targets) in enumerate(batches):
        session = trainer.capture({"mode": "rank", "inputs": inputs}, targets,
                                  source=[f"bench:{n}/{i}" for i in range(len(inputs))])
        session.save(str(directory / f"part-{n:05d}.json"), operations=trainer.operations, release=True,
                     durable=per_part)
    if not per_part:
        _syncfs(directory)
    return (time.perf_counter() - started) * 1000 / len(batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", type=int, default=60, help="minibatches of 32 per round (default 60)")
    parser.add_argument("--rounds", type=int, default=8, help="rounds of each way, alternating (default 8)")
    args = parser.parse_args()
    rng = random.Random(1)
    examples = [tools_decision._incident(rng) for _ in range(args.parts * MINIBATCH)]
    batches = [([x for x, _ in examples[i:i + MINIBATCH]], [y for _, y in examples[i:i + MINIBATCH]])
               for i in range(0, len(examples), MINIBATCH)]
    trainer = training.Trainer.from_tool(tools.create("decision", mode="rank"))
    work = Path(tempfile.mkdtemp(prefix="export-sync-"))
    try:
        run(trainer, batches[:5], work / "warm", per_part=True)
        fsynced, synced_once = [], []
        for _ in range(args.rounds):
            fsynced.append(run(trainer, batches, work / "a", per_part=True))
            synced_once.append(run(trainer, batches, work / "b", per_part=False))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = sorted(a / b for a, b in zip(fsynced, synced_once, strict=True))
    print(f"export_sync: {args.parts} parts of {MINIBATCH} a round, {args.rounds} rounds each way, alternating")
    print(f"  fsync per part (baseline)       {statistics.median(fsynced):6.1f} ms a part (median)")
    print(f"  one syncfs at the end           {statistics.median(synced_once):6.1f} ms a part (median)")
    print(f"  speed-up, per round             {statistics.median(ratios):.2f}x median "
          f"({ratios[0]:.2f}-{ratios[-1]:.2f}x)")


if __name__ == "__main__":
    main()
