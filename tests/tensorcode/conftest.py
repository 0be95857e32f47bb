"""Every tool.json, training.json and experience file the library writes during these tests is checked against
the JSON Schemas shipped in tensorcode/schemas (documents up to 1 MB; the scale tests write larger ones)."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import pytest

from tensorcode import _atomic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from schema_sources import validator  # noqa: E402

_VALIDATORS: dict = {}
_LIMIT = 1 << 20
_EXPERIENCE = (b'{"format":"tensorcode-experience"', b'{"format": "tensorcode-experience"')


def _check(path: Path, data: bytes) -> None:
    if len(data) > _LIMIT:
        return
    if path.name == "tool.json":
        kind = "tool"
    elif path.name == "training.json":
        kind = "training"
    elif data.startswith(_EXPERIENCE):
        kind = "experience"
    else:
        return
    if kind not in _VALIDATORS:
        _VALIDATORS[kind] = validator(kind)
    errors = sorted(_VALIDATORS[kind].iter_errors(json.loads(data)), key=lambda e: list(e.absolute_path))
    if errors:
        where = list(errors[0].absolute_path)
        raise AssertionError(f"{path} does not match {kind}.schema.json: {errors[0].message} at {where}")


@pytest.fixture(autouse=True)
def _files_match_their_schemas(monkeypatch):
    original = _atomic.write_atomic

    def checked(path, data, **options):
        path = Path(path)
        if isinstance(data, str):
            data = data.encode("utf-8")
        if isinstance(data, (bytes, bytearray, memoryview)):
            _check(path, bytes(data))
            return original(path, data, **options)
        chunks = iter(data)
        first = next(chunks, b"")
        if bytes(first).startswith(_EXPERIENCE):
            whole = b"".join(bytes(c) for c in itertools.chain([first], chunks))
            _check(path, whole)
            return original(path, whole, **options)
        return original(path, itertools.chain([first], chunks), **options)

    for name, module in list(sys.modules.items()):
        if name.startswith("tensorcode") and getattr(module, "write_atomic", None) is original:
            monkeypatch.setattr(module, "write_atomic", checked)
    yield
