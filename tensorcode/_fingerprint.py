"""Operation fingerprints: what an experience file promises about the operations it was captured with.

A fingerprint covers the operation's qualified type, its replay capability, its ``configuration()`` (or a
conservative fallback for plain modules) and the names, shapes, dtypes and gradient flags of its tensor state.
It never covers learned values, so an experience loads into updated weights but not into a model whose label
order or shapes changed.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

from ._operations import EXTERNAL, PURE, Operation
from .errors import FingerprintError

_PRIMITIVES = (str, int, float, bool, type(None))


def describe(op: Any) -> dict:
    """A JSON-safe description of ``op``; raises ``FingerprintError`` if its semantics are opaque."""
    if isinstance(op, Operation):
        return {
            "type": "tensorcode.Operation",
            "replay": op.kind,
            "configuration": _json(op.configuration(), "configuration"),
            "state": [],
        }
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(op, torch.nn.Module):
        own = getattr(op, "configuration", None)
        configuration = _json(own(), "configuration") if callable(own) else _module_fallback(op)
        replay = EXTERNAL if getattr(op, "tensorcode_external", False) else PURE
        return {
            "type": type_name(type(op)),
            "replay": replay,
            "configuration": configuration,
            "state": tensor_state(op),
        }
    raise FingerprintError(
        f"{type(op).__qualname__} is not an operation: bind a torch.nn.Module or a callable declared with "
        "tensorcode.operation / tensorcode.external"
    )


def type_name(cls: type) -> str:
    """The stable name a fingerprint records for ``cls``: its own ``FINGERPRINT_TYPE`` (the library's tools and
    their objective are named by registered name, never by module path), else its qualified class name."""
    stable = cls.__dict__.get("FINGERPRINT_TYPE")
    return stable if isinstance(stable, str) else qualified_name(cls)


def qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def tensor_state(module) -> list:
    """``[name, shape, dtype, requires_grad]`` for every parameter and buffer (``None`` flag for buffers)."""
    lazy = torch_lazy_names(module)
    if lazy:
        raise FingerprintError(
            f"{type(module).__qualname__} has uninitialized (lazy) tensors {lazy}; construct or load it with its "
            "sizes first (all parameters must already exist)"
        )
    state = [
        [n, list(p.shape), str(p.dtype).removeprefix("torch."), bool(p.requires_grad)]
        for n, p in module.named_parameters(remove_duplicate=False)
    ]
    state += [
        [n, list(b.shape), str(b.dtype).removeprefix("torch."), None]
        for n, b in module.named_buffers(remove_duplicate=False)
    ]
    return state


def torch_lazy_names(module) -> list[str]:
    is_lazy = sys.modules["torch"].nn.parameter.is_lazy
    tensors = [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]
    return sorted(name for name, tensor in tensors if is_lazy(tensor))


def difference(saved: Any, current: Any, where: str = "") -> str | None:
    """The first place two descriptions differ, as a short path (``configuration.labels[2]``), else None."""
    if type(saved) is not type(current) and not (
        isinstance(saved, (int, float))
        and isinstance(current, (int, float))
        and not isinstance(saved, bool)
        and not isinstance(current, bool)
    ):
        return where or "<root>"
    if isinstance(saved, dict):
        for key in sorted(set(saved) | set(current)):
            if key not in saved or key not in current:
                return f"{where}.{key}" if where else str(key)
            found = difference(saved[key], current[key], f"{where}.{key}" if where else str(key))
            if found:
                return found
        return None
    if isinstance(saved, list):
        if len(saved) != len(current):
            return f"{where} (length {len(saved)} != {len(current)})"
        for i, (a, b) in enumerate(zip(saved, current, strict=True)):
            found = difference(a, b, f"{where}[{i}]")
            if found:
                return found
        return None
    return None if saved == current else (where or "<root>")


def _module_fallback(module) -> dict:
    """Behaviour fields of every submodule: public JSON-safe attributes. Opaque state is refused."""
    torch = sys.modules["torch"]
    described = {}
    for path, sub in module.named_modules(remove_duplicate=False):
        fields = {}
        for attr, value in sorted(vars(sub).items()):
            if attr.startswith("_") or attr == "training":
                continue
            if isinstance(value, torch.dtype):
                fields[attr] = str(value)
            elif inspect.isfunction(value) or inspect.isbuiltin(value):
                if "<" in value.__qualname__:
                    raise FingerprintError(
                        f"module {path or type(module).__qualname__!r} attribute {attr!r} is a lambda or closure; "
                        "give the module a configuration() method describing its behaviour"
                    )
                fields[attr] = f"function:{getattr(value, '__module__', '?')}.{value.__qualname__}"
            else:
                try:
                    fields[attr] = _json(value, attr)
                except FingerprintError as exc:
                    raise FingerprintError(
                        f"module {path or type(module).__qualname__!r} attribute {attr!r} holds opaque behaviour "
                        f"state ({type(value).__qualname__}); give the module a configuration() method"
                    ) from exc
        described[path] = {"type": type_name(type(sub)), "fields": fields}
    return described


def _json(value: Any, where: str, depth: int = 0) -> Any:
    """A JSON-safe copy of ``value`` (tuples become lists); anything else is refused."""
    if depth > 64:
        raise FingerprintError(f"{where} is nested too deeply")
    if isinstance(value, _PRIMITIVES):
        if isinstance(value, float) and value != value:
            raise FingerprintError(f"{where} holds NaN")
        return value
    if isinstance(value, (list, tuple)):
        return [_json(v, where, depth + 1) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise FingerprintError(f"{where} has non-string keys")
        return {k: _json(v, where, depth + 1) for k, v in value.items()}
    raise FingerprintError(f"{where} is not JSON-safe ({type(value).__qualname__})")
