"""The capture engine behind ``trace()``: records top-level operation calls, their dependencies and roots.

Captured calls form a DAG by object identity: an argument that is (or contains) an earlier captured output is a
dependency, anything else is an external root snapshotted at call time. Only top-level calls are recorded: a
call made while another captured call runs belongs to that call. Whether a call is captured depends only on the
calling context's own state (a context variable), never on traces open in other threads or tasks.
"""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
import operator
import sys
import threading
import types
from typing import Any

from ._refs import InputRef, OutputRef
from .errors import TraceError

# (session, depth): depth 0 means "the next operation call is top-level"; a None session suppresses capture.
STATE: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("tensorcode_trace", default=None)
SUPPRESSED = (None, 1)
MAX_ARG_DEPTH = 100
SCALARS = (int, float, bool, str, bytes, complex, type(None))
LEAF_TYPES = frozenset(SCALARS)
# Exact tensor classes seen so far; filled when torch is imported (type lookups keep the hot path cheap).
TENSOR_TYPES: set = set()

OK, FAILED, CANCELLED = "ok", "failed", "cancelled"
RELEASED = object()  # a call's live output after ``release()``: gone (``None`` is a valid output)


def current_session():
    state = STATE.get()
    return state[0] if state else None


def capture(op, fn, args, kwargs):
    """Call ``fn`` as operation ``op``; record it when it is a top-level call inside an open trace."""
    state = STATE.get()
    if state is None or state[1]:
        return fn(*args, **kwargs)
    return _capture(state[0], op, fn, args, kwargs)


def _capture(session, op, fn, args, kwargs):
    pending = session._begin(op, args, kwargs)
    token = STATE.set((session, 1))
    try:
        result = fn(*pending[1], **pending[2])
    except BaseException as exc:
        session._fail(pending, exc)
        raise
    finally:
        STATE.reset(token)
    return session._finish(pending, result)


def capture_async(op, fn, args, kwargs):
    """The awaitable form of ``capture``: live tensors and native gradients pass through unchanged."""
    state = STATE.get()
    if state is None or state[1]:
        return fn(*args, **kwargs)
    session = state[0]
    if session.closed:
        raise TraceError("this trace is closed: a task holding its context cannot start new captures")

    async def run():
        try:
            pending = session._begin(op, args, kwargs)
            token = STATE.set((session, 1))
            try:
                result = await fn(*pending[1], **pending[2])
            except BaseException as exc:
                session._fail(pending, exc)
                raise
            finally:
                STATE.reset(token)
            return session._finish(pending, result)
        finally:
            session._pending.discard(coroutine)

    coroutine = run()
    session._pending.add(coroutine)
    return coroutine


# -- torch.nn.Module interception ---------------------------------------------------------------------------
# The first trace opened after torch is imported replaces ``Module.__call__``, and the replacement stays: every
# swap invalidates the type caches of all Module subclasses (hundreds), which cost more than 100 us per trace.
# Untraced calls pay one context-variable lookup, and nothing is captured unless the calling context itself is
# inside a trace, so keeping it installed leaks no state into untraced code or other threads.
_patch_lock = threading.Lock()
_original_call = None
hooked = False  # whether the patch is in place (read by every trace opened)


def _module_call(self, *args, **kwargs):
    state = STATE.get()
    if state is None or state[1]:
        return _original_call(self, *args, **kwargs)
    return _capture(state[0], self, _original_call.__get__(self), args, kwargs)


def install_module_hook() -> None:
    """Route ``torch.nn.Module.__call__`` through the tracer: once per process, a no-op until torch is imported."""
    global _original_call, hooked
    if _original_call is not None:
        return
    torch = sys.modules.get("torch")
    if torch is None:
        return
    with _patch_lock:
        if _original_call is None:
            TENSOR_TYPES.update((torch.Tensor, torch.nn.Parameter))
            _original_call = torch.nn.Module.__call__
            torch.nn.Module.__call__ = _module_call
            hooked = True


