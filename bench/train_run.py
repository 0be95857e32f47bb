"""The resumable training run against a hand-written loop, and the CLI's start-up to its first step.

Both sides train the same small tool (Decision, dim 32) from the same initial weights on the same experience
files (``--files`` files of ``--batch`` reviews each), for ``--epochs`` epochs, one update per file, loading the
files themselves and writing a checkpoint every 100 steps with ``Trainer.save_checkpoint`` (the hand loop's
progress holds its epoch and position; the run's holds its cursor and loss history). Each side is also timed
without checkpoints, which gives the checkpoints' share of the run. Variants run in alternating rounds; each
figure is the median over rounds, in wall time, and ratios compare timings of this one invocation. Both sides
visit the files in order (no shuffling), so their final weights must agree bit for bit, which is checked.

Goal: run with checkpoints <= 1.1x the hand-written loop with checkpoints.

The CLI part starts ``python -m tensorcode train`` on the same files and measures the time until it reports
its first step, next to ``python -c "import torch"``: torch's import should be the only large cost.

It also times ``python -m tensorcode evaluate`` on those files, start to exit: loading a tool must not import
``torch._dynamo`` (seconds), which only training needs (torch's optimizers import it).

Run: ``python bench/train_run.py [--rounds N] [--epochs N] [--files N] [--batch N] [--cli-only]``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tensorcode import training  # noqa: E402
from tensorcode.tools.decision import Decision  # noqa: E402

torch.set_num_threads(1)
INTERVAL = 100
GOAL = 1.1
SERVICES = ["database", "cache", "queue", "gateway", "scheduler", "storage", "billing", "search"]


def write_experiences(directory: Path, files: int, batch: int) -> list[Path]:
    rng = random.Random(0)
    trainer = training.Trainer.from_tool(Decision())
    paths = []
    for i in range(files):
        inputs, targets = [], []
        for _ in range(batch):
            services = rng.sample(SERVICES, 3)
            asked = rng.randrange(3)
            inputs.append({
                "question": f"what did event {asked} hit?",
                "evidence": [
                    {"source_id": f"log-{j}", "text": f"event {j} hit the {s}"} for j, s in enumerate(services)
                ],
                "hypotheses": [{"id": f"h{j}", "text": f"the {s}"} for j, s in enumerate(services)],
            })
            targets.append(f"h{asked}")
        paths.append(directory / f"experience-{i:04d}.json")
        trainer.capture(inputs, targets, source=f"bench:{i}").save(paths[-1], operations=trainer.operations,
                                                                    release=True)
    return paths


def hand_loop(paths: list[Path], epochs: int, checkpoint: Path | None) -> tuple[float, dict]:
    tool = Decision()
    started = time.perf_counter()
    trainer = training.Trainer.from_tool(tool, optimizer=lambda ps: torch.optim.Adam(ps, lr=0.001))
    sessions = [training.load_experience(p, operations=trainer.operations) for p in paths]
    losses, step = [], 0
    for epoch in range(epochs):
        for position, session in enumerate(sessions):
            losses.append(trainer.step(session))
            step += 1
            if checkpoint is not None and step % INTERVAL == 0:
                trainer.save_checkpoint(checkpoint, progress={"epoch": epoch, "position": position + 1})
    elapsed = time.perf_counter() - started
    return elapsed, tool.state_dict()


def library_run(paths: list[Path], epochs: int, checkpoint: Path | None) -> tuple[float, dict]:
    tool = Decision()
    started = time.perf_counter()
    training.run(tool, paths, epochs=epochs, checkpoint_dir=checkpoint, interval=INTERVAL, shuffle=False,
                 optimizer="adam", lr=0.001, device="cpu")
    elapsed = time.perf_counter() - started
    return elapsed, tool.state_dict()


def cli_start_up(tool_dir: Path, paths: list[Path], work: Path, rounds: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    first_step, evaluate, torch_import, python = [], [], [], []
    for r in range(rounds):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "tensorcode", "evaluate", str(tool_dir), *map(str, paths[:20])],
            env=env, stdout=subprocess.DEVNULL, cwd=work, check=True,
        )
        evaluate.append(time.perf_counter() - started)
        started = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", "tensorcode", "train", str(tool_dir), *map(str, paths[:20]), "-o",
             str(work / f"cli-{r}"), "--device", "cpu"],
            env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=work,
        )
        for line in process.stderr:
            if line.startswith("step 1/"):
                first_step.append(time.perf_counter() - started)
                break
        process.communicate()
        for command, into in (("import torch", torch_import), ("pass", python)):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", command], env=env, check=True)
            into.append(time.perf_counter() - started)
    return {
        "first_step": statistics.median(first_step),
        "evaluate": statistics.median(evaluate),
        "torch_import": statistics.median(torch_import),
        "python": statistics.median(python),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--files", type=int, default=150)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--cli-only", action="store_true", help="only the CLI start-up figures")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        paths = write_experiences(work, args.files, args.batch)
        Decision().save_pretrained(work / "tool")
        if args.cli_only:
            print_cli(cli_start_up(work / "tool", paths, work, args.rounds))
            return
        steps = args.files * args.epochs
        print(f"Decision (dim 32), {args.files} experience files x {args.batch} reviews, {args.epochs} epochs = "
              f"{steps} steps, Adam, checkpoint every {INTERVAL} steps; median of {args.rounds} rounds")
        variants = {
            "hand loop, no checkpoints": (hand_loop, False),
            "hand loop, checkpoints": (hand_loop, True),
            "training.run, no checkpoints": (library_run, False),
            "training.run, checkpoints": (library_run, True),
        }
        times = {name: [] for name in variants}
        weights = {}
        for r in range(args.rounds):
            for name, (fn, checkpoints) in variants.items():
                directory = work / f"ck-{r}-{len(times[name])}-{fn.__name__}" if checkpoints else None
                elapsed, state = fn(paths, args.epochs, directory)
                times[name].append(elapsed)
                weights[name] = state
        reference = weights["hand loop, no checkpoints"]
        for name, state in weights.items():
            assert all(torch.equal(state[k], reference[k]) for k in reference), f"{name}: weights differ"
        median = {name: statistics.median(t) for name, t in times.items()}
        for name, value in median.items():
            print(f"  {name:30s} {value:7.3f} s  ({1000 * value / steps:.2f} ms/step)")
        ratio = median["training.run, checkpoints"] / median["hand loop, checkpoints"]
        bare = median["training.run, no checkpoints"] / median["hand loop, no checkpoints"]
        share = 1 - median["training.run, no checkpoints"] / median["training.run, checkpoints"]
        hand_share = 1 - median["hand loop, no checkpoints"] / median["hand loop, checkpoints"]
        print(f"  ratio with checkpoints: {ratio:.3f}x (goal <= {GOAL}x); without: {bare:.3f}x")
        print(f"  checkpoints' share of the run: {100 * share:.1f}% (hand loop: {100 * hand_share:.1f}%)")
        print("  final weights: identical on all four variants")
        print_cli(cli_start_up(work / "tool", paths, work, args.rounds))
        print("PASS" if ratio <= GOAL else f"FAIL: ratio {ratio:.3f} > {GOAL}")


def print_cli(cli: dict) -> None:
    print(f"CLI train start-up to its first step: {cli['first_step']:.2f} s; `import torch` alone "
          f"{cli['torch_import']:.2f} s; bare Python {cli['python']:.2f} s; the rest (tensorcode, loading "
          f"the tool and 20 files, first step) {cli['first_step'] - cli['torch_import']:.2f} s")
    print(f"CLI evaluate on the same 20 files, start to exit: {cli['evaluate']:.2f} s "
          f"({cli['evaluate'] - cli['torch_import']:.2f} s more than `import torch`)")


if __name__ == "__main__":
    main()
