"""Public reference types: explicit handles to a trace's external inputs and captured outputs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class InputRef:
    """An external root of a trace: a value snapshotted when a captured call first used it.

    ``index`` is the root's position in ``session.inputs``; pass it as a key of ``replay(inputs=...)``
    to replace that root.
    """

    index: int


@dataclass(frozen=True, slots=True)
class OutputRef:
    """A captured output: call ``call`` of the session, optionally an element reached by ``path``.

    Passing an ``OutputRef`` as an argument of a captured operation is an explicit dependency: the operation
    receives the live value (or its replayed value) in its place.
    """

    call: int
    path: tuple = ()

    def __getitem__(self, key) -> OutputRef:
        """A reference to an element of this output (``ref[0]``, ``ref["logits"]``)."""
        return OutputRef(self.call, (*self.path, key))
