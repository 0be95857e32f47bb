"""Per-tool figures: forward latency (one input, a batch of 32), training examples per second, experience size.

    python bench/tools.py [--device cuda] [--repeats 5]

Each tool's inputs come from ``bench/tools_<tool>.py`` (``cases(device)``). Latencies are medians of interleaved
repeats; the batch figure is one batched forward of the tool's training operation, as training runs it. The
experience size is that of one captured single-example experience; for Scene it is also shown against the raw
float32 pixel bytes (goal <= 1.5x).
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from tensorcode import training  # noqa: E402

TOOLS = ["investigator", "decision", "planner", "scene", "chatbot"]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(fn, device: str, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name, tool, single, batch_inputs, batch_targets, device: str, repeats: int) -> dict:
    tool.eval()
    plan = tool.prepare_capture(batch_inputs, batch_targets)
    operation = tool.training_operations()[plan.operation]
    with torch.no_grad():
        one = _timed(lambda: tool(single), device, repeats)
        batch = _timed(lambda: operation(plan.inputs), device, repeats)
    trainer = training.Trainer.from_tool(tool, optimizer=lambda params: torch.optim.Adam(params, lr=1e-3))
    experience = trainer.capture(batch_inputs, batch_targets, source="bench")
    steps = 5
    train = _timed(lambda: trainer.fit([experience], epochs=steps), device, max(1, repeats // 2))
    single_experience = trainer.capture(_first(batch_inputs), batch_targets[:1], source="bench")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "experience.json")
        single_experience.save(path, operations=trainer.operations, release=True)
        size = os.path.getsize(path)
    row = {
        "tool": name,
        "forward_1_ms": one * 1e3,
        "forward_32_ms": batch * 1e3,
        "train_examples_per_s": plan.examples * steps / train,
        "experience_bytes": size,
    }
    pixels = single.get("pixels") if isinstance(single, dict) else None
    if pixels is None and isinstance(single, dict) and isinstance(single.get("inputs"), dict):
        pixels = single["inputs"].get("pixels")
    if isinstance(pixels, torch.Tensor):
        row["experience_vs_raw_pixels"] = size / (pixels.numel() * 4)
    return row


def _first(batch):
    """A one-example batch of the same form (a list, or an envelope around a list)."""
    if isinstance(batch, dict):
        return {**batch, "inputs": batch["inputs"][:1]}
    return batch[:1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tools", nargs="*", default=TOOLS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rows = []
    for tool_name in args.tools:
        module = importlib.import_module(f"tools_{tool_name}")
        for case in module.cases(torch.device(args.device)):
            rows.append(measure(*case, device=args.device, repeats=args.repeats))
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu, 1 thread"
    print(f"device: {args.device} ({where})")
    header = f"{'tool':<24}{'fwd 1 (ms)':>12}{'fwd 32 (ms)':>13}{'train ex/s':>12}{'experience':>12}  note"
    print(header)
    print("-" * len(header))
    for row in rows:
        note = ""
        if "experience_vs_raw_pixels" in row:
            note = f"{row['experience_vs_raw_pixels']:.2f}x raw pixels (goal <= 1.5x)"
        print(
            f"{row['tool']:<24}{row['forward_1_ms']:>12.2f}{row['forward_32_ms']:>13.2f}"
            f"{row['train_examples_per_s']:>12.0f}{row['experience_bytes']:>11d}B  {note}"
        )


if __name__ == "__main__":
    main()
