"""Training overhead: ``Trainer.fit`` over captured experiences vs a hand-written PyTorch loop.

Both sides train the same text classifier (an encoder over hashed token ids + an MLP head, two operations) from
the same initial weights on the same data, one SGD update per experience: zero the gradients, forward,
cross-entropy, backward, step, and read the loss back as a float (``fit`` returns it). The trainer's side replays
experience files loaded with ``training.load_experience``, one file per minibatch, as the training jobs do; it
also checks that the loss and every gradient are finite before updating, which the hand loop does not.

Two cases: minibatches of 32 examples (goal: ratio <= 1.10) and one-example experiences (goal: ratio <= 1.2).
Two encoders: ``bag`` (EmbeddingBag mean; little compute per update, so per-step costs show most) and ``gru``
(embedding + one-layer GRU). Both sides run in short alternating rounds; the ratio is the median over paired
rounds, in thread CPU time (which leaves out time spent descheduled on a shared machine) and in wall time.
Since both sides do identical arithmetic, their final weights must agree, which the script checks.

Run: ``python bench/train_overhead.py [--model bag|gru|both] [--repeats N]``. Ratios compare timings of one run.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tensorcode  # noqa: E402
from tensorcode import training  # noqa: E402

torch.set_num_threads(1)
BUCKETS, DIM, HIDDEN, CLASSES, TOKENS, BATCH = 4096, 64, 128, 8, 24, 32
GOALS = {"batch of 32": 1.10, "one example": 1.2}


class BagEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.EmbeddingBag(BUCKETS, DIM, mode="mean", padding_idx=0)

    def forward(self, ids):  # (batch, tokens) -> (batch, dim)
        return self.embed(ids)


class GRUEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(BUCKETS, DIM, padding_idx=0)
        self.gru = nn.GRU(DIM, DIM, batch_first=True)

    def forward(self, ids):  # (batch, tokens) -> (batch, dim): the last hidden state
        return self.gru(self.embed(ids))[1][0]


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(DIM, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))

    def forward(self, h):  # (batch, dim) -> (batch, classes)
        return self.mlp(h)


ENCODERS = {"bag": BagEncoder, "gru": GRUEncoder}


def data(count: int, size: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``count`` minibatches of ``size`` texts: hashed token ids (some padded with 0) and labels."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        ids = torch.randint(1, BUCKETS, (size, TOKENS), generator=generator)
        ids[:, TOKENS * 3 // 4 :] *= torch.randint(0, 2, (size, 1), generator=generator)
        batches.append((ids, torch.randint(0, CLASSES, (size,), generator=generator)))
    return batches


def experiences(operations: dict, batches, directory: Path) -> list:
    """Capture, save and reload one experience per minibatch."""
    loaded = []
    for index, (ids, labels) in enumerate(batches):
        with torch.no_grad(), tensorcode.trace() as session:
            logits = operations["head"](operations["encoder"](ids))
        session.supervise(logits, labels, source=f"bench:{index}")
        path = directory / f"batch-{index}.json"
        session.save(path, operations=operations, release=True)
        loaded.append(training.load_experience(path, operations=operations))
    return loaded


def hand_loop(encoder, head, optimizer, batches) -> list[float]:
    losses = []
    for ids, labels in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(head(encoder(ids)), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def measure(model: str, name: str, count: int, size: int, repeats: int, chunk: int, directory: Path) -> None:
    torch.manual_seed(0)
    encoder, head = ENCODERS[model](), Head()
    operations = {"encoder": copy.deepcopy(encoder), "head": copy.deepcopy(head)}
    batches = data(count, size, seed=1)
    loaded = experiences(operations, batches, directory)
    trainer = training.Trainer.from_ops(operations, lr=0.05)
    optimizer = torch.optim.SGD([*encoder.parameters(), *head.parameters()], lr=0.05)

    hand_loop(encoder, head, optimizer, batches[:4])  # warm-up, applied to both sides alike
    trainer.fit(loaded[:4])
    # Short alternating rounds, so that load from other processes hits both sides alike.
    times = {(clock, side): [] for clock in ("cpu", "wall") for side in ("hand", "fit")}
    for repeat in range(repeats):
        for start in range(0, count, chunk):
            part, experience = batches[start : start + chunk], loaded[start : start + chunk]
            sides = [("hand", hand_loop, (encoder, head, optimizer, part)), ("fit", trainer.fit, (experience,))]
            for side, fn, args in sides if (repeat + start // chunk) % 2 else sides[::-1]:
                wall, cpu = time.perf_counter(), time.thread_time()
                fn(*args)
                times["cpu", side].append((time.thread_time() - cpu) / len(part))
                times["wall", side].append((time.perf_counter() - wall) / len(part))

    for p, q in zip([*encoder.parameters(), *head.parameters()], trainer.parameters, strict=True):
        if not torch.allclose(p, q, rtol=1e-4, atol=1e-6):
            raise SystemExit(f"{model}, {name}: the two loops diverged; they are not doing the same work")
    print(f"{model}, {name}: {count} experiences, {repeats} epochs in alternating rounds of {chunk} updates")
    for clock in ("cpu", "wall"):
        hand, fit = times[clock, "hand"], times[clock, "fit"]
        paired = statistics.median(f / h for f, h in zip(fit, hand, strict=True))
        print(
            f"  {clock:4s} time: hand loop {statistics.median(hand) * 1e6:6.0f} us/update, "
            f"Trainer.fit {statistics.median(fit) * 1e6:6.0f} us/update, ratio {paired:.3f} "
            f"(goal <= {GOALS[name]}: {'met' if paired <= GOALS[name] else 'MISSED'})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=[*ENCODERS, "both"], default="both")
    parser.add_argument("--repeats", type=int, default=10, help="epochs over the experiences, per side")
    parser.add_argument("--chunk", type=int, default=10, help="updates per timed round")
    parser.add_argument("--batches", type=int, default=40, help="minibatch experiences of 32 examples")
    parser.add_argument("--examples", type=int, default=200, help="one-example experiences")
    args = parser.parse_args()
    models = list(ENCODERS) if args.model == "both" else [args.model]
    with tempfile.TemporaryDirectory(prefix="train-overhead-") as directory:
        for model in models:
            params = sum(p.numel() for m in (ENCODERS[model](), Head()) for p in m.parameters())
            print(f"{model}: {ENCODERS[model].__name__} + MLP head {DIM}-{HIDDEN}-{CLASSES}, {params} parameters, SGD")
            measure(model, "batch of 32", args.batches, BATCH, args.repeats, args.chunk, Path(directory))
            measure(model, "one example", args.examples, 1, args.repeats, args.chunk, Path(directory))


if __name__ == "__main__":
    main()
