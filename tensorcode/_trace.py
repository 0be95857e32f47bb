"""``Trace``: a record of captured calls, their roots and supervision, that can be saved and replayed."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import itertools
import os
import threading
import types
from collections.abc import Callable, Mapping
from typing import Any

from . import _tracing
from ._experience_writer import write_experience
from ._operations import EXTERNAL, PURE, Operation
from ._refs import InputRef, OutputRef
from ._tracing import CANCELLED, FAILED, OK, Call, Example, Ref, Root, Supervision
from .errors import TraceError

_SCALARS = _tracing.SCALARS
_CONTAINERS = (list, tuple, dict, types.MappingProxyType)
_identities = itertools.count(1)  # next() is atomic under the GIL: every trace gets its own


def trace() -> Trace:
    """Open a capture session: ``with trace() as session: ...``."""
    return Trace()


class Trace:
    """Captured calls (``calls``), external roots (``inputs``) and supervision records (``supervisions``).

    Use it as a context manager to capture; after the block closes it can still be inspected, supervised,
    saved and replayed, but no new call can be captured into it.
    """

    def __init__(self):
        self._id = next(_identities)
        self.calls: list[Call] = []
        self.supervisions: list[Supervision] = []
        self._roots: list = []
        self._by_id: dict[int, tuple[int, tuple]] = {}
        self._producers: dict[int, set] = {}
        self._stamps: dict[int, list[tuple[Any, tuple]]] = {}
        self._pending: set = set()  # coroutines of async calls not yet finished
        self._plans: dict = {}  # replay plans by (targets, boundary), for the current number of calls
        self._closed = False
        self._released = False
        self._entered = False
        self._token = None
        self._outer = None  # the context's state before this trace was entered
        self._lock = threading.Lock()  # a context copied into another thread (asyncio.to_thread) records too

    # -- context manager ---------------------------------------------------------------------------------------
    def __enter__(self) -> Trace:
        if self._entered:
            raise TraceError("a trace can be entered only once; open a new one with trace()")
        self._entered = True
        if not _tracing.hooked:
            _tracing.install_module_hook()
        self._outer = _tracing.STATE.get()
        self._token = _tracing.STATE.set((self, 0))
        return self

    def __exit__(self, *exc_info) -> None:
        if self._token is None:
            raise TraceError("this trace was never entered; use it as `with trace() as session: ...`")
        self._closed = True
        try:
            _tracing.STATE.reset(self._token)
        except RuntimeError as exc:  # the token was used: this context already left the trace
            raise TraceError("this trace has already been exited") from exc
        except ValueError as exc:  # the token belongs to another context: another task or thread entered it
            state = _tracing.STATE.get()
            if state is not None and state[0] is self:  # a copy of the entering context: leave the trace here
                _tracing.STATE.set(self._outer)
            raise TraceError(
                "a trace must be exited in the context (thread and task) that entered it; it is closed now, and "
                "contexts still inside it cannot start new captures"
            ) from exc

    @property
    def trace_id(self) -> int:
        """This trace's identity, carried by the ``InputRef`` and ``OutputRef`` it hands out."""
        return self._id

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def released(self) -> bool:
        return self._released

    @property
    def inputs(self) -> list[InputRef]:
        """The external roots, in the order they were first used."""
        return [InputRef(i, self._id) for i in range(len(self._roots))]

    def value(self, ref: InputRef | OutputRef):
        """A copy of the snapshotted value of a root, or the live value of a captured output."""
        if isinstance(ref, InputRef):
            self._check_root(ref)
            return _tracing.fresh(self._roots[ref.index])
        ref = self.ref(ref)
        return _tracing.extract(self.calls[ref.call].value, ref.path)

    # -- references and supervision ----------------------------------------------------------------------------
    def ref(self, output) -> OutputRef:
        """An ``OutputRef`` for a captured output found by identity (or a validated copy of a given ref)."""
        self._check_pending("reference outputs")
        if isinstance(output, OutputRef):
            self._check_output_ref(output)
            return output if output.trace_id is not None else OutputRef(output.call, output.path, self._id)
        if self._released:
            raise TraceError(
                "this trace has been released: identity lookup is unavailable; use a preserved OutputRef, "
                "session.calls[i].output or supervision.output"
            )
        if isinstance(output, _SCALARS):
            raise TraceError(
                f"a {type(output).__name__} cannot be referenced by identity; use session.calls[index].output"
            )
        hit = self._by_id.get(id(output))
        if hit is None:
            raise TraceError("this object is not a captured output of this trace")
        producers = self._producers.get(id(output))
        if producers and len(producers) > 1:
            raise TraceError(
                f"ambiguous alias: the object is an output of calls {sorted(producers)}; "
                "use session.calls[index].output to choose one"
            )
        return OutputRef(hit[0], hit[1], self._id)

    def supervise(self, output_or_ref, target, *, loss: str = "cross_entropy", source: str = "human") -> Supervision:
        """Record explicit feedback: ``target`` (snapshotted) for a captured output, with its provenance."""
        source = check_source(source)
        if not isinstance(loss, str) or not loss:
            raise ValueError(f"loss must be a nonempty loss name, got {loss!r}")
        ref = self.ref(output_or_ref)
        if not self._released and self._links(target):
            raise ValueError("target must be explicit feedback, not a captured output of this trace")
        record = Supervision(output=ref, target=_tracing.snapshot(target), loss=loss, source=source)
        self.supervisions.append(record)
        return record

    def example(self, target) -> Example:
        """The dependency closure of ``target`` (call indices, ascending) and its external roots."""
        ref = self.ref(target)
        closure = self._closure([ref.call])
        roots = sorted({r for i in closure for r in self.calls[i].roots})
        return Example(target=ref, calls=tuple(closure), roots=tuple(InputRef(r, self._id) for r in roots))

    # -- replay ------------------------------------------------------------------------------------------------
    def replay(self, target, *, inputs: Mapping | None = None, boundary: str = "error"):
        """Recompute ``target`` from the roots with current parameters.

        External effects are refused unless ``boundary='recorded'``, which uses their detached recorded
        results. ``inputs`` maps ``InputRef`` to replacement values; a replacement cannot cross a recorded
        boundary.
        """
        ref = self.ref(target)
        return evaluate(self, [ref], inputs=inputs, boundary=boundary)[0]

    def _plan(self, targets: tuple, boundary: str) -> tuple[list[int], list[tuple], list[int]]:
        """The closure of ``targets`` (checked) as replay steps, and the roots read; cached, as training replays
        the same supervised outputs every epoch. Recorded calls never change, so only new calls invalidate it.

        A step is ``(index, call, external, values to drop once it ran)``: an intermediate value is dropped
        after its last consumer in the closure, unless it is a target."""
        if self._plans.get("calls") != len(self.calls):  # a new call may change any closure: start afresh
            self._plans = {"calls": len(self.calls)}
        key = (targets, boundary)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        closure = self._closure(list(targets))
        for i in closure:
            call = self.calls[i]
            if call.status != OK:
                raise TraceError(f"call {i} ({call.name}) {call.status} and cannot be replayed: {call.error}")
            if call.kind == EXTERNAL and boundary == "error":
                raise TraceError(
                    f"replay reaches external effect call {i} ({call.name}); pass boundary='recorded' to use its "
                    "recorded result instead of invoking it"
                )
        last = {}
        for i in closure:
            for d in self.calls[i].dependencies:
                last[d] = i
        keep = set(targets)
        drops: dict[int, list[int]] = {}
        for d, i in last.items():
            if d not in keep:
                drops.setdefault(i, []).append(d)
        steps = [(i, self.calls[i], self.calls[i].kind == EXTERNAL, drops.get(i, ())) for i in closure]
        used = sorted({r for i in closure for r in self.calls[i].roots})
        self._plans[key] = plan = (closure, steps, used)
        return plan

    # -- release and save --------------------------------------------------------------------------------------
    def validate(self, *, persist: bool = False) -> None:
        """Check the whole trace: no pending async work, no mutated intermediate, and (to persist) no failure."""
        self._check_pending("release or save")
        if persist:
            for call in self.calls:
                if call.status != OK:
                    raise TraceError(
                        f"call {call.index} ({call.name}) {call.status} and cannot be persisted as valid "
                        f"experience: {call.error}"
                    )
        for call_index, stamps in self._stamps.items():
            if any(_tracing.changed(value, stamp) for value, stamp in stamps):
                raise TraceError(
                    f"output of call {call_index} ({self.calls[call_index].name}) was mutated after capture"
                )

    def release(self) -> None:
        """Drop live results, autograd graphs, identity lookups and stamps after validating the whole trace.

        Roots, the DAG, supervision and recorded external results remain, so replay from roots still works.
        """
        self.validate()
        for call in self.calls:
            call._value = _tracing.RELEASED
        self._by_id.clear()
        self._producers.clear()
        self._stamps.clear()
        self._released = True

    def save(
        self,
        path: str | os.PathLike,
        *,
        operations: Mapping,
        codecs: Mapping | None = None,
        release: bool = False,
        durable: bool = True,
    ) -> None:
        """Validate, then atomically write versioned JSON; with ``release=True`` release after persisting.

        ``durable=False`` skips the fsync, for a caller saving many files that makes them durable together
        afterwards: every reader still sees the whole file or none, but a machine crash may lose it.
        """
        write_experience(self, self._roots, path, operations=operations, codecs=codecs, durable=durable)
        if release:
            self.release()

    # -- capture engine hooks ----------------------------------------------------------------------------------
    def _begin(self, op, args: tuple, kwargs: dict) -> tuple:
        """The pending call: ``(op, args, kwargs, arg_tree, kwarg_tree, deps, roots, watch)`` (a plain tuple, as
        this runs for every captured call), with ``args``/``kwargs`` as the call receives them."""
        if self._closed:
            raise TraceError("this trace is closed: a task holding its context cannot start new captures")
        deps: set = set()
        roots: set = set()
        watch: list = []
        walk, add_root, by_id, tensor_types = self._walk, self._add_root, self._by_id, _tracing.TENSOR_TYPES
        stored = self._roots
        arg_tree = []
        with self._lock:
            for value in args:  # one node per argument: an unlinked argument is one root
                if (
                    type(value) in tensor_types
                    and id(value) not in by_id
                    and not value.requires_grad
                    and not value.is_inference()
                ):  # the common case, inline: an external tensor with no graph to detach from
                    index = len(stored)
                    stored.append(value.clone())
                    roots.add(index)
                    watch.append((value, ("version", value._version)))
                    arg_tree.append(Root(index))
                    continue
                tree, real, linked = walk(value, deps, roots, watch, 0)
                arg_tree.append(tree if linked else add_root(real, roots, watch))
                if real is not value:
                    args = (*args[: len(arg_tree) - 1], real, *args[len(arg_tree) :])
            kwarg_tree = {}
            if kwargs:
                kwargs = dict(kwargs)
                for key, value in kwargs.items():
                    tree, real, linked = walk(value, deps, roots, watch, 0)
                    kwarg_tree[key] = tree if linked else add_root(real, roots, watch)
                    kwargs[key] = real
        return (op, args, kwargs, tuple(arg_tree), kwarg_tree, deps, roots, watch)

    def _add_root(self, value, roots, watch) -> Root:
        index = len(self._roots)
        roots.add(index)
        if type(value) in _tracing.TENSOR_TYPES:
            # As snapshot() does, without its dispatch: a tensor that needs no grad has no graph to detach from.
            self._roots.append(value.detach().clone() if value.requires_grad else value.clone())
            watch.append((value, _tracing.stamp(value)))
            return Root(index)
        self._roots.append(_tracing.snapshot(value))
        if type(value) not in _tracing.LEAF_TYPES:  # a container root (context): its structure and tensors too
            _tracing.watch(value, watch)
        return Root(index)

    def _walk(self, value, deps, roots, watch, depth):
        """``(tree, value for the call, linked)``; an unlinked subtree becomes one root at its top."""
        hit = self._by_id.get(id(value))
        if hit is not None:  # registered outputs are alive, so their ids are unambiguous
            deps.add(hit[0])
            self._check_stamps(hit[0])
            if type(value) in _tracing.TENSOR_TYPES:
                watch.append((value, _tracing.stamp(value)))
            return Ref(*hit), value, True
        cls = type(value)
        if cls in _tracing.LEAF_TYPES or cls in _tracing.TENSOR_TYPES:
            return None, value, False
        if cls is OutputRef:
            self._check_output_ref(value)
            deps.add(value.call)
            self._check_stamps(value.call)
            return Ref(value.call, value.path), _tracing.extract(self.calls[value.call]._value, value.path), True
        if cls is InputRef:
            self._check_root(value)
            roots.add(value.index)
            return Root(value.index), self._roots[value.index], True
        if depth > _tracing.MAX_ARG_DEPTH:
            raise TraceError(f"argument nested more than {_tracing.MAX_ARG_DEPTH} levels deep")
        if (
            isinstance(value, _CONTAINERS)
            and not hasattr(value, "_fields")
            or (dataclasses.is_dataclass(value) and not isinstance(value, type))
        ):
            walked = [(k, self._walk(v, deps, roots, watch, depth + 1)) for k, v in _items(value)]
            if any(w[2] for _, w in walked):
                mark = _tracing.stamp(value)
                if mark is not None:  # a lasting change to this container's structure changes the call's input
                    watch.append((value, mark))
                tree = {k: (w[0] if w[2] else self._add_root(w[1], roots, watch)) for k, w in walked}
                real = {k: w[1] for k, w in walked}
                return _rebuild(value, tree), _rebuild(value, real), True
        return None, value, False

    def _finish(self, pending: tuple, result):
        for value, stamp in pending[7]:
            if stamp[0] == "version" and value._version == stamp[1]:  # the common case, without a call
                continue
            if _tracing.changed(value, stamp):
                with self._lock:
                    self._record(pending, FAILED, "an input was mutated while the call ran")
                raise TraceError(
                    f"an input of {_name(pending[0])} was mutated while the call ran; the capture is rejected"
                )
        with self._lock:
            call = self._record(pending, OK)
            call._value = result
            if call.kind == EXTERNAL:
                call.recorded = _detached(result)
            key = id(result)
            if type(result) in _tracing.TENSOR_TYPES and key not in self._by_id and not result.is_inference():
                self._by_id[key] = (call.index, ())  # the common case, inline: a fresh tensor
                self._stamps[call.index] = [(result, ("version", result._version))]
            else:
                self._register(result, call.index, (), 0)
        return result

    def _fail(self, pending: tuple, exc: BaseException) -> None:
        status = CANCELLED if isinstance(exc, asyncio.CancelledError) else FAILED
        with self._lock:
            self._record(pending, status, f"{type(exc).__name__}: {exc}")

    def _record(self, pending: tuple, status, error=None) -> Call:
        op, _, _, arg_tree, kwarg_tree, deps, roots, _ = pending
        if isinstance(op, Operation):
            kind = op.kind
        else:  # a module: pure unless marked ``tensorcode_external = True`` (a remote model behind a module facade)
            # Read the instance and class dictionaries: getattr would go through Module.__getattr__, which raises
            # (slowly) for a missing attribute.
            marked = op.__dict__.get("tensorcode_external", getattr(type(op), "tensorcode_external", False))
            kind = EXTERNAL if marked else PURE
        call = Call(self, len(self.calls), op, kind, arg_tree, kwarg_tree, deps, roots, status, error)
        self.calls.append(call)
        return call

    def _register(self, value, call: int, path: tuple, depth: int) -> None:
        cls = type(value)
        if cls in _tracing.LEAF_TYPES or depth > _tracing.MAX_ARG_DEPTH:
            return
        key = id(value)
        previous = self._by_id.get(key)
        self._by_id[key] = (call, path)
        if previous is not None and previous[0] != call:
            self._producers.setdefault(key, {previous[0]}).add(call)
        stamp = _tracing.stamp(value)
        if stamp is not None:
            self._stamps.setdefault(call, []).append((value, stamp))
        if cls in _tracing.TENSOR_TYPES:
            return
        if (
            isinstance(value, _CONTAINERS)
            and not hasattr(value, "_fields")
            or (dataclasses.is_dataclass(value) and not isinstance(value, type))
        ):
            for k, v in _items(value):
                self._register(v, call, (*path, k), depth + 1)

    # -- checks ------------------------------------------------------------------------------------------------
    def _check_pending(self, action: str) -> None:
        if not self._pending:
            return
        # A call cancelled (or closed) before it started never ran and never will: it is not pending.
        self._pending = {c for c in self._pending if inspect.getcoroutinestate(c) != inspect.CORO_CLOSED}
        if self._pending:
            raise TraceError(
                f"{len(self._pending)} captured call(s) are still pending; await them before you {action}"
            )

    def _check_root(self, ref: InputRef) -> None:
        if ref.trace_id is not None and ref.trace_id != self._id:
            raise TraceError(f"{ref} belongs to another trace: a reference is valid only in the trace that made it")
        if not 0 <= ref.index < len(self._roots):
            raise TraceError(f"{ref} is not an input of this trace")

    def _check_output_ref(self, ref: OutputRef) -> None:
        if ref.trace_id is not None and ref.trace_id != self._id:
            raise TraceError(f"{ref} belongs to another trace: a reference is valid only in the trace that made it")
        if not 0 <= ref.call < len(self.calls):
            raise TraceError(f"{ref} does not name a call of this trace")
        call = self.calls[ref.call]
        if call.status != OK:
            raise TraceError(f"call {ref.call} ({call.name}) {call.status}: {call.error}")

    def _check_stamps(self, call_index: int) -> None:
        for value, stamp in self._stamps.get(call_index, ()):
            if _tracing.changed(value, stamp):
                raise TraceError(
                    f"output of call {call_index} ({self.calls[call_index].name}) was mutated before reuse"
                )

    def _links(self, value, depth: int = 0) -> bool:
        if isinstance(value, OutputRef):
            return True
        if isinstance(value, _SCALARS) or depth > _tracing.MAX_ARG_DEPTH:
            return False
        if id(value) in self._by_id:
            return True
        if isinstance(value, _CONTAINERS) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
            return any(self._links(v, depth + 1) for _, v in _items(value))
        return False

    def _closure(self, targets: list[int]) -> list[int]:
        seen: set = set()
        stack = list(targets)
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            stack.extend(self.calls[i].dependencies)
        return sorted(seen)

    def _root_closure(self, index: int) -> set:
        return {r for i in self._closure([index]) for r in self.calls[i].roots}

    def __repr__(self) -> str:
        return f"<Trace calls={len(self.calls)} inputs={len(self._roots)} supervisions={len(self.supervisions)}>"


