"""Experience files: versioned JSON holding a trace's roots, DAG, recorded boundaries and supervision.

The file names operations only by binding (a stable name the application chooses) and describes each by its
fingerprint; loading binds those names to operations the caller already constructed. Nothing in a file can make
the loader import a class, unpickle, or restore a callback.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping

from . import _tracing
from ._codec import MAX_DEPTH, Decoder, lift_payloads, short
from ._experience_writer import FORMAT, VERSION
from ._files import read_regular
from ._fingerprint import describe, difference
from ._operations import EXTERNAL, PURE
from ._trace import restored_trace
from .errors import ExperienceError, FingerprintError

# The id files had before formats stopped using dotted, module-like names; same layout, still read.
_FORMER_FORMAT = "tensorcode.experience"
_TOP = {"format", "version", "bindings", "roots", "calls", "supervisions"}
_CALL = {"op", "kind", "args", "kwargs", "result"}
_SUPERVISION = {"output", "target", "loss", "source"}

MAX_BYTES = 256 * 2**20
MAX_STRUCTURE_BYTES = 32 * 2**20
MIN_CONTAINERS = 100_000
BYTES_PER_CONTAINER = 16
# No valid value nests this many brackets in a row: a codec level adds at most three.
_DEEP = b"[" * (3 * MAX_DEPTH + 8)


def load_experience(
    path, *, operations: Mapping, codecs: Mapping | None = None, max_bytes: int = MAX_BYTES,
    max_structure_bytes: int = MAX_STRUCTURE_BYTES, max_containers: int | None = None,
):
    """Load an experience bound to the supplied, already-constructed ``operations``.

    The file may come from someone else: it must be a regular file (a symbolic link to one is followed) of at
    most ``max_bytes`` bytes (256 MiB by default), of which at most ``max_structure_bytes`` (32 MiB) are JSON
    other than tensor and bytes payloads, holding at most ``max_containers`` JSON arrays and objects
    (by default one per 16 bytes of file, and at least 100,000) nested at most ``MAX_DEPTH`` values deep.
    Raise the limits for files you trust. Raises ``ExperienceError`` (a ``ValueError``) naming the problem for
    any malformed, oversized or incompatible file.
    """
    return _read_and_load(path, operations, codecs, max_bytes, max_structure_bytes, max_containers)[0]


def load_digested(path, *, operations: Mapping, codecs=None, max_bytes: int = MAX_BYTES,
                  max_structure_bytes: int = MAX_STRUCTURE_BYTES, max_containers: int | None = None):
    """``load_experience`` and the SHA-256 of the bytes it read, from one read of a file checked first (a run's
    resume compares the digest: reading the file again for it could read a pipe or an oversized file)."""
    return _read_and_load(path, operations, codecs, max_bytes, max_structure_bytes, max_containers, digest=True)


def _read_and_load(path, operations: Mapping, codecs, max_bytes: int, max_structure: int,
                   max_containers: int | None, *, digest: bool = False) -> tuple:
    """The loaded experience and, when asked (hashing a 256 MiB file takes half a second), its bytes' SHA-256."""
    if not isinstance(operations, Mapping):
        raise TypeError("operations must be a mapping of binding name to operation")
    try:
        raw = read_regular(path, max_bytes=max_bytes, error=ExperienceError, what="experience file")
        sha256 = hashlib.sha256(raw).digest() if digest else None
        return _load(raw, path, operations, codecs, max_structure, max_containers), sha256
    except MemoryError as exc:
        raise ExperienceError(f"{path}: not enough memory to load this experience file") from exc
    except RecursionError as exc:
        raise ExperienceError(f"{path}: the experience file is nested too deeply") from exc


