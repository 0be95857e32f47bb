"""Writing experience files (``Trace.save``); ``experience.py`` reads them. Kept apart so that the trace, which
saves itself, and the loader, which builds traces, do not import each other."""

from __future__ import annotations

import json
from collections.abc import Mapping

from . import _tracing
from ._atomic import write_atomic
from ._codec import MAX_DEPTH, Encoder, Payloads
from ._fingerprint import describe
from ._operations import EXTERNAL
from .errors import ExperienceError, FingerprintError, TraceError

FORMAT = "tensorcode-experience"
VERSION = 1


def write_experience(
    session, roots: list, path, *, operations: Mapping, codecs: Mapping | None = None, durable: bool = True
) -> None:
    """Write ``session`` (whose stored roots are ``roots``) to ``path`` atomically; any failure leaves an existing
    file untouched. ``durable``: as for ``_atomic.write_atomic``."""
    if not isinstance(operations, Mapping):
        raise TypeError("operations must be a mapping of binding name to operation")
    try:
        session.validate(persist=True)
    except TraceError as exc:
        raise ExperienceError(str(exc)) from exc
    names = {}
    for name, op in operations.items():
        if not isinstance(name, str) or not name:
            raise ExperienceError(f"binding names must be nonempty strings, got {name!r}")
        names.setdefault(id(op), name)
    bindings = {}
    for call in session.calls:
        name = names.get(id(call.op))
        if name is None:
            raise ExperienceError(
                f"missing binding: call {call.index} uses {type(call.op).__qualname__} which is not among "
                f"operations {sorted(operations)}"
            )
        if name not in bindings:
            try:
                bindings[name] = describe(call.op)
            except FingerprintError as exc:
                raise ExperienceError(f"binding {name!r}: {exc}") from exc
        call.binding = name
    payloads = Payloads()
    encoder = _TreeEncoder(codecs, payloads=payloads)
    document = {
        "format": FORMAT,
        "version": VERSION,
        "bindings": bindings,
        "roots": [encoder.encode(value, f"input {i}") for i, value in enumerate(roots)],
        "calls": [
            {
                "op": call.binding,
                "kind": call.kind,
                "args": encoder.encode(call.arg_tree, f"call {call.index} arguments"),
                "kwargs": encoder.encode(call.kwarg_tree, f"call {call.index} arguments"),
                "result": encoder.encode(call.recorded, f"call {call.index} result") if call.kind == EXTERNAL else None,
            }
            for call in session.calls
        ],
        "supervisions": [
            {
                "output": {"call": s.output.call, "path": _saved_path(s.output.path, f"supervision {i}")},
                "target": encoder.encode(s.target, f"supervision {i} target"),
                "loss": s.loss,
                "source": s.source if isinstance(s.source, str) else list(s.source),
            }
            for i, s in enumerate(session.supervisions)
        ],
    }
    try:
        text = json.dumps(document, allow_nan=False, separators=(",", ":"))
    except (ValueError, TypeError) as exc:  # pragma: no cover - the encoder already refuses these
        raise ExperienceError(f"experience is not serializable: {exc}") from exc
    write_atomic(path, payloads.chunks(text), durable=durable)


class _TreeEncoder(Encoder):
    """Encodes argument trees: ``Ref``/``Root`` markers become tagged objects."""

    def encode(self, value, where, depth=0):
        kind = type(value)
        if depth > MAX_DEPTH:  # markers too: the loader refuses a marker nested deeper than any other value
            raise ExperienceError(f"{where}: value is nested more than {MAX_DEPTH} levels deep")
        if kind is _tracing.Ref:
            return {"$": "ref", "call": value.call, "path": _saved_path(value.path, where)}
        if kind is _tracing.Root:
            return {"$": "root", "index": value.index}
        return super().encode(value, where, depth)


def _saved_path(path: tuple, where: str) -> list:
    """An output path as saved; the loader accepts only integer and string keys, so saving refuses others."""
    for key in path:
        if not isinstance(key, (int, str)) or isinstance(key, bool):
            raise ExperienceError(
                f"{where}: a reference into an output by key {key!r} cannot be saved: output paths hold only "
                "integer and string keys (use a list or a string-keyed mapping for outputs that others consume)"
            )
    return list(path)
