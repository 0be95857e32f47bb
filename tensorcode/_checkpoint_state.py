"""Model and optimizer state shared by both checkpoint formats: capture, validation, application, rollback.

``tensorcode.checkpoint`` (one JSON file) and ``Trainer`` checkpoint directories store the same model and
optimizer records; this module describes them, checks a stored record against the current operations and
optimizer without changing anything, and applies it under a ``Rollback``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._files import read_regular
from .errors import CheckpointError

VERSION = 1
MANIFEST_MAX_BYTES = 64 * 2**20
MAX_DEPTH = 100
MIN_CONTAINERS = 100_000
BYTES_PER_CONTAINER = 16
OPTIMIZERS = ("torch.optim.sgd.SGD", "torch.optim.adam.Adam", "torch.optim.adamw.AdamW")


class ModelState:
    """The persistent tensors of the bound operations, keyed ``<operation>/<state_dict name>``.

    ``tensors`` holds each distinct tensor once, under its first name; ``aliases`` maps every other name of a
    shared tensor to that first name; ``owners[id(tensor)]`` lists all names of a tensor, first name first.
    """

    def __init__(self, operations: Mapping):
        import torch

        self.tensors: dict[str, Any] = {}
        self.aliases: dict[str, str] = {}
        self.owners: dict[int, list[str]] = {}
        for op_name, op in operations.items():
            if not isinstance(op, torch.nn.Module):
                continue
            for name, value in op.state_dict(keep_vars=True).items():
                key = f"{op_name}/{name}"
                if not isinstance(value, torch.Tensor):
                    raise CheckpointError(
                        f"{key} is {type(value).__name__}, not a tensor; extra state is unsupported"
                    )
                names = self.owners.setdefault(id(value), [])
                if names:
                    self.aliases[key] = names[0]
                else:
                    self.tensors[key] = value
                names.append(key)


def describe_operations(operations: Mapping) -> dict:
    from ._fingerprint import describe
    from .errors import FingerprintError

    described = {}
    for name, op in operations.items():
        try:
            described[name] = describe(op)
        except FingerprintError as exc:
            raise CheckpointError(f"operation {name!r}: {exc}") from exc
    return described


def check_operations(saved: dict, operations: Mapping) -> None:
    """Refuse a checkpoint of other bindings or of another configuration, naming the first difference."""
    from ._fingerprint import difference

    missing, unexpected = sorted(set(saved) - set(operations)), sorted(set(operations) - set(saved))
    if missing or unexpected:
        raise CheckpointError(
            f"the checkpoint was saved with operations {sorted(saved)}: missing bindings {missing}, "
            f"unexpected bindings {unexpected}"
        )
    current = describe_operations(operations)
    for name in operations:
        where = difference(saved[name], current[name])
        if where is not None:
            raise CheckpointError(
                f"operation {name!r} has another configuration than the checkpoint (first difference at "
                f"{where}); rebuild it as it was when the checkpoint was saved"
            )


def check_model(meta: dict, aliases: dict, payload: Mapping, model: ModelState) -> list[tuple[Any, Any]]:
    """Validate saved model state against ``model``; returns ``(current tensor, saved tensor)`` pairs to copy.

    Names tied in the checkpoint must be tied now. Names tied now but stored separately are accepted only if
    their stored values are identical, bit for bit.
    """
    saved_names = set(meta) | set(aliases)
    current_names = set(model.tensors) | set(model.aliases)
    missing, unexpected = sorted(current_names - saved_names), sorted(saved_names - current_names)
    if missing or unexpected:
        raise CheckpointError(f"model state keys differ: missing {missing}, unexpected {unexpected}")
    for name, first in sorted(aliases.items()):
        if not isinstance(first, str) or first not in meta:
            raise CheckpointError(f"alias record {name} -> {first!r} names no stored tensor")
        if model.aliases.get(name, name) != model.aliases.get(first, first):
            raise CheckpointError(
                f"shared parameter aliases differ: the checkpoint ties {name} to {first}, which are separate "
                "tensors now"
            )
    stored = {}
    for key in meta:
        shape, dtype = tensor_meta(meta[key], f"model tensor {key}")
        check_tensor(payload[key], shape, dtype, f"model tensor {key}")
        stored[key] = payload[key]
    for name, first in sorted(model.aliases.items()):
        a, b = stored[aliases.get(name, name)], stored[aliases.get(first, first)]
        if a is not b and not _identical(a, b):
            raise CheckpointError(
                f"shared parameter aliases hold different values in the checkpoint: {name} and {first} "
                "are one tensor now"
            )
    copies = []
    for key, tensor in model.tensors.items():
        value = stored[aliases.get(key, key)]
        if list(value.shape) != list(tensor.shape) or value.dtype != tensor.dtype:
            raise CheckpointError(
                f"model tensor {key} is {list(value.shape)} {dtype_name(value.dtype)} in the checkpoint but "
                f"{list(tensor.shape)} {dtype_name(tensor.dtype)} now"
            )
        copies.append((tensor, value))
    return copies


def _identical(a, b) -> bool:
    """Bitwise equality (NaN payloads included), as ``torch.equal`` would miss NaN == NaN."""
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(
        a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)
    )


def apply_model(copies: list[tuple[Any, Any]]) -> None:
    import torch

    with torch.no_grad():
        for tensor, value in copies:
            tensor.copy_(value)


def adoptable(copies: list[tuple[Any, Any]]) -> tuple[list, list]:
    """Split ``(current, loaded)`` pairs into those whose loaded tensor can become the current tensor's memory
    and those that must be copied into it.

    A current tensor that alone owns all of its storage can take the loaded tensor's memory (``.data``): no
    copy, and undoing it needs no snapshot. A view, or storage shared with another model tensor, is written
    into, so that whatever shares it sees the new values as it always has.
    """
    import torch

    owners: dict[int, int] = {}
    for tensor, _ in copies:
        if tensor.numel():
            pointer = tensor.untyped_storage().data_ptr()
            owners[pointer] = owners.get(pointer, 0) + 1
    adopt, copy_in, values = [], [], set()
    for tensor, value in copies:
        storage = tensor.untyped_storage()
        alone = (
            type(tensor) in (torch.Tensor, torch.nn.Parameter)
            and type(value) is torch.Tensor
            and tensor.numel() > 0
            and owners[storage.data_ptr()] == 1
            and tensor.storage_offset() == 0
            and storage.nbytes() == tensor.numel() * tensor.element_size()
            and id(value) not in values
        )
        values.add(id(value))
        (adopt if alone else copy_in).append((tensor, value))
    return adopt, copy_in


def adopt_model(pairs: list[tuple[Any, Any]]) -> None:
    """Give each current tensor its loaded tensor's memory (moved to the current tensor's device)."""
    import torch

    with torch.no_grad():
        for tensor, value in pairs:
            tensor.data = value.to(tensor.device)


def memory_snapshot(pairs: list[tuple[Any, Any]]):
    """A ``restore()`` giving the current tensors of ``pairs`` back the memory they hold now (no copy)."""
    before = [(tensor, tensor.data) for tensor, _ in pairs]

    def restore() -> None:
        for tensor, data in before:
            tensor.data = data

    return restore


def optimizer_state(optimizer, model: ModelState) -> tuple[dict, dict]:
    """The JSON layout of ``optimizer`` and its tensor slots keyed ``<parameter index>/<slot>``."""
    import torch

    kind = qualified_name(type(optimizer))
    if kind not in OPTIMIZERS:
        raise CheckpointError(f"optimizer {kind} is not supported by checkpoints; use SGD, Adam or AdamW")
    params = [p for group in optimizer.param_groups for p in group["params"]]
    index = {id(p): i for i, p in enumerate(params)}
    if len(index) != len(params):
        raise CheckpointError("the optimizer holds a parameter twice; a shared parameter must appear once")
    owners = []
    for i, p in enumerate(params):
        if id(p) not in model.owners:
            raise CheckpointError(f"optimizer parameter {i} {list(p.shape)} is not owned by the operations")
        owners.append(model.owners[id(p)])
    groups = []
    for g, group in enumerate(optimizer.param_groups):
        hyper = {k: _hyperparameter(v, f"param group {g} {k}") for k, v in group.items() if k != "params"}
        groups.append({**hyper, "params": [index[id(p)] for p in group["params"]]})
    state, steps, tensors = {}, {}, {}
    for p in params:
        slots = optimizer.state.get(p)
        if not slots:
            continue
        i = index[id(p)]
        entry = {}
        for slot, value in slots.items():
            if not isinstance(value, torch.Tensor):
                raise CheckpointError(f"optimizer slot {i}/{slot} is {type(value).__name__}, not a tensor")
            tensors[f"{i}/{slot}"] = value
            entry[slot] = {"shape": list(value.shape), "dtype": dtype_name(value.dtype)}
            if slot == "step":
                steps[str(i)] = float(value)
        state[str(i)] = entry
    return {
        "type": kind,
        "param_groups": groups,
        "parameters": owners,
        "state": state,
        "steps": steps,
    }, tensors


def check_optimizer(record: dict, payload: Mapping, optimizer, model: ModelState) -> dict:
    """Validate a saved optimizer layout and its tensors; returns a state dict for ``load_state_dict``."""
    kind, saved_kind = qualified_name(type(optimizer)), field(record, "type", str, "optimizer")
    if saved_kind != kind:
        raise CheckpointError(
            f"the checkpoint holds {saved_kind} state but the optimizer is {kind}; reconstruct the same "
            "optimizer type and parameter groups"
        )
    if kind not in OPTIMIZERS:
        raise CheckpointError(f"optimizer {kind} is not supported by checkpoints; use SGD, Adam or AdamW")
    params = [p for group in optimizer.param_groups for p in group["params"]]
    owners = [model.owners.get(id(p)) for p in params]
    if None in owners:
        i = owners.index(None)
        raise CheckpointError(f"optimizer parameter {i} is not owned by the operations")
    saved_owners = field(record, "parameters", list, "optimizer")
    if len(saved_owners) != len(owners):
        raise CheckpointError(
            f"the checkpoint's optimizer owns {len(saved_owners)} parameters, the current one {len(owners)}"
        )
    for i, (saved, current) in enumerate(zip(saved_owners, owners, strict=True)):
        if saved != current:
            raise CheckpointError(
                f"optimizer parameter {i} belongs to {saved} in the checkpoint but to {current} now"
            )
    groups = _check_groups(field(record, "param_groups", list, "optimizer"), optimizer.param_groups)
    group_of = {i: group for group in groups for i in group["params"]}
    steps = field(record, "steps", dict, "optimizer")
    state = {}
    for key, slots in field(record, "state", dict, "optimizer").items():
        if not re.fullmatch(r"0|[1-9][0-9]*", key) or int(key) >= len(params) or not isinstance(slots, dict):
            raise CheckpointError(f"optimizer state names no parameter: {key!r}")
        i, param = int(key), params[int(key)]
        where = f"optimizer state of parameter {i} ({owners[i][0]})"
        expected = _expected_slots(kind, group_of[i])
        if set(slots) != expected:
            raise CheckpointError(f"{where} has slots {sorted(slots)}, expected {sorted(expected)}")
        state[i] = {}
        for slot, meta in slots.items():
            shape, dtype = tensor_meta(meta, f"{where} slot {slot}")
            value = payload.get(f"{i}/{slot}")
            if value is None:
                raise CheckpointError(f"{where}: tensor {i}/{slot} is missing")
            check_tensor(value, shape, dtype, f"{where} slot {slot}")
            if slot == "step":
                _check_step(value, shape, dtype, steps.get(key), where)
            elif shape != list(param.shape) or dtype != dtype_name(param.dtype):
                raise CheckpointError(
                    f"{where} slot {slot} is {shape} {dtype}, but the parameter is {list(param.shape)} "
                    f"{dtype_name(param.dtype)}"
                )
            state[i][slot] = value
    unexpected = sorted(set(steps) - {str(i) for i, slots in state.items() if "step" in slots})
    if unexpected:
        raise CheckpointError(f"optimizer step counters {unexpected} belong to no saved state")
    return {"state": state, "param_groups": groups}


class Rollback:
    """Snapshot model tensors, the optimizer and any ``add``-ed state; undo every change if the block fails.

    An exception becomes a ``CheckpointError`` naming it; an interrupt (``KeyboardInterrupt``, ``SystemExit``)
    is re-raised as it is, after the rollback.
    """

    def __init__(self, tensors, optimizer=None):
        self._tensors = list(tensors)
        self._optimizer = optimizer
        self._restores: list = []

    def add(self, restore) -> None:
        """Register ``restore()``, called (latest first) if the block fails."""
        self._restores.append(restore)

    def __enter__(self) -> Rollback:
        self._saved = [t.detach().clone() for t in self._tensors]
        if self._optimizer is not None:
            snapshot = self._optimizer.state_dict()
            # Tensors are shared, not copied: load_state_dict replaces state without writing into old tensors.
            self._state = {
                "state": {k: dict(v) for k, v in snapshot["state"].items()},
                "param_groups": copy.deepcopy(snapshot["param_groups"]),
            }
        return self

    def __exit__(self, kind, exc, traceback) -> bool:
        if exc is None:
            return False
        restores = [
            *reversed(self._restores),
            lambda: apply_model(list(zip(self._tensors, self._saved, strict=True))),
        ]
        if self._optimizer is not None:
            restores.append(lambda: self._optimizer.load_state_dict(self._state))
        failures = []
        for restore in restores:  # each one independently: a failing restore must not skip the others
            try:
                restore()
            except Exception as failure:  # noqa: BLE001 - reported below, after every restore ran
                failures.append(failure)
        if failures:
            raise CheckpointError(
                f"applying the checkpoint failed ({type(exc).__name__}: {exc}) and so did rolling back "
                f"({type(failures[0]).__name__}: {failures[0]}); the state is inconsistent"
            ) from exc
        if isinstance(exc, Exception) and not isinstance(exc, CheckpointError):
            raise CheckpointError(
                f"applying the checkpoint failed half-way ({type(exc).__name__}: {exc}); every change was "
                "rolled back"
            ) from exc
        return False


# -- small shared helpers ------------------------------------------------------------------------------------
def field(mapping: dict, key: str, kind: type, where: str) -> Any:
    value = mapping.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CheckpointError(f"{where}: field {key!r} must be {kind.__name__}, got {type(value).__name__}")
    return value


def read_json(path: Path, *, max_bytes: int = MANIFEST_MAX_BYTES, follow: bool = True) -> dict:
    """A checkpoint's JSON object, read as untrusted: a regular file (no symbolic link unless ``follow``) of at
    most ``max_bytes``, at most one array or object per 16 bytes (100,000 in any file), nested at most
    ``MAX_DEPTH`` deep."""

    def constant(name):
        raise ValueError(f"non-standard JSON constant {name}")

    data = read_regular(path, max_bytes=max_bytes, error=CheckpointError, what="checkpoint", follow=follow)
    containers = data.count(b"[") + data.count(b"{")
    if containers > max(MIN_CONTAINERS, len(data) // BYTES_PER_CONTAINER):
        raise CheckpointError(f"{path}: cannot read checkpoint JSON: it holds {containers:,} arrays and objects")
    try:
        record = json.loads(data.decode("utf-8"), parse_constant=constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{path}: cannot read checkpoint JSON: {exc}") from exc
    except (RecursionError, MemoryError) as exc:
        raise CheckpointError(f"{path}: cannot read checkpoint JSON: nested too deeply or too large") from exc
    if not isinstance(record, dict):
        raise CheckpointError(f"{path}: a checkpoint is a JSON object")
    if _too_deep(record):
        raise CheckpointError(f"{path}: cannot read checkpoint JSON: nested more than {MAX_DEPTH} levels deep")
    return record


def _too_deep(value) -> bool:
    """Whether parsed JSON nests deeper than ``MAX_DEPTH``, found iteratively (recursion is what it guards)."""
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return False


def state_bytes(operations: Mapping) -> int:
    """Bytes of the operations' persistent tensors, each shared tensor once: what bounds a checkpoint's size."""
    import torch

    seen, total = set(), 0
    for op in operations.values():
        if isinstance(op, torch.nn.Module):
            for value in op.state_dict(keep_vars=True).values():
                if isinstance(value, torch.Tensor) and id(value) not in seen:
                    seen.add(id(value))
                    total += value.numel() * value.element_size()
    return total


def check_header(record: dict, expected: str, path: Path) -> None:
    if record.get("format") != expected or record.get("version") != VERSION:
        raise CheckpointError(
            f"{path}: not a {expected} version {VERSION} file (format {record.get('format')!r}, "
            f"version {record.get('version')!r})"
        )


def qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tensor_meta(meta: Any, where: str) -> tuple[list[int], str]:
    """``(shape, dtype name)`` of a ``{"shape", "dtype"}`` record, checked for sanity."""
    import torch

    shape = meta.get("shape") if isinstance(meta, dict) else None
    dtype = meta.get("dtype") if isinstance(meta, dict) else None
    if (
        not isinstance(shape, list)
        or len(shape) > 32
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
    ):
        raise CheckpointError(f"{where}: shape must be a list of at most 32 nonnegative integers, got {shape!r:.200}")
    if math.prod(max(n, 1) for n in shape) > 2**60:  # torch refuses it even with a zero dimension
        raise CheckpointError(f"{where}: shape {shape} has more elements than any tensor can hold")
    if not isinstance(dtype, str) or not isinstance(getattr(torch, dtype, None), torch.dtype):
        raise CheckpointError(f"{where}: unknown dtype {dtype!r:.80}")
    return shape, dtype


def check_tensor(value, shape: list[int], dtype: str, where: str) -> None:
    if list(value.shape) != shape or dtype_name(value.dtype) != dtype:
        raise CheckpointError(
            f"{where}: the stored tensor is {list(value.shape)} {dtype_name(value.dtype)}, but the record "
            f"says {shape} {dtype}"
        )


def sha256(data) -> str:
    return hashlib.sha256(data).hexdigest()


def operation_mapping(operations: Mapping) -> dict:
    if (
        not isinstance(operations, Mapping)
        or not operations
        or not all(isinstance(k, str) for k in operations)
    ):
        raise CheckpointError("operations must be a nonempty mapping of binding name to operation")
    return dict(operations)


def _hyperparameter(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)) and math.isfinite(value):
        return value
    if isinstance(value, (tuple, list)) and all(_hyperparameter(v, where) is v for v in value):
        return list(value)
    raise CheckpointError(
        f"{where} is {value!r}; checkpoints store finite numbers, booleans, strings and None"
    )


def _check_groups(saved: list, groups: list) -> list[dict]:
    """Saved hyperparameters over the current group layout, in the current value types (tuples stay)."""
    if len(saved) != len(groups):
        raise CheckpointError(
            f"the checkpoint has {len(saved)} optimizer param groups, the optimizer {len(groups)}"
        )
    offset, restored = 0, []
    for g, (record, group) in enumerate(zip(saved, groups, strict=True)):
        where = f"optimizer param group {g}"
        layout = list(range(offset, offset + len(group["params"])))
        offset += len(layout)
        if not isinstance(record, dict) or record.get("params") != layout:
            params = record.get("params") if isinstance(record, dict) else record
            raise CheckpointError(f"{where} holds parameters {params} in the checkpoint but {layout} now")
        missing = sorted(set(group) - set(record))
        unexpected = sorted(set(record) - set(group))
        if missing or unexpected:
            raise CheckpointError(f"{where}: missing hyperparameters {missing}, unexpected {unexpected}")
        values = {}
        for key, current in group.items():
            if key == "params":
                continue
            value = _hyperparameter(record[key], f"{where} {key}")
            if not _same_kind(value, current):
                raise CheckpointError(f"{where} {key} is {value!r} in the checkpoint, not like {current!r}")
            values[key] = tuple(value) if isinstance(current, tuple) else value
        restored.append({**values, "params": layout})
    return restored


def _same_kind(saved: Any, current: Any) -> bool:
    if isinstance(current, bool) or isinstance(saved, bool):
        return isinstance(saved, bool) and isinstance(current, bool)
    if isinstance(current, (int, float)):
        return isinstance(saved, (int, float))
    if isinstance(current, (tuple, list)):
        return isinstance(saved, list) and len(saved) == len(current)
    return saved is None or isinstance(saved, str) or current is None


def _expected_slots(kind: str, group: dict) -> set[str]:
    if kind == "torch.optim.sgd.SGD":
        return {"momentum_buffer"}
    return {"step", "exp_avg", "exp_avg_sq"} | ({"max_exp_avg_sq"} if group.get("amsgrad") else set())


def _check_step(value, shape: list[int], dtype: str, recorded: Any, where: str) -> None:
    if shape != [] or dtype not in ("float32", "float64"):
        raise CheckpointError(f"{where}: step counter must be a float scalar, got {shape} {dtype}")
    step = float(value)
    if not math.isfinite(step) or step < 0 or step != int(step):
        raise CheckpointError(f"{where}: step counter {step} is not a nonnegative whole number")
    if isinstance(recorded, bool) or not isinstance(recorded, (int, float)) or float(recorded) != step:
        raise CheckpointError(f"{where}: step counter {step} does not match the recorded step {recorded!r}")
