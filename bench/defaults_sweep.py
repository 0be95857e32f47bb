"""Which optimizer, learning rate and epochs should the launch form offer per tool kind?

    python bench/defaults_sweep.py [--tools decision,investigator,scene] [--items 320] [--held-out 96]

For each tool kind: generated reviewed items (the generators of ``bench/tools_<tool>.py``), captured into
experience files of 32 examples as a job's snapshot is, trained with ``training.run`` from a fresh default tool
(seed 0) for each optimizer/learning-rate pair, and scored with ``training.evaluate`` on held-out items after
each listed epoch count. Prints one table per tool; `trainingjobs/defaults.py` takes its defaults from them.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from tensorcode import tools, training  # noqa: E402

GRID = [("sgd", 0.001), ("adam", 0.001), ("adam", 0.01), ("adam", 0.03)]
EPOCHS = (5, 10, 20, 30)
MINIBATCH = 32


def decision_data(count: int):
    import tools_decision

    rng = random.Random(1)
    pairs = [tools_decision._incident(rng) for _ in range(count)]
    return "decision", "rank", [x for x, _ in pairs], [y for _, y in pairs]


def investigator_data(count: int):
    import tools_investigator

    rng = random.Random(1)
    inputs, targets = [], []
    for _ in range(count):
        incident = tools_investigator._incident(rng)
        order = list(range(3))
        rng.shuffle(order)  # the right hypothesis is not always first
        incident["hypotheses"] = [incident["hypotheses"][i] for i in order]
        inputs.append(incident)
        targets.append(incident["hypotheses"][order.index(0)]["id"])
    return "investigator", "rank", inputs, targets


def scene_data(count: int):
    import tools_scene

    examples = tools_scene._examples(count)
    random.Random(1).shuffle(examples)
    return "scene", "rank", [x for x, _, _ in examples], [y for _, y, _ in examples]


DATA = {"decision": decision_data, "investigator": investigator_data, "scene": scene_data}


def sweep(name: str, items: int, held_out: int, workdir: Path) -> list[dict]:
    tool_name, mode, inputs, targets = DATA[name](items + held_out)
    capture = training.Trainer.from_tool(tools.create(tool_name, mode=mode))
    paths = {"train": [], "held_out": []}
    for part, start, stop in (("train", 0, items), ("held_out", items, items + held_out)):
        for index in range(start, stop, MINIBATCH):
            batch = slice(index, min(stop, index + MINIBATCH))
            session = capture.capture({"mode": mode, "inputs": inputs[batch]}, targets[batch],
                                      source=[f"bench:{i}" for i in range(batch.start, batch.stop)])
            path = workdir / f"{name}-{part}-{index}.json"
            session.save(str(path), operations=capture.operations, release=True)
            paths[part].append(str(path))
    rows = []
    for optimizer, lr in GRID:
        tool = tools.create(tool_name, mode=mode)
        base = training.evaluate(tool, paths["held_out"])
        scores: dict[int, float] = {}

        def score(report, tool=tool, scores=scores):
            if report.position == report.experiences and report.epoch in EPOCHS:
                scores[report.epoch] = training.evaluate(tool, paths["held_out"])["value"]

        started = time.perf_counter()
        training.run(tool, paths["train"], epochs=max(EPOCHS), seed=0, optimizer=optimizer, lr=lr, device="cpu",
                     callback=score)
        rows.append({"optimizer": optimizer, "lr": lr, "metric": base["metric"], "base": base["value"],
                     "scores": scores, "seconds": time.perf_counter() - started})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", default="decision,investigator,scene")
    parser.add_argument("--items", type=int, default=320, help="reviewed items trained on")
    parser.add_argument("--held-out", type=int, default=96, help="reviewed items held out")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.tools.split(","):
            rows = sweep(name, args.items, args.held_out, Path(workdir))
            print(f"\n{name}: {args.items} items, {args.held_out} held out, minibatches of {MINIBATCH}; "
                  f"held-out {rows[0]['metric']} (untrained {rows[0]['base']:.2f})")
            print("| optimizer | lr | " + " | ".join(f"{e} epochs" for e in EPOCHS) + " | seconds |")
            print("|---|---|" + "---|" * len(EPOCHS) + "---|")
            for row in rows:
                cells = " | ".join(f"{row['scores'].get(e, float('nan')):.2f}" for e in EPOCHS)
                print(f"| {row['optimizer']} | {row['lr']} | {cells} | {row['seconds']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