# -- records --------------------------------------------------------------------------------------------------
class Call:
    """One recorded top-level call: its operation, argument tree, dependencies, status and output."""

    __slots__ = (
        "index",
        "op",
        "binding",
        "kind",
        "arg_tree",
        "kwarg_tree",
        "dependencies",
        "roots",
        "status",
        "error",
        "_value",
        "recorded",
        "_trace_id",
    )

    def __init__(self, session, index, op, kind, arg_tree, kwarg_tree, deps, roots, status, error=None):
        # The trace's identity, not the trace: a call referring back to its trace would make every trace a
        # reference cycle, freed only by the cyclic garbage collector instead of as soon as it is dropped.
        self._trace_id = session.trace_id
        self.index, self.op, self.kind = index, op, kind
        self.binding = None
        self.arg_tree, self.kwarg_tree = arg_tree, kwarg_tree
        self.dependencies = tuple(sorted(deps)) if len(deps) > 1 else tuple(deps)
        self.roots = tuple(sorted(roots)) if len(roots) > 1 else tuple(roots)
        self.status, self.error = status, error
        self._value = RELEASED if session.released else None
        self.recorded = None

    @property
    def name(self) -> str:
        if self.binding:
            return self.binding
        return getattr(self.op, "__name__", type(self.op).__name__)

    @property
    def output(self) -> OutputRef:
        """An explicit handle to this call's output (needed for scalars and ambiguous aliases)."""
        return OutputRef(self.index, (), self._trace_id)

    @property
    def inputs(self) -> list[InputRef]:
        return [InputRef(i, self._trace_id) for i in self.roots]

    @property
    def value(self):
        """The live output; unavailable after ``release()`` or for a loaded experience (use ``replay``)."""
        if self.status != OK:
            raise TraceError(f"call {self.index} ({self.name}) {self.status}: {self.error}")
        if self._value is RELEASED:
            raise TraceError("this trace has been released: live outputs are gone; replay to recompute them")
        return self._value

    def __repr__(self) -> str:
        return f"<Call {self.index} {self.name} {self.kind} {self.status} deps={list(self.dependencies)}>"


@dataclasses.dataclass(frozen=True)
class Supervision:
    """Explicit feedback on a captured output: the target, the loss that compares them, and its provenance."""

    output: OutputRef
    target: Any
    loss: str
    source: str | tuple


@dataclasses.dataclass(frozen=True)
class Example:
    """The dependency closure of a target: the calls it needs (ascending) and their external roots."""

    target: OutputRef
    calls: tuple[int, ...]
    roots: tuple[InputRef, ...]


# -- helpers on values ------------------------------------------------------------------------------------------
def is_tensor(value) -> bool:
    if type(value) in TENSOR_TYPES:
        return True
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        TENSOR_TYPES.add(type(value))
        return True
    return False


