"""How much memory does importing the largest file take? A JSONL file of the smallest items, up to the limit.

    python bench/import_memory.py [--mib 64] [--database postgres://postgres@127.0.0.1:5432/tc_import_bench]

Needs PostgreSQL: the database named by `--database` (its name must end in "bench") is dropped, created afresh
and migrated. The file holds Investigator verification items (a premise and a hypothesis, about 100 bytes a
line) up to `--mib` MiB (default 64, the import limit). Both runs are child processes whose own peak RSS is
read from `/proc/self/status` when they end:

- the baseline: `manage.py check`, the same Django process with every app loaded and nothing imported;
- `manage.py import_items --no-predict` of the file: wall time and peak RSS, and the peak over the baseline's.

An import holds one batch of checked items at a time, so its peak should stay within a few tens of MB of the
baseline whatever the file's size; keeping every checked line until the end cost 399 MiB for 64 MiB (97 MiB now;
measured before the bench reported MB).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from team_scale import _recreate_database, _timed_child  # noqa: E402  (bench/ is not a package)

SLUG = "bench-import-memory"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=64.0, help="size of the file in MiB (default 64, the limit)")
    parser.add_argument("--database", default=os.environ.get(
        "TC_BENCH_DATABASE", "postgres://postgres@127.0.0.1:5432/tc_import_bench"))
    args = parser.parse_args()
    if not urlsplit(args.database).path.rstrip("/").endswith("bench"):
        raise SystemExit(f"--database {args.database}: its name must end in 'bench' (it is dropped and recreated)")

    with tempfile.TemporaryDirectory(prefix="import-memory-") as folder:
        env = {"TC_DATABASE": args.database, "TC_DATA_DIR": folder, "DEBUG": "0", "OMP_NUM_THREADS": "1",
               "CELERY_BROKER_URL": "memory://", "DJANGO_SETTINGS_MODULE": "annotate.settings"}
        os.environ.update(env)
        _recreate_database(args.database)
        manage = [sys.executable, "manage.py"]
        _timed_child([*manage, "migrate", "--verbosity", "0"], env)
        create = ("from annotate.models import Project; Project.objects.create(name='Import memory', "
                  f"slug='{SLUG}', tool='investigator', mode='verification')")
        _timed_child([*manage, "shell", "-c", create], env)
        path, lines = _write_file(Path(folder) / "items.jsonl", int(args.mib * 1024 * 1024))
        size = path.stat().st_size

        _, baseline_mb, _, _ = _timed_child([*manage, "check"], env)
        seconds, peak_mb, output, _ = _timed_child(
            [*manage, "import_items", SLUG, str(path), "--no-predict", "--max-bytes", str(size)], env)

    print(output.splitlines()[0])
    print(f"file: {lines:,} items, {size / 2**20:.1f} MiB")
    print(f"baseline (manage.py check) peak RSS: {baseline_mb:.0f} MB")
    print(f"import_items: {seconds:.1f} s, peak RSS {peak_mb:.0f} MB, "
          f"{peak_mb - baseline_mb:.0f} MB over the baseline ({peak_mb / baseline_mb:.2f}x)")


def _write_file(path: Path, limit: int) -> tuple[Path, int]:
    """Lines of the smallest items, as many as fit in `limit` bytes."""
    size = count = 0
    with path.open("w", encoding="utf-8") as handle:
        while True:
            line = json.dumps({"inputs": {"premise": f"the disk {count} is full of logs",
                                          "hypothesis": "the service stopped writing"}}) + "\n"
            if size + len(line) > limit:
                return path, count
            handle.write(line)
            size += len(line)
            count += 1


if __name__ == "__main__":
    main()
