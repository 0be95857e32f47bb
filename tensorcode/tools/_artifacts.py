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
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise ToolError(f"{path}: {size} bytes, over the {limit}-byte limit for this file")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ToolError(f"{path}: over the {limit}-byte limit for this file")
    return data


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


def open_regular(path: Path):
    """Open ``path`` for reading only if it is a regular file; a pipe or device is refused without blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise ToolError(f"{path}: cannot read: {exc}") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ToolError(f"{path}: not a regular file (pipes, devices and directories are refused)")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


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