def snapshot(value, depth: int = 0):
    """A copy of an external value as it is now: tensors detached and cloned, containers copied."""
    if depth > MAX_ARG_DEPTH:
        raise TraceError(f"argument nested more than {MAX_ARG_DEPTH} levels deep")
    if isinstance(value, SCALARS):
        return value
    if is_tensor(value):
        return value.detach().clone()
    if isinstance(value, list):
        return [snapshot(v, depth + 1) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(snapshot(v, depth + 1) for v in value)
    if isinstance(value, (dict, types.MappingProxyType)):
        return {k: snapshot(v, depth + 1) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return copy_dataclass(value, {f.name: snapshot(getattr(value, f.name), depth + 1) for f in fields})
    return value  # opaque: kept as is; saving refuses it with a clear error


def fresh(value):
    """A copy of a stored value that its consumer may change freely, so that nothing a replayed operation (or a
    custom loss) does reaches the stored record. Only what can be changed in place is copied: tensors are
    cloned and lists, mappings and dataclasses rebuilt; scalars, strings and bytes are shared."""
    cls = type(value)
    if cls in LEAF_TYPES:
        return value
    if cls in TENSOR_TYPES:
        return value.clone()
    if cls is list:
        return [fresh(v) for v in value]
    if cls is tuple:
        return tuple([fresh(v) for v in value])
    if cls is dict:
        return {k: fresh(v) for k, v in value.items()}
    if is_tensor(value):
        return value.clone()
    if isinstance(value, list):
        return [fresh(v) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(fresh(v) for v in value)
    if isinstance(value, types.MappingProxyType):  # read-only itself, but what it holds may not be
        return types.MappingProxyType({k: fresh(v) for k, v in value.items()})
    if isinstance(value, dict):
        return {k: fresh(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return copy_dataclass(value, {f.name: fresh(getattr(value, f.name)) for f in dataclasses.fields(value)})
    return value  # opaque: the application's own object


def watch(value, found: list) -> None:
    """Append ``(object, stamp)`` for every tensor and mutable container inside ``value`` (an input of a call).

    ``snapshot`` has already bounded its depth. Tuples cannot change, but what they hold can.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        cls = type(item)
        if cls in LEAF_TYPES:
            continue
        if is_tensor(item):
            found.append((item, stamp(item)))
            continue
        if isinstance(item, tuple):
            stack.extend(item)
            continue
        mark = stamp(item)
        if mark is not None:
            found.append((item, mark))
            stack.extend(mark[1][1::2] if mark[0] == "dict" else mark[1])


def stamp(value):
    """A mutation stamp: a tensor's version counter (a content hash for inference tensors), or the structure of a
    list, mapping or dataclass (the very objects it holds, compared by identity; ``None`` for anything else).

    Holding the objects, not their ids, keeps a replaced element alive, so a new one cannot reuse its address.
    """
    if type(value) in TENSOR_TYPES or is_tensor(value):
        if value.is_inference():
            data = value.detach()
            if data.device.type != "cpu":
                data = data.to("cpu")
            data = data.contiguous().reshape(-1)  # a 0-dim tensor cannot be viewed as bytes
            if data.dtype.is_floating_point or data.dtype.is_complex or data.dtype == sys.modules["torch"].bool:
                data = data.view(sys.modules["torch"].uint8) if data.numel() else data
            return ("content", hashlib.blake2b(data.numpy().tobytes(), digest_size=16).digest())
        return ("version", value._version)
    if isinstance(value, list):
        return ("list", tuple(value))
    if isinstance(value, (dict, types.MappingProxyType)):
        return ("dict", tuple(item for pair in value.items() for item in pair))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return ("dataclass", tuple(getattr(value, f.name) for f in dataclasses.fields(value)))
    return None


def changed(value, old) -> bool:
    """Whether ``value`` no longer matches the stamp ``old`` taken from it earlier."""
    new = stamp(value)
    if new is None or new[0] != old[0]:
        return True
    if old[0] in ("version", "content"):
        return new[1] != old[1]
    return len(new[1]) != len(old[1]) or any(map(operator.is_not, new[1], old[1]))


def _element(value, key):
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and isinstance(key, str):
        return getattr(value, key)
    return value[key]


class Ref:
    """Argument-tree marker: this position held a captured output (call, path)."""

    __slots__ = ("call", "path")

    def __init__(self, call: int, path: tuple):
        self.call, self.path = call, path


class Root:
    """Argument-tree marker: this position held external root ``index``."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


def build(node, values: dict, roots):
    """Rebuild call arguments from an argument tree, with outputs from ``values`` and fresh copies of ``roots``
    (a replayed operation may change its arguments; the stored record must not change with them)."""
    kind = type(node)
    if kind is Ref:
        return extract(values[node.call], node.path)
    if kind is Root:
        return fresh(roots[node.index])
    if kind is list:
        return [build(v, values, roots) for v in node]
    if kind is tuple:
        return tuple([build(v, values, roots) for v in node])
    if kind is dict:
        return {k: build(v, values, roots) for k, v in node.items()}
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        fields = dataclasses.fields(node)
        return copy_dataclass(node, {f.name: build(getattr(node, f.name), values, roots) for f in fields})
    return node


def extract(value, path: tuple):
    for key in path:
        value = _element(value, key)
    return value


def copy_dataclass(original, values: dict):
    """A copy of dataclass ``original`` with field ``values``, bypassing ``__init__`` and ``frozen``.

    ``object.__setattr__`` also works for ``slots=True`` dataclasses, which have no ``__dict__``.
    """
    copy = object.__new__(type(original))
    if hasattr(original, "__dict__"):
        copy.__dict__.update(vars(original))
    for name, value in values.items():
        object.__setattr__(copy, name, value)
    return copy