def evaluate(
    session: Trace,
    refs: list[OutputRef],
    *,
    inputs: Mapping | None = None,
    boundary: str = "error",
    adapt: Callable | None = None,
) -> list:
    """Replay several outputs of ``session`` at once (``Trace.replay`` for one); the trainer's entry point.

    ``adapt`` maps each stored value read (a root, a recorded boundary result) before use, e.g. to a device.
    Operations receive copies of stored values, never the stored record itself.
    """
    if boundary not in ("error", "recorded"):
        raise ValueError(f"boundary must be 'error' or 'recorded', got {boundary!r}")
    session._check_pending("replay")
    for ref in refs:
        session._check_output_ref(ref)
    calls = session.calls
    targets = [r.call for r in refs]
    closure, steps, used = session._plan(tuple(targets), boundary)
    roots = session._roots
    if inputs:
        roots = list(roots)
        replaced = set()
        for key, value in inputs.items():
            if not isinstance(key, InputRef):
                raise TypeError(f"replacement inputs are keyed by InputRef, got {key!r}")
            session._check_root(key)
            roots[key.index] = value
            replaced.add(key.index)
        for i in closure:
            if calls[i].kind == EXTERNAL:
                crossing = replaced & session._root_closure(i)
                if crossing:
                    raise TraceError(
                        f"replacement input {sorted(crossing)[0]} cannot cross recorded boundary call {i} "
                        f"({calls[i].name}): its recorded result was produced from the original input"
                    )
    if adapt is not None:
        roots = {r: adapt(roots[r]) for r in used}  # only the roots this replay reads
    values: dict[int, Any] = {}
    build = _tracing.build
    token = _tracing.STATE.set(_tracing.SUPPRESSED)
    try:
        for i, call, external, drops in steps:
            if external:
                recorded = _tracing.fresh(call.recorded)
                values[i] = adapt(recorded) if adapt is not None else recorded
            else:
                args = build(call.arg_tree, values, roots)
                kwargs = build(call.kwarg_tree, values, roots) if call.kwarg_tree else {}
                values[i] = _invoke(call.op, args, kwargs)
            for d in drops:
                del values[d]
    finally:
        _tracing.STATE.reset(token)
    return [_tracing.extract(values[r.call], r.path) for r in refs]


def restored_trace(roots: list) -> Trace:
    """A closed, released trace holding ``roots``: the experience loader's constructor.

    The loader appends its calls (``Call(session, ...)``) to ``session.calls`` and its records to
    ``session.supervisions``; references into it come from ``session.calls[i].output``.
    """
    session = Trace()
    session._closed = session._entered = session._released = True
    session._roots = roots
    return session


def _invoke(op, args, kwargs):
    if isinstance(op, Operation):
        if op.is_async:
            return _run_async(op, op.fn(*args, **kwargs))
        return op.fn(*args, **kwargs)
    return op(*args, **kwargs)


def _run_async(op, coroutine):
    """Replay (and so training) is synchronous: run a pure async operation to completion on its own loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    coroutine.close()
    raise TraceError(
        f"async operation {op.__name__} cannot be replayed inside a running event loop; replay or train from "
        "synchronous code (e.g. in a worker thread via asyncio.to_thread)"
    )


def _items(value):
    if isinstance(value, (dict, types.MappingProxyType)):
        return list(value.items())
    if isinstance(value, (list, tuple)):
        return list(enumerate(value))
    return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]


def _rebuild(original, items: dict):
    if isinstance(original, list):
        return [items[i] for i in range(len(original))]
    if isinstance(original, tuple):
        return tuple(items[i] for i in range(len(original)))
    if isinstance(original, (dict, types.MappingProxyType)):
        return dict(items)
    return _tracing.copy_dataclass(original, items)


def _detached(value):
    """A recorded external result: tensors detached (gradients never cross a boundary), containers copied."""
    return _tracing.snapshot(value)


def _name(op) -> str:
    return getattr(op, "__name__", type(op).__name__)


def check_source(source) -> str | tuple:
    """A validated provenance: a nonempty string, or a nonempty tuple of them (one per example of a batch)."""
    if isinstance(source, str):
        if not source.strip():
            raise ValueError("source must be a nonempty provenance string, e.g. 'human:review-42'")
        return source
    if isinstance(source, (list, tuple)) and source and all(isinstance(s, str) and s.strip() for s in source):
        return tuple(source)
    raise ValueError(f"source must be a nonempty provenance string (or one per example for a batch), got {source!r}")
