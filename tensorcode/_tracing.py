"""The capture engine behind ``trace()``: records top-level operation calls, their dependencies and roots.

Captured calls form a DAG by object identity: an argument that is (or contains) an earlier captured output is a
dependency, anything else is an external root snapshotted at call time. Only top-level calls are recorded: a
call made while another captured call runs belongs to that call. Module calls are intercepted by replacing
``torch.nn.Module.__call__`` while at least one trace is open (removed in a ``finally`` when the last closes);
nested submodule calls only pay one context-variable lookup.
"""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
import sys
import threading
import types
from typing import Any

from ._refs import InputRef, OutputRef
from .errors import TraceError

# (session, depth): depth 0 means "the next operation call is top-level"; a None session suppresses capture.
_STATE: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("tensorcode_trace", default=None)
_SUPPRESSED = (None, 1)
_MAX_ARG_DEPTH = 100
_SCALARS = (int, float, bool, str, bytes, complex, type(None))
LEAF_TYPES = frozenset(_SCALARS)
# Exact tensor classes seen so far; filled when torch is imported (type lookups keep the hot path cheap).
TENSOR_TYPES: set = set()

OK, FAILED, CANCELLED = "ok", "failed", "cancelled"


def current_session():
    state = _STATE.get()
    return state[0] if state else None


def capture(op, fn, args, kwargs):
    """Call ``fn`` as operation ``op``; record it when it is a top-level call inside an open trace."""
    state = _STATE.get()
    if state is None or state[1]:
        return fn(*args, **kwargs)
    session = state[0]
    pending = session._begin(op, args, kwargs)
    token = _STATE.set((session, 1))
    try:
        result = fn(*pending.args, **pending.kwargs)
    except BaseException as exc:
        session._fail(pending, exc)
        raise
    finally:
        _STATE.reset(token)
    return session._finish(pending, result)


def capture_async(op, fn, args, kwargs):
    """The awaitable form of ``capture``: live tensors and native gradients pass through unchanged."""
    state = _STATE.get()
    if state is None or state[1]:
        return fn(*args, **kwargs)
    session = state[0]
    if session._closed:
        raise TraceError("this trace is closed: a task holding its context cannot start new captures")

    async def run():
        try:
            pending = session._begin(op, args, kwargs)
            token = _STATE.set((session, 1))
            try:
                result = await fn(*pending.args, **pending.kwargs)
            except BaseException as exc:
                session._fail(pending, exc)
                raise
            finally:
                _STATE.reset(token)
            return session._finish(pending, result)
        finally:
            session._pending.discard(coroutine)

    coroutine = run()
    session._pending.add(coroutine)
    return coroutine


# -- torch.nn.Module interception ---------------------------------------------------------------------------
_patch_lock = threading.Lock()
_patch_count = 0
_original_call = None


def _module_call(self, *args, **kwargs):
    state = _STATE.get()
    if state is None or state[1]:
        return _original_call(self, *args, **kwargs)
    return capture(self, _original_call.__get__(self), args, kwargs)


def install_module_hook() -> bool:
    global _patch_count, _original_call
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    TENSOR_TYPES.update((torch.Tensor, torch.nn.Parameter))
    with _patch_lock:
        if _patch_count == 0:
            _original_call = torch.nn.Module.__call__
            torch.nn.Module.__call__ = _module_call
        _patch_count += 1
    return True


def remove_module_hook() -> None:
    global _patch_count
    with _patch_lock:
        _patch_count -= 1
        if _patch_count == 0:
            sys.modules["torch"].nn.Module.__call__ = _original_call


# -- records --------------------------------------------------------------------------------------------------
class _Pending:
    __slots__ = ("op", "args", "kwargs", "arg_tree", "kwarg_tree", "deps", "roots", "watch")

    def __init__(self, op, args, kwargs, arg_tree, kwarg_tree, deps, roots, watch):
        self.op, self.args, self.kwargs = op, args, kwargs
        self.arg_tree, self.kwarg_tree, self.deps, self.roots, self.watch = arg_tree, kwarg_tree, deps, roots, watch


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
        "_session",
    )

    def __init__(self, session, index, op, kind, arg_tree, kwarg_tree, deps, roots, status, error=None):
        self._session = session
        self.index, self.op, self.kind = index, op, kind
        self.binding = None
        self.arg_tree, self.kwarg_tree = arg_tree, kwarg_tree
        self.dependencies = tuple(sorted(deps))
        self.roots = tuple(sorted(roots))
        self.status, self.error = status, error
        self._value = None
        self.recorded = None

    @property
    def name(self) -> str:
        if self.binding:
            return self.binding
        return getattr(self.op, "__name__", type(self.op).__name__)

    @property
    def output(self) -> OutputRef:
        """An explicit handle to this call's output (needed for scalars and ambiguous aliases)."""
        return OutputRef(self.index)

    @property
    def inputs(self) -> list[InputRef]:
        return [InputRef(i) for i in self.roots]

    @property
    def value(self):
        """The live output; unavailable after ``release()`` or for a loaded experience (use ``replay``)."""
        if self.status != OK:
            raise TraceError(f"call {self.index} ({self.name}) {self.status}: {self.error}")
        if self._session._released:
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
    if depth > _MAX_ARG_DEPTH:
        raise TraceError(f"argument nested more than {_MAX_ARG_DEPTH} levels deep")
    if isinstance(value, _SCALARS):
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


def tensors(value) -> list:
    """The tensors inside a value (lists, tuples, mappings, dataclass fields); ``snapshot`` has bounded its depth."""
    found, stack = [], [value]
    while stack:
        item = stack.pop()
        if is_tensor(item):
            found.append(item)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, (dict, types.MappingProxyType)):
            stack.extend(item.values())
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            stack.extend(getattr(item, f.name) for f in dataclasses.fields(item))
    return found


def _stamp(value):
    """A mutation stamp: tensor version counter, a content hash for inference tensors, container structure."""
    if is_tensor(value):
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
        return ("list", tuple(map(id, value)))
    if isinstance(value, dict):
        return ("dict", tuple((k, id(v)) for k, v in value.items()))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return ("dataclass", tuple(id(getattr(value, f.name)) for f in dataclasses.fields(value)))
    return None


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


def build(node, values: dict, roots: list):
    """Rebuild call arguments from an argument tree, with outputs from ``values`` and roots from ``roots``."""
    kind = type(node)
    if kind is Ref:
        return extract(values[node.call], node.path)
    if kind is Root:
        return roots[node.index]
    if kind is list:
        return [build(v, values, roots) for v in node]
    if kind is tuple:
        return tuple(build(v, values, roots) for v in node)
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
