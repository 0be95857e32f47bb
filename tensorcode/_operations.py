"""Declaring plain callables as traced operations.

A module called inside ``trace()`` is captured automatically; a plain Python callable is captured only once
declared, because the library cannot know whether it is pure (safe to recompute) or an external effect (a
remote service, a discrete choice) that must be recorded as a boundary and never re-invoked.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

PURE = "pure"
EXTERNAL = "external"


class Operation:
    """A callable declared to the tracer. Calling it inside ``trace()`` records one call.

    ``kind`` is ``"pure"`` (replay recomputes it) or ``"external"`` (replay never re-invokes it; a recorded
    result can stand in with ``boundary='recorded'``). ``configuration`` is JSON-safe data describing the
    callable's semantics; it is required for closures and stateful callables, whose behaviour the library
    cannot describe on its own.
    """

    def __init__(self, fn: Callable, *, kind: str = PURE, configuration: Any = None, name: str | None = None):
        if kind not in (PURE, EXTERNAL):
            raise ValueError(f"operation kind must be 'pure' or 'external', got {kind!r}")
        if not callable(fn):
            raise TypeError(f"operation needs a callable, got {type(fn).__name__}")
        self.fn = fn
        self.kind = kind
        self.is_async = inspect.iscoroutinefunction(fn)
        self._configuration = configuration
        functools.update_wrapper(self, fn, updated=())
        self.__name__ = name or getattr(fn, "__name__", type(fn).__name__)  # after update_wrapper, which copies fn's

    @property
    def replayable(self) -> bool:
        return self.kind == PURE

    def configuration(self) -> Any:
        """Explicit configuration if declared, else the function's qualified name (closures refused)."""
        if self._configuration is not None:
            return self._configuration
        from .errors import FingerprintError

        fn = self.fn
        if not inspect.isfunction(fn) and not inspect.isbuiltin(fn):
            raise FingerprintError(
                f"operation {self.__name__!r} wraps a stateful callable ({type(fn).__qualname__}); "
                "declare its semantics with operation(..., configuration={...})"
            )
        if getattr(fn, "__closure__", None) or "<locals>" in fn.__qualname__ or fn.__name__ == "<lambda>":
            raise FingerprintError(
                f"operation {self.__name__!r} is a closure or lambda whose captured state cannot be described; "
                "declare its semantics with operation(..., configuration={...})"
            )
        return {"function": f"{fn.__module__}.{fn.__qualname__}"}

    def __call__(self, *args, **kwargs):
        from . import _tracing

        if self.is_async:
            return _tracing.capture_async(self, self.fn, args, kwargs)
        return _tracing.capture(self, self.fn, args, kwargs)

    def __get__(self, instance, owner=None):
        # Declared methods bind like functions; the bound call is still captured as this operation.
        if instance is None:
            return self
        return functools.partial(self.__call__, instance)

    def __repr__(self) -> str:
        return f"<tensorcode operation {self.__name__} ({self.kind})>"


def operation(fn: Callable | None = None, *, configuration: Any = None, name: str | None = None):
    """Declare a pure operation: ``@operation`` or ``operation(fn, configuration={...})``."""
    if fn is None:
        return lambda f: Operation(f, kind=PURE, configuration=configuration, name=name)
    return Operation(fn, kind=PURE, configuration=configuration, name=name)


def external(fn: Callable | None = None, *, configuration: Any = None, name: str | None = None):
    """Declare an external effect (remote service, discrete choice): a recorded, non-differentiable boundary."""
    if fn is None:
        return lambda f: Operation(f, kind=EXTERNAL, configuration=configuration, name=name)
    return Operation(fn, kind=EXTERNAL, configuration=configuration, name=name)
