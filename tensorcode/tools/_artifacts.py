"""Tool artifacts on disk, read without torch and without trusting them.

A tool directory holds ``tool.json`` (``{"format": "tensorcode-tool", "version": 1, "tool": <registered name>,
"configuration": {...}}``) and ``model.safetensors``. Files are read only if they are regular files inside the
directory (a symbolic link may not lead out of it; pipes and devices are refused before any read blocks), within
size limits, and every failure is a ``ToolError`` naming the file and the problem.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._files import open_regular, read_exactly
from ..errors import ToolError

FORMAT = "tensorcode-tool"
VERSION = 1
MANIFEST = "tool.json"
WEIGHTS = "model.safetensors"
# Formats this library wrote before tools were saved by registered name; refused with a clear message.
_OLD_FORMATS = {"tensorcode.tool"}
_MANIFEST_KEYS = ("configuration", "format", "tool", "version")
MAX_MANIFEST_BYTES = 1 << 20
MAX_JSON_DEPTH = 32
MAX_HEADER_BYTES = 16 << 20
# safetensors dtype codes and their sizes in bytes
DTYPE_SIZES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors header: dtype code, shape, and byte range in the data section."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class Manifest:
    """What ``tool.json`` says: the registered tool name and its configuration (not yet validated)."""

    tool: str
    configuration: dict


def manifest_text(tool: str, configuration: dict) -> str:
    return json.dumps(
        {"format": FORMAT, "version": VERSION, "tool": tool, "configuration": configuration},
        indent=2,
        sort_keys=True,
        allow_nan=False,
    )


def read_manifest(directory: str | os.PathLike) -> Manifest:
    """The manifest of a tool directory, checked for format, version and shape (not the configuration)."""
    directory = tool_directory(directory)
    where = directory / MANIFEST
    document = parse_json(read_file(directory, MANIFEST, MAX_MANIFEST_BYTES), where)
    if not isinstance(document, dict):
        raise ToolError(f"{where}: a tool manifest is a JSON object, got {type(document).__name__}")
    kind = document.get("format")
    if kind in _OLD_FORMATS:
        raise ToolError(
            f"{where}: format {kind!r} is an older manifest that names a Python class; this library reads "
            f"{FORMAT!r} version {VERSION} manifests, which name a registered tool"
        )
    if kind != FORMAT:
        raise ToolError(f"{where}: format: not a tool manifest (format {kind!r}, expected {FORMAT!r})")
    version = document.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ToolError(f"{where}: version: expected a positive integer, got {version!r}")
    if version > VERSION:
        raise ToolError(
            f"{where}: version: written by a newer tensorcode (format version {version}); this library reads "
            f"version {VERSION}; upgrade tensorcode"
        )
    unknown = sorted(str(k) for k in set(document) - set(_MANIFEST_KEYS))
    if unknown:
        raise ToolError(f"{where}: unknown key {unknown[0]!r}; valid keys: {', '.join(_MANIFEST_KEYS)}")
    name = document.get("tool")
    if not isinstance(name, str) or not name:
        raise ToolError(f"{where}: tool: expected a registered tool name, got {name!r}")
    configuration = document.get("configuration")
    if not isinstance(configuration, dict):
        raise ToolError(f"{where}: configuration: expected a mapping, got {type(configuration).__name__}")
    return Manifest(name, configuration)


def tool_directory(directory: str | os.PathLike) -> Path:
    path = Path(directory)
    try:
        is_directory = stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):
        is_directory = False
    if not is_directory:
        raise ToolError(f"{path} is not a directory saved by save_pretrained (local paths only)")
    return path


def read_file(directory: Path, name: str, limit: int) -> bytes:
    """The bytes of ``directory/name``: a regular file inside ``directory``, at most ``limit`` bytes."""
    path = inside(directory, name)
    handle, size = open_regular(path, error=ToolError, what=name)
    with handle:
        if size > limit:
            raise ToolError(f"{path}: {size} bytes, over the {limit}-byte limit for this file")
        return read_exactly(handle, size, path, error=ToolError, what=name)


def inside(directory: Path, name: str) -> Path:
    """``directory/name``, refused if it does not exist or a symbolic link leads out of ``directory``."""
    path = directory / name
    try:
        root = directory.resolve(strict=True)
        target = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise ToolError(f"{path}: cannot read: {exc}") from exc
    if target.parent != root and root not in target.parents:
        raise ToolError(f"{path}: a symbolic link leading outside {directory} is refused")
    return target


def parse_json(data: bytes, where: Path) -> Any:
    """Strict JSON (no NaN or Infinity, nesting at most ``MAX_JSON_DEPTH``), else ``ToolError``."""

    def refuse_constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        document = json.loads(data.decode("utf-8"), parse_constant=refuse_constant)
    except RecursionError as exc:
        raise ToolError(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise ToolError(f"{where}: not valid JSON: {exc}") from exc
    if _depth(document) > MAX_JSON_DEPTH:
        raise ToolError(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return document


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, iteratively (a hostile document must not exhaust the stack)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            if depth > MAX_JSON_DEPTH:
                return depth
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def read_weights(directory: Path, expected: dict[str, tuple[str, tuple[int, ...]]]) -> tuple[bytes, dict]:
    """The bytes of ``model.safetensors`` and its header, checked against ``expected`` (name -> (dtype code,
    shape)) before the tensor data is read: sorted missing and unexpected names, then each shape and dtype.

    The header must describe exactly the file: contiguous, non-overlapping byte ranges covering the data
    section, each as long as its shape and dtype require.
    """
    path = inside(directory, WEIGHTS)
    handle, size = open_regular(path, error=ToolError, what=WEIGHTS)
    with handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise ToolError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
        length = int.from_bytes(prefix, "little")
        if length > min(MAX_HEADER_BYTES, size - 8):
            raise ToolError(
                f"{path}: header length {length} is larger than the file or the {MAX_HEADER_BYTES}-byte limit"
            )
        try:
            document = parse_json(handle.read(length), path)
        except ToolError as exc:  # the first thing read: most likely some other file under this name
            detail = str(exc).removeprefix(f"{path}: ")
            raise ToolError(f"{path}: not a safetensors file (its header: {detail})") from exc
        header = _header(document, path)
        missing = sorted(set(expected) - set(header))
        unexpected = sorted(set(header) - set(expected))
        if missing or unexpected:
            raise ToolError(f"{path}: missing weights {missing}, unexpected weights {unexpected}")
        for key, entry in sorted(header.items()):
            dtype, shape = expected[key]
            if entry.shape != shape or entry.dtype != dtype:
                raise ToolError(f"{path}: {key} is {entry.shape} {entry.dtype}, expected {shape} {dtype}")
        data = sum(entry.end - entry.begin for entry in header.values())
        if size != 8 + length + data:
            raise ToolError(f"{path}: the file is {size} bytes; its header describes {8 + length + data}")
        handle.seek(0)
        return read_exactly(handle, size, path, error=ToolError, what=WEIGHTS), header


def _header(document: Any, path: Path) -> dict[str, TensorEntry]:
    if not isinstance(document, dict):
        raise ToolError(f"{path}: the safetensors header is not a JSON object")
    metadata = document.get("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ToolError(f"{path}: __metadata__ must map names to strings")
    entries = {}
    for key, value in document.items():
        if key == "__metadata__":
            continue
        if not isinstance(value, dict) or set(value) != {"dtype", "shape", "data_offsets"}:
            raise ToolError(f"{path}: {key}: a header entry has exactly dtype, shape and data_offsets")
        dtype, shape, offsets = value["dtype"], value["shape"], value["data_offsets"]
        if dtype not in DTYPE_SIZES:
            raise ToolError(f"{path}: {key}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(type(d) is int and 0 <= d < 2**40 for d in shape) or len(shape) > 8:
            raise ToolError(f"{path}: {key}: shape must be a list of at most 8 nonnegative integers")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int and o >= 0 for o in offsets)):
            raise ToolError(f"{path}: {key}: data_offsets must be two nonnegative integers")
        count = 1
        for d in shape:
            count *= d
        if offsets[1] - offsets[0] != count * DTYPE_SIZES[dtype]:
            raise ToolError(f"{path}: {key}: data_offsets cover {offsets[1] - offsets[0]} bytes; shape and dtype "
                            f"need {count * DTYPE_SIZES[dtype]}")
        entries[key] = TensorEntry(dtype, tuple(shape), offsets[0], offsets[1])
    position = 0
    for key, entry in sorted(entries.items(), key=lambda item: (item[1].begin, item[1].end)):
        if entry.begin != position:
            raise ToolError(f"{path}: {key}: data_offsets leave a gap or overlap at byte {position}")
        position = entry.end
    return entries