def _load(raw: bytes, path, operations: Mapping, codecs, max_structure: int, max_containers: int | None):
    size = len(raw)
    # Parsed JSON costs 10-25x its text in Python objects; tensor payloads cost 1x. Bound the costly part,
    # while the payloads are found: a file of nothing but JSON is refused once the search passes the limit.
    raw, payloads = lift_payloads(raw, limit=max_structure)
    if raw is None:
        raise ExperienceError(
            f"{path}: the experience file holds more than {max_structure:,} bytes of JSON besides its payloads, "
            "over the limit; pass a larger max_structure_bytes to load a file you trust"
        )
    # A long run of opening brackets is the usual shape of a nesting attack: name it before counting. Nesting
    # the run misses still ends in the parser's RecursionError, reported the same way.
    if _DEEP in raw:
        raise ExperienceError(f"{path}: JSON is nested too deeply (more than {MAX_DEPTH} values deep)")
    # Counted before parsing: a file of millions of tiny arrays would cost ~50x its size as Python objects.
    # Brackets inside strings count too, which only errs on the side of refusing.
    containers = raw.count(b"[") + raw.count(b"{")
    limit = max(MIN_CONTAINERS, size // BYTES_PER_CONTAINER) if max_containers is None else max_containers
    if containers > limit:
        raise ExperienceError(
            f"{path}: the experience file holds {containers:,} JSON arrays and objects, over the limit of "
            f"{limit:,}; pass a larger max_containers to load a file you trust"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ExperienceError(f"{path}: cannot read experience file: {exc}") from exc
    del raw
    document = _parse(text, path)
    del text
    _check_keys(document, _TOP, "experience file")
    if document["format"] not in (FORMAT, _FORMER_FORMAT):
        raise ExperienceError(f"unknown format {short(document['format'])}; expected {FORMAT!r}")
    if type(document["version"]) is not int or document["version"] != VERSION:
        raise ExperienceError(
            f"unsupported experience version {short(document['version'])}; this library reads {VERSION}"
        )
    bindings = document["bindings"]
    if not isinstance(bindings, dict):
        raise ExperienceError("bindings must be a mapping of binding name to fingerprint")
    for name, saved in bindings.items():
        if name not in operations:
            raise ExperienceError(
                f"missing binding {short(name)}: the file was recorded with an operation of that name, and the "
                f"operations it is loaded with are {sorted(operations)} (another tool's file?)"
            )
        if _depth(saved) > MAX_DEPTH:
            raise ExperienceError(f"binding {name!r}: fingerprint is nested more than {MAX_DEPTH} levels deep")
        try:
            current = describe(operations[name])
        except FingerprintError as exc:
            raise ExperienceError(f"binding {name!r}: {exc}") from exc
        where = difference(saved, current)
        if where is not None:
            raise ExperienceError(
                f"fingerprint mismatch for binding {name!r}: {where[:200]} differs from the saved operation"
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
            raise ExperienceError(f"{where}: operation {short(name)} is not a declared binding")
        kind = entry["kind"]
        if kind not in (PURE, EXTERNAL) or kind != bindings[name].get("replay"):
            raise ExperienceError(f"{where}: kind {short(kind)} does not match binding {name!r}")
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
            raise ExperienceError(f"{where}: dangling reference to call {short(call)}")
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
            raise ExperienceError(f"{where}: dangling reference to input {short(index)}")
        self.roots.add(index)
        return _tracing.Root(index)


def _unique_pairs(items: list) -> dict:
    """An object's key/value pairs as a dict; a repeated key is an error, found in one pass over the keys."""
    mapping = dict(items)
    if len(mapping) != len(items):
        seen = set()  # a set, not list.count per key: a hostile object may hold millions of keys
        duplicate = next(key for key, _ in items if key in seen or seen.add(key))
        raise ExperienceError(f"duplicate key {short(duplicate)}")
    return mapping


def _parse(text: str, path) -> dict:

    def constant(name):
        raise ExperienceError(f"non-finite constant {name} is not valid experience JSON")

    try:
        document = json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=constant)
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
        missing, extra = sorted(expected - keys), sorted(keys - expected, key=str)
        raise ExperienceError(f"{where}: missing fields {missing}, unexpected fields {short(extra)}")


def _depth(value) -> int:
    """Nesting depth of parsed JSON, iteratively (a deep value must not exhaust the stack being measured)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return depth
        deepest = max(deepest, depth)
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return deepest


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
