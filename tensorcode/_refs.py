"""Public reference types: explicit handles to a trace's external inputs and captured outputs."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class InputRef:
    """An external root of a trace: a value snapshotted when a captured call first used it.

    ``index`` is the root's position in ``session.inputs``; pass it as a key of ``replay(inputs=...)``
    to replace that root. A reference handed out by a trace carries that trace's identity (``trace_id``) and
    every other trace refuses it with a ``TraceError``; one built by hand (``InputRef(0)``) names root 0 of
    whichever trace it is given to. Equality and hashing compare positions only.
    """

    index: int
    trace_id: int | None = field(default=None, compare=False)

    def __repr__(self) -> str:
        bound = "" if self.trace_id is None else f", trace_id={self.trace_id}"
        return f"InputRef(index={self.index}{bound})"


@dataclass(frozen=True, slots=True)
class OutputRef:
    """A captured output: call ``call`` of the session, optionally an element reached by ``path``.

    Passing an ``OutputRef`` as an argument of a captured operation is an explicit dependency: the operation
    receives the live value (or its replayed value) in its place. A reference handed out by a trace carries that
    trace's identity (``trace_id``) and every other trace refuses it with a ``TraceError``; one built by hand
    (``OutputRef(2)``) names call 2 of whichever trace it is given to. Equality and hashing compare positions only.
    """

    call: int
    path: tuple = ()
    trace_id: int | None = field(default=None, compare=False)

    def __repr__(self) -> str:
        bound = "" if self.trace_id is None else f", trace_id={self.trace_id}"
        return f"OutputRef(call={self.call}, path={self.path!r}{bound})"

    def __getitem__(self, key) -> OutputRef:
        """A reference to an element of this output (``ref[0]``, ``ref["logits"]``)."""
        return OutputRef(self.call, (*self.path, key), self.trace_id)
