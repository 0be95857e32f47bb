"""Readable summaries of the library's files for ``tensorcode inspect``: experience files, training checkpoint
directories and tool directories. Reads JSON (tensor payloads skipped) and safetensors headers only: no torch,
nothing decoded or run. Files are read as the loaders read them: regular files only, within the same limits.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from collections import Counter
from pathlib import Path
from typing import Any

from ._checkpoint_state import MANIFEST_MAX_BYTES
from ._codec import lift_payloads
from ._files import file_kind, read_regular
from .experience import MAX_BYTES
from .receipts import fingerprint

_ITEM_BYTES = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
    "uint8": 1, "bool": 1, "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
    "U8": 1, "BOOL": 1, "U16": 2, "U32": 4, "U64": 8,
}
_SHOWN = 8  # calls and supervisions listed one by one before the rest are counted
_MAX_HEADER = 100 << 20


def kind_of(path: Path) -> str:
    """``"experience"``, ``"checkpoint"`` or ``"tool"``; ``ValueError`` naming what was expected otherwise."""
    if path.is_dir():
        if (path / "training.json").is_file():
            return "checkpoint"
        if (path / "tool.json").is_file():
            return "tool"
        raise ValueError(f"{path}: neither a checkpoint directory (training.json) nor a tool directory (tool.json)")
    if path.is_file():
        if path.name == "training.json":
            return "checkpoint"
        if path.name == "tool.json":
            return "tool"
        return "experience"
    try:
        mode = os.stat(path).st_mode
    except OSError:
        raise ValueError(f"{path}: no such file or directory") from None
    raise ValueError(f"{path}: it is {file_kind(mode)}, not a regular file or a directory")


def summarize(path: Path) -> dict:
    """A JSON-safe summary of the file or directory at ``path``."""
    kind = kind_of(path)
    if kind == "experience":
        return experience(path)
    directory = path if path.is_dir() else path.parent
    return checkpoint(directory) if kind == "checkpoint" else tool(directory)


# -- experience files ------------------------------------------------------------------------------------------
def experience(path: Path) -> dict:
    raw = read_regular(path, max_bytes=MAX_BYTES, error=ValueError, what="experience file")
    document = _json(lift_payloads(raw)[0], path)
    if not isinstance(document, dict) or not {"bindings", "calls", "supervisions"} <= set(document):
        raise ValueError(f"{path}: not an experience file (no bindings, calls and supervisions)")
    calls = document["calls"] if isinstance(document["calls"], list) else []
    supervisions = document["supervisions"] if isinstance(document["supervisions"], list) else []
    tensors = _Tensors()
    tensors.walk(document.get("roots"), "input")
    for call in calls:
        if isinstance(call, dict):
            tensors.walk(call.get("result"), "recorded result")
    for record in supervisions:
        if isinstance(record, dict):
            tensors.walk(record.get("target"), "target")
    return {
        "kind": "experience",
        "path": str(path),
        "bytes": len(raw),
        "format": document.get("format"),
        "version": document.get("version"),
        "bindings": [_binding(name, d) for name, d in _items(document["bindings"])],
        "roots": len(document.get("roots") or []),
        "calls": len(calls),
        "calls_by_operation": dict(
            Counter(f"{c.get('op')} ({c.get('kind')})" for c in calls if isinstance(c, dict))
        ),
        "supervisions": [_supervision(i, s) for i, s in enumerate(supervisions[:_SHOWN]) if isinstance(s, dict)],
        "supervision_count": len(supervisions),
        "losses": dict(Counter(s.get("loss") for s in supervisions if isinstance(s, dict))),
        "tensors": tensors.summary(),
    }


def _binding(name: str, description: Any) -> dict:
    description = description if isinstance(description, dict) else {}
    configuration = description.get("configuration")
    entry = {"name": name, "type": description.get("type"), "replay": description.get("replay")}
    if description.get("type") == "tool-objective" and isinstance(configuration, dict):
        # The objective names its tool as "tool:<registered name>" (tensorcode.tools._base.Tool).
        entry["tool"] = str(configuration.get("tool")).removeprefix("tool:")
        entry["configuration"] = configuration.get("configuration")
        entry["fingerprint"] = fingerprint(entry["tool"], entry["configuration"])
    else:
        entry["configuration"] = configuration
        entry["fingerprint"] = _digest(description)
    state = description.get("state") if isinstance(description.get("state"), list) else []
    entry["parameters"] = sum(_count(s[1]) for s in state if isinstance(s, list) and len(s) == 4 and s[3] is not None)
    return entry


def _supervision(index: int, record: dict) -> dict:
    source = record.get("source")
    sources = source if isinstance(source, list) else [source]
    output = record.get("output") if isinstance(record.get("output"), dict) else {}
    return {
        "index": index,
        "loss": record.get("loss"),
        "output": {"call": output.get("call"), "path": output.get("path")},
        "sources": sources[:_SHOWN],
        "source_count": len(sources),
    }


class _Tensors:
    def __init__(self):
        self.items: list[tuple[str, str, list]] = []

    def walk(self, value: Any, where: str, depth: int = 0) -> None:
        if depth > 200:
            return
        if isinstance(value, dict):
            if value.get("$") == "tensor":
                self.items.append((where, str(value.get("dtype")), list(value.get("shape") or [])))
                return
            for item in value.values():
                self.walk(item, where, depth + 1)
        elif isinstance(value, list):
            for item in value:
                self.walk(item, where, depth + 1)

    def summary(self) -> dict:
        sizes = [(w, d, s, _count(s) * _ITEM_BYTES.get(d, 0)) for w, d, s in self.items]
        largest = sorted(sizes, key=lambda item: -item[3])[:3]
        return {
            "count": len(sizes),
            "bytes": sum(b for *_, b in sizes),
            "dtypes": dict(Counter(d for _, d, _ in self.items)),
            "largest": [{"in": w, "dtype": d, "shape": s, "bytes": b} for w, d, s, b in largest],
        }


# -- checkpoints and tools --------------------------------------------------------------------------------------
def checkpoint(directory: Path) -> dict:
    manifest = _json(_manifest(directory / "training.json"), directory / "training.json")
    if not isinstance(manifest, dict):
        raise ValueError(f"{directory / 'training.json'}: not a training checkpoint manifest")
    entry = manifest.get("tensors") if isinstance(manifest.get("tensors"), dict) else {}
    name = entry.get("file")
    present = isinstance(name, str) and "/" not in name and (directory / name).is_file()
    on_disk = (directory / name).stat().st_size if present else None
    model = manifest.get("model") if isinstance(manifest.get("model"), dict) else {}
    meta = model.get("tensors") if isinstance(model.get("tensors"), dict) else {}
    optimizer = manifest.get("optimizer") if isinstance(manifest.get("optimizer"), dict) else {}
    groups = optimizer.get("param_groups") if isinstance(optimizer.get("param_groups"), list) else []
    modes = manifest.get("modes") if isinstance(manifest.get("modes"), dict) else {}
    flags = [v for op in modes.values() if isinstance(op, dict) for v in op.values()]
    progress = manifest.get("progress") if isinstance(manifest.get("progress"), dict) else {}
    run = progress.get("run") if isinstance(progress.get("run"), dict) else None
    summary = {
        "kind": "checkpoint",
        "path": str(directory),
        "format": manifest.get("format"),
        "version": manifest.get("version"),
        "steps": manifest.get("steps"),
        "operations": [_binding(n, d) for n, d in _items(manifest.get("operations"))],
        "tensors_file": {
            "file": name,
            "present": present,
            "bytes_on_disk": on_disk,
            "bytes": entry.get("bytes"),
            "sha256": entry.get("sha256"),
        },
        "model_tensors": len(meta),
        "model_values": sum(_count(m.get("shape")) for m in meta.values() if isinstance(m, dict)),
        "optimizer": {
            "type": optimizer.get("type"),
            "lr": [g.get("lr") for g in groups if isinstance(g, dict)],
            "slots": len(optimizer.get("state") or {}),
        },
        "modules": {"training": sum(1 for f in flags if f is True), "eval": sum(1 for f in flags if f is False)},
        "generations": len(list(directory.glob("tensors-*.safetensors"))),
        "progress_keys": sorted(progress),
    }
    if run is not None:
        losses = run.get("losses") if isinstance(run.get("losses"), list) else []
        summary["run"] = {
            **{k: run.get(k) for k in ("step", "epoch", "position", "epochs", "experiences", "seed", "shuffle",
                                       "optimizer", "lr", "interval")},
            "total": _product(run.get("epochs"), run.get("experiences")),
            "last_loss": losses[-1] if losses else None,
            "first_loss": losses[0] if losses else None,
        }
    return summary


def tool(directory: Path) -> dict:
    manifest = _json(_manifest(directory / "tool.json"), directory / "tool.json")
    if not isinstance(manifest, dict):
        raise ValueError(f"{directory / 'tool.json'}: not a tool manifest")
    name, configuration = manifest.get("tool"), manifest.get("configuration")
    weights = directory / "model.safetensors"
    tensors = _safetensors_header(weights) if weights.is_file() else None
    return {
        "kind": "tool",
        "path": str(directory),
        "format": manifest.get("format"),
        "version": manifest.get("version"),
        "tool": name,
        "fingerprint": fingerprint(str(name), configuration),
        "configuration": configuration,
        "weights": None
        if tensors is None
        else {
            "file": weights.name,
            "bytes": weights.stat().st_size,
            "tensors": len(tensors),
            "values": sum(_count(t.get("shape")) for t in tensors.values()),
            "dtypes": dict(Counter(str(t.get("dtype")) for t in tensors.values())),
        },
    }


def _safetensors_header(path: Path) -> dict:
    with path.open("rb") as handle:
        head = handle.read(8)
        if len(head) != 8:
            raise ValueError(f"{path}: truncated safetensors file")
        (size,) = struct.unpack("<Q", head)
        if size > _MAX_HEADER:
            raise ValueError(f"{path}: safetensors header of {size} bytes is implausibly large")
        header = _json(handle.read(size), path)
    if not isinstance(header, dict):
        raise ValueError(f"{path}: malformed safetensors header")
    return {k: v for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)}


# -- rendering -------------------------------------------------------------------------------------------------
def render(summary: dict) -> str:
    """The summary as indented text for a terminal."""
    return "\n".join(_RENDER[summary["kind"]](summary)) + "\n"


def _render_experience(s: dict) -> list[str]:
    lines = [
        f"experience file {s['path']} ({_size(s['bytes'])}, {s['format']} version {s['version']})",
        f"  bindings: {len(s['bindings'])}",
    ]
    lines += [f"    {line}" for b in s["bindings"] for line in _binding_lines(b)]
    lines.append(f"  inputs: {s['roots']}; calls: {s['calls']}")
    lines += [f"    {count} x {op}" for op, count in s["calls_by_operation"].items()]
    lines.append(f"  supervisions: {s['supervision_count']} ({_counts(s['losses'])})")
    for record in s["supervisions"]:
        sources = ", ".join(map(str, record["sources"]))
        more = record["source_count"] - len(record["sources"])
        lines.append(
            f"    [{record['index']}] loss {record['loss']} on call {record['output']['call']}"
            f" output {record['output']['path']}; {record['source_count']} source(s): {sources}"
            + (f" and {more} more" if more > 0 else "")
        )
    if s["supervision_count"] > len(s["supervisions"]):
        lines.append(f"    ... and {s['supervision_count'] - len(s['supervisions'])} more")
    t = s["tensors"]
    lines.append(f"  tensors: {t['count']} ({_size(t['bytes'])}; {_counts(t['dtypes']) or 'none'})")
    lines += [f"    {x['dtype']} {x['shape']} in {x['in']} ({_size(x['bytes'])})" for x in t["largest"]]
    return lines


def _render_checkpoint(s: dict) -> list[str]:
    f = s["tensors_file"]
    lines = [
        f"training checkpoint {s['path']} ({s['format']} version {s['version']})",
        f"  steps: {s['steps']}",
    ]
    run = s.get("run")
    if run:
        lines.append(
            f"  run: step {run['step']} of {run['total']} (epoch {run['epoch']}, position {run['position']} of "
            f"{run['experiences']} experiences); seed {run['seed']}, shuffle {run['shuffle']}, "
            f"{run['optimizer']} lr {run['lr']}, checkpoint every {run['interval']} steps"
        )
        if run["last_loss"] is not None:
            lines.append(f"  loss: first {run['first_loss']:.6g}, last {run['last_loss']:.6g}")
    elif s["progress_keys"]:
        lines.append(f"  progress keys: {', '.join(s['progress_keys'])}")
    lines.append(f"  operations: {len(s['operations'])}")
    lines += [f"    {line}" for b in s["operations"] for line in _binding_lines(b)]
    lines += [
        f"  model: {s['model_tensors']} tensors, {s['model_values']:,} values; modules: "
        f"{s['modules']['training']} training, {s['modules']['eval']} eval",
        f"  optimizer: {s['optimizer']['type']} lr {s['optimizer']['lr']}, state for {s['optimizer']['slots']} "
        "parameters",
        f"  tensors: {f['file']} ({_size(f['bytes']) if isinstance(f['bytes'], int) else '?'}, sha256 "
        f"{str(f['sha256'])[:16]}...){_damage(f)}; {s['generations']} generation(s) on disk",
    ]
    return lines


def _damage(f: dict) -> str:
    """What is wrong with the tensors file at a glance; `validate` checks its content."""
    if not f["present"]:
        return " MISSING"
    if f["bytes_on_disk"] != f["bytes"]:
        return f" but {_size(f['bytes_on_disk'])} ON DISK: run tensorcode validate"
    return ""


def _render_tool(s: dict) -> list[str]:
    lines = [
        f"tool {s['tool']} in {s['path']} ({s['format']} version {s['version']})",
        f"  fingerprint: {s['fingerprint']}",
        f"  configuration: {json.dumps(s['configuration'], sort_keys=True)}",
    ]
    w = s["weights"]
    if w is None:
        lines.append("  weights: model.safetensors MISSING")
    else:
        lines.append(
            f"  weights: {w['file']} ({_size(w['bytes'])}): {w['tensors']} tensors, {w['values']:,} values "
            f"({_counts(w['dtypes'])})"
        )
    return lines


_RENDER = {"experience": _render_experience, "checkpoint": _render_checkpoint, "tool": _render_tool}


def _binding_lines(b: dict) -> list[str]:
    if b.get("tool"):
        head = f"{b['name']}: tool {b['tool']}, fingerprint {b['fingerprint']}, {b['parameters']:,} parameters"
    else:
        head = f"{b['name']}: {b['type']} ({b['replay']}), fingerprint {b['fingerprint']}"
    return [head, f"  configuration: {json.dumps(b['configuration'], sort_keys=True)}"]


# -- helpers ---------------------------------------------------------------------------------------------------
def _manifest(path: Path) -> bytes:
    return read_regular(path, max_bytes=MANIFEST_MAX_BYTES, error=ValueError, what="manifest")


def _json(data: bytes, path: Path) -> Any:
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError(f"{path}: JSON is nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: not valid JSON: {exc}") from exc


def _items(value: Any) -> list[tuple[str, Any]]:
    return list(value.items()) if isinstance(value, dict) else []


def _count(shape: Any) -> int:
    if not isinstance(shape, list) or not all(isinstance(n, int) for n in shape):
        return 0
    return math.prod(shape)


def _product(a: Any, b: Any) -> int | None:
    return a * b if isinstance(a, int) and isinstance(b, int) else None


def _digest(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def _counts(counter: dict) -> str:
    return ", ".join(f"{v} {k}" for k, v in counter.items())


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover
