"""Loading experience files from strangers: time and peak memory of valid and hostile files of 1, 10 and 100 MB.

For each size the same run loads, each in a fresh process (so peak memory is that load's alone):
- ``valid``: one call whose root is a float32 tensor filling the file (the shape of any large experience);
- ``calls``: a valid file of many small calls, the costliest valid shape per byte (over the 32 MiB limit on
  JSON besides payloads at 100 MB, so refused there);
- ``containers``: a root list of millions of empty lists (~50x the file in Python objects if parsed);
- ``deep``: a root nested millions of lists deep;
- ``keys``: an object of millions of keys whose last one repeats an earlier one (quadratic to report before);
- ``shape``: a tensor whose shape overflows, with a full-size payload;
- ``base64``: a valid-looking tensor whose last base64 character is wrong (refused only after decoding).
Figures: load time, as a multiple of the tensor file's load time of the same size, with the goal for hostile
files: refused, within the time of the costlier valid file of the same size (``ok``/``MISSED``); and peak memory
above the process's resident size before the load (after one small warm-up load), as a multiple of the file
size (documented bounds: 2x for payloads, about 25x for the JSON besides them). ``read`` is the baseline of
reading the file's bytes once.

Run: ``python bench/untrusted_io.py [--sizes 1 10 100] [--repeats N]``. Figures are the best of the repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, {root!r})
import torch
torch.set_num_threads(1)
import tensorcode
from tensorcode import ExperienceError, training

@tensorcode.operation(configuration={{"op": "total"}})
def total(x):
    return x.sum()

path, mode, warm = sys.argv[1], sys.argv[2], sys.argv[3]
training.load_experience(warm, operations={{"total": total}})  # imports and first-use allocations
page = os.sysconf("SC_PAGE_SIZE")
with open("/proc/self/statm") as handle:
    before = int(handle.read().split()[1]) * page
start = time.perf_counter()
outcome = "loaded"
if mode == "read":
    with open(path, "rb") as handle:
        data = handle.read()
else:
    try:
        session = training.load_experience(path, operations={{"total": total}})
    except ExperienceError as exc:
        outcome = "refused: " + str(exc).split(": ", 1)[-1][:70]
seconds = time.perf_counter() - start
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across fork and exec.
with open("/proc/self/status") as handle:
    peak = next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmHWM:"))
print(json.dumps({{"seconds": seconds, "memory": max(0, peak - before), "outcome": outcome}}))
"""


def header(fingerprint: dict) -> str:
    return (
        '{"format":"tensorcode-experience","version":1,"bindings":{"total":' + json.dumps(fingerprint) + '},'
        '"roots":['
    )


def tail() -> str:
    return (
        '],"calls":[{"op":"total","kind":"pure","args":{"$":"tuple","items":[{"$":"root","index":0}]},'
        '"kwargs":{"$":"dict","items":[]},"result":null}],"supervisions":[]}'
    )


def write_files(directory: Path, megabytes: int, fingerprint: dict) -> dict[str, Path]:
    import base64

    size = megabytes * 10**6
    head, end = header(fingerprint), tail()
    files = {}

    elements = size * 3 // 16  # 4 bytes each, 4/3 for base64
    import numpy

    values = numpy.random.default_rng(0).standard_normal(elements, dtype=numpy.float32)
    payload = base64.b64encode(values.tobytes()).decode()
    tensor = '{"$":"tensor","dtype":"float32","shape":[%d],"b64":"%s"}'
    files["valid"] = head + tensor % (elements, payload) + end
    files["base64"] = head + tensor % (elements, payload[:-8] + "!" + payload[-7:]) + end
    files["shape"] = head + tensor.replace("[%d]", "[0,18446744073709551616,%d]") % (1, payload) + end
    entry = tail()[len('],"calls":['):-len('],"supervisions":[]}')]
    calls = (size - len(head) - len(end)) // (len(entry) + 1)
    files["calls"] = head + "null" + '],"calls":[' + ",".join([entry] * calls) + '],"supervisions":[]}'
    count = (size - len(head) - len(end)) // 3
    files["containers"] = head + "[" + ",".join(["[]"] * count) + "]" + end
    depth = (size - len(head) - len(end)) // 2
    files["deep"] = head + "[" * depth + "]" * depth + end
    keys = (size - len(head) - len(end)) // 12
    files["keys"] = (
        '{"junk":{' + ",".join(f'"k{i:07d}":0' for i in range(keys)) + ',"k0000000":1},' + head[1:]
        + "null" + end
    )
    paths = {}
    for name, text in files.items():
        paths[name] = directory / f"{name}-{megabytes}mb.json"
        paths[name].write_text(text)
    return paths


def measure(path: Path, mode: str, warm: Path) -> dict:
    script = CHILD.format(root=str(ROOT))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", script, str(path), mode, str(warm)], capture_output=True, text=True, env=env, timeout=600
    )
    if result.returncode != 0:
        raise RuntimeError(result.stderr)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import tensorcode
    from tensorcode._fingerprint import describe

    @tensorcode.operation(configuration={"op": "total"})
    def total(x):
        return x.sum()

    fingerprint = describe(total)
    root = Path(tempfile.mkdtemp(prefix="untrusted-io-", dir=os.environ.get("BENCH_DIR")))
    print("load time as a multiple of the valid file's; peak memory above the starting RSS / file size")
    print(f"best of {args.repeats} repeats, each load in a fresh process")
    try:
        for megabytes in args.sizes:
            paths = write_files(root, megabytes, fingerprint)
            warm = root / "warm.json"
            warm.write_text(header(fingerprint) + '{"$":"tensor","dtype":"float32","shape":[1],"b64":"AACAPw=="}'
                            + tail())
            rows = {}
            for name in ("read", "valid", "calls", "containers", "deep", "keys", "shape", "base64"):
                path = paths["valid" if name == "read" else name]
                runs = [measure(path, "read" if name == "read" else "load", warm) for _ in range(args.repeats)]
                rows[name] = {
                    "seconds": min(r["seconds"] for r in runs),
                    "memory": min(r["memory"] for r in runs),
                    "outcome": runs[0]["outcome"],
                    "size": path.stat().st_size,
                }
            valid = rows["valid"]["seconds"]
            costliest = max(rows[n]["seconds"] for n in ("valid", "calls") if rows[n]["outcome"] == "loaded")
            print(f"\n{megabytes} MB files:")
            for name, row in rows.items():
                verdict = ""
                if name not in ("read", "valid", "calls"):
                    verdict = "ok" if row["seconds"] <= costliest and row["outcome"] != "loaded" else "MISSED"
                print(
                    f"  {name:10s} {row['size'] / 1e6:7.1f} MB {row['seconds'] * 1e3:9.1f} ms "
                    f"{row['seconds'] / valid:6.2f}x valid  memory {row['memory'] / row['size']:5.2f}x file  "
                    f"{verdict:6s} {row['outcome']}"
                )
            for path in paths.values():
                path.unlink()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
