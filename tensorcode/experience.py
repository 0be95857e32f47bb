"""Experience files: versioned JSON holding a trace's roots, DAG, recorded boundaries and supervision.

The file names operations only by binding (a stable name the application chooses) and describes each by its
fingerprint; loading binds those names to operations the caller already constructed. Nothing in a file can make
the loader import a class, unpickle, or restore a callback.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

from . import _tracing
from ._codec import Decoder, lift_payloads
from ._experience_writer import FORMAT, VERSION
from ._fingerprint import describe, difference
from ._operations import EXTERNAL, PURE
from ._trace import restored_trace
from .errors import ExperienceError, FingerprintError

# The id files had before formats stopped using dotted, module-like names; same layout, still read.
_FORMER_FORMAT = "tensorcode.experience"
_TOP = {"format", "version", "bindings", "roots", "calls", "supervisions"}
_CALL = {"op", "kind", "args", "kwargs", "result"}
_SUPERVISION = {"output", "target", "loss", "source"}


def load_experience(path, *, operations: Mapping, codecs: Mapping | None = None):
    """Load an experience bound to the supplied, already-constructed ``operations``.

    Raises ``ExperienceError`` (a ``ValueError``) naming the problem for any malformed or incompatible file.
    """
    if not isinstance(operations, Mapping):
        raise TypeError("operations must be a mapping of binding name to operation")
    try:
        raw, payloads = lift_payloads(Path(path).read_bytes())
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ExperienceError(f"{path}: cannot read experience file: {exc}") from exc
    document = _parse(text, path)
    _check_keys(document, _TOP, "experience file")
    if document["format"] not in (FORMAT, _FORMER_FORMAT):
        raise ExperienceError(f"unknown format {document['format']!r}; expected {FORMAT!r}")
    if type(document["version"]) is not int or document["version"] != VERSION:
        raise ExperienceError(f"unsupported experience version {document['version']!r}; this library reads {VERSION}")
    bindings = document["bindings"]
    if not isinstance(bindings, dict):
        raise ExperienceError("bindings must be a mapping of binding name to fingerprint")
    for name, saved in bindings.items():
        if name not in operations:
            raise ExperienceError(f"missing binding {name!r}: pass it in operations (given: {sorted(operations)})")
        try:
            current = describe(operations[name])
        except FingerprintError as exc:
            raise ExperienceError(f"binding {name!r}: {exc}") from exc
        where = difference(saved, current)
        if where is not None:
            raise ExperienceError(
                f"fingerprint mismatch for binding {name!r}: {where} differs from the saved operation"
            )

    decoder = Decoder(codecs, payloads=payloads)
    roots = _list(document["roots"], "roots")
    calls = _list(document["calls"], "calls")
    supervisions = _list(document["supervisions"], "supervisions")
    session = restored_trace([decoder.decode(value, f"input {i}") for i, value in enumerate(roots)])
    for index, entry in enumerate(calls):
        where = f"call {index}"
        if not isinstance(entry, dict):
            raise ExperienceError(f"{where}: must be an object")
        _check_keys(entry, _CALL, where)
        name = entry["op"]
        if not isinstance(name, str) or name not in bindings:
            raise ExperienceError(f"{where}: operation {name!r} is not a declared binding")
        kind = entry["kind"]
        if kind not in (PURE, EXTERNAL) or kind != bindings[name].get("replay"):
            raise ExperienceError(f"{where}: kind {kind!r} does not match binding {name!r}")
        markers = _Markers(index, len(calls), len(roots), where)
        args = decoder.decode(entry["args"], f"{where} arguments", node=markers)
        kwargs = decoder.decode(entry["kwargs"], f"{where} arguments", node=markers)
        if not isinstance(args, tuple) or not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
            raise ExperienceError(f"{where}: arguments must be a tuple and keyword arguments a string-keyed mapping")
        if kind == PURE and entry["result"] is not None:
            raise ExperienceError(f"{where}: a pure call stores no result")
        call = _tracing.Call(
            session, index, operations[name], kind, args, kwargs, markers.deps, markers.roots, _tracing.OK
        )
        call.binding = name
        if kind == EXTERNAL:
            call.recorded = decoder.decode(entry["result"], f"{where} result")
        session.calls.append(call)
    for index, entry in enumerate(supervisions):
        where = f"supervision {index}"
        if not isinstance(entry, dict):
            raise ExperienceError(f"{where}: must be an object")
        _check_keys(entry, _SUPERVISION, where)
        output = entry["output"]
        if not isinstance(output, dict):
            raise ExperienceError(f"{where}: output must be an object")
        _check_keys(output, {"call", "path"}, f"{where} output")
        call = output["call"]
        if not _is_index(call) or call >= len(calls):
            raise ExperienceError(f"{where}: dangling reference to call {call!r}")
        path = _path(decoder.decode(output["path"], where), where)
        loss, source = entry["loss"], entry["source"]
        if not isinstance(loss, str) or not loss:
            raise ExperienceError(f"{where}: loss must be a nonempty string")
        if isinstance(source, list) and source and all(isinstance(s, str) and s.strip() for s in source):
            source = tuple(source)
        elif not isinstance(source, str) or not source.strip():
            raise ExperienceError(f"{where}: source must be a nonempty provenance string")
        target = decoder.decode(entry["target"], f"{where} target")
        output = dataclasses.replace(session.calls[call].output, path=path)
        session.supervisions.append(_tracing.Supervision(output, target, loss, source))
    return session


class _Markers:
    """Decodes ``ref``/``root`` nodes of one call, checking every reference points backwards and exists."""

    def __init__(self, index: int, calls: int, roots: int, where: str):
        self.index, self.calls, self.root_count, self.where = index, calls, roots, where
        self.deps: set = set()
        self.roots: set = set()

    def __call__(self, data: dict, where: str):
        if data["$"] == "ref":
            _check_keys(data, {"$", "call", "path"}, where)
            call = data["call"]
            if not _is_index(call):
                raise ExperienceError(f"{where}: reference call must be a nonnegative integer")
            if call >= self.calls:
                raise ExperienceError(f"{where}: dangling reference to call {call} (file has {self.calls} calls)")
            if call >= self.index:
                raise ExperienceError(f"{where}: forward reference to call {call} (not before call {self.index})")
            if not isinstance(data["path"], list):
                raise ExperienceError(f"{where}: reference path must be a list")
            self.deps.add(call)
            return _tracing.Ref(call, _path(data["path"], where))
        _check_keys(data, {"$", "index"}, where)
        index = data["index"]
        if not _is_index(index) or index >= self.root_count:
            raise ExperienceError(f"{where}: dangling reference to input {index!r}")
        self.roots.add(index)
        return _tracing.Root(index)


def _parse(text: str, path) -> dict:
    def pairs(items):
        mapping = dict(items)
        if len(mapping) != len(items):
            keys = [key for key, _ in items]
            raise ExperienceError(f"duplicate key {next(k for k in keys if keys.count(k) > 1)!r}")
        return mapping

    def constant(name):
        raise ExperienceError(f"non-finite constant {name} is not valid experience JSON")

    try:
        document = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except json.JSONDecodeError as exc:
        raise ExperienceError(f"{path}: not valid JSON (truncated or corrupt): {exc}") from exc
    except ExperienceError:
        raise
    except ValueError as exc:  # e.g. an integer literal longer than Python's int_max_str_digits
        raise ExperienceError(f"{path}: not valid experience JSON: {exc}") from exc
    except RecursionError as exc:
        raise ExperienceError(f"{path}: JSON is nested too deeply") from exc
    if not isinstance(document, dict):
        raise ExperienceError(f"{path}: experience must be a JSON object")
    return document


def _check_keys(data: dict, expected: set, where: str) -> None:
    keys = set(data)
    if keys != expected:
        missing, extra = sorted(expected - keys), sorted(keys - expected)
        raise ExperienceError(f"{where}: missing fields {missing}, unexpected fields {extra}")


def _list(value, where: str) -> list:
    if not isinstance(value, list):
        raise ExperienceError(f"{where} must be a list")
    return value


def _is_index(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _path(items, where: str) -> tuple:
    if not isinstance(items, list) or not all(isinstance(k, (int, str)) and not isinstance(k, bool) for k in items):
        raise ExperienceError(f"{where}: an output path is a list of integer or string keys")
    return tuple(items)
