"""What a model version's download costs: its zip made while it is sent, against reading its two files.

The training page's Download and `GET /api/versions/<id>/download` send `tool.json` and `model.safetensors` as one
zip made chunk by chunk (`annotate.versions.archive`: stored, 1 MiB at a time, nothing written to disk). The
baseline, measured in the same run, reads the same two files in the same chunks, which any download of them pays.
Rounds alternate; the script prints each way's median throughput, the ratio, and the largest Python allocation
peak while the zip is made (tracemalloc), which should stay near one chunk whatever the weights' size.

Run: ``python bench/version_download.py [--mib N] [--rounds N]``. Needs no database.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")

import django  # noqa: E402

django.setup()

from annotate import versions  # noqa: E402


def read_files(directory: Path) -> int:
    total = 0
    for name in (versions.MANIFEST, versions.WEIGHTS):
        with (directory / name).open("rb") as source:
            while chunk := source.read(versions.CHUNK):
                total += len(chunk)
    return total


def zipped(directory: Path) -> int:
    version = SimpleNamespace(path=directory, trained=True)
    return sum(len(chunk) for chunk in versions.archive(version))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="size of model.safetensors (default 256)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        directory = Path(folder)
        (directory / versions.MANIFEST).write_text('{"tool": "decision", "mode": "rank"}')
        with (directory / versions.WEIGHTS).open("wb") as weights:
            for _ in range(args.mib):
                weights.write(os.urandom(2**20))
        size = read_files(directory)  # warm the page cache for both ways
        times = {"read": [], "zip": []}
        for _ in range(args.rounds):
            for way, run in (("read", read_files), ("zip", zipped)):
                start = time.perf_counter()
                sent = run(directory)
                times[way].append(time.perf_counter() - start)
                assert sent >= size
        tracemalloc.start()
        zipped(directory)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    read, made = statistics.median(times["read"]), statistics.median(times["zip"])
    print(f"model.safetensors {args.mib} MiB, {args.rounds} rounds each, medians")
    print(f"  baseline, reading the two files: {size / 2**20 / read:,.0f} MiB/s")
    print(f"  the zip, made as it is sent:    {size / 2**20 / made:,.0f} MiB/s "
          f"({made / read:.2f}x the baseline's time)")
    print(f"  peak Python allocations while zipping: {peak / 2**20:.1f} MiB (a chunk is {versions.CHUNK // 2**20} MiB)")


if __name__ == "__main__":
    main()
