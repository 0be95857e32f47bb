"""The standalone JSON checkpoint format: model and optimizer state only.

``save_checkpoint(path, operations, optimizer=None)`` writes one JSON file with the tensor state of the bound
operations and, optionally, the optimizer state. Tensors are stored as base64 little-endian bytes with their
dtype and shape. ``load_checkpoint`` checks the whole file against the current operations and optimizer before
it changes anything, and rolls every change back if applying fails half-way.

The file has no random state, module modes or training progress, so loading it leaves those as they are. For
resumable training use ``Trainer.save_checkpoint``, which writes a directory with safetensors.

A tensor shared under several names (tied weights, a module bound in two operations) is stored once under its
first name; the other names are alias records. A load refuses sharing that the current operations lack, and
names shared now but stored apart unless their stored values are identical, so tied values cannot drift apart.
Only SGD, Adam and AdamW optimizer state is supported. Neither format uses pickle at all.
"""

from __future__ import annotations

import base64
import json
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._atomic import fsync_directory, write_atomic
from ._checkpoint_state import (
    MANIFEST_MAX_BYTES,
    VERSION,
    ModelState,
    Rollback,
    apply_model,
    check_header,
    check_model,
    check_operations,
    check_optimizer,
    describe_operations,
    dtype_name,
    field,
    operation_mapping,
    optimizer_state,
    read_json,
    state_bytes,
    tensor_meta,
)
from .errors import CheckpointError

__all__ = ["CheckpointError", "load_checkpoint", "save_checkpoint"]

FORMAT = "tensorcode-checkpoint"


def save_checkpoint(path: str | os.PathLike, operations: Mapping, optimizer=None) -> None:
    """Write the operations' tensor state (and ``optimizer``'s) to the JSON file ``path``, atomically."""
    operations = operation_mapping(operations)
    model = ModelState(operations)
    record: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "operations": describe_operations(operations),
        "model": {"tensors": {k: _encode(t) for k, t in model.tensors.items()}, "aliases": model.aliases},
        "optimizer": None,
    }
    if optimizer is not None:
        layout, tensors = optimizer_state(optimizer, model)
        layout["tensors"] = {k: _encode(t) for k, t in tensors.items()}
        record["optimizer"] = layout
    path = Path(path)
    try:
        write_atomic(path, json.dumps(record, allow_nan=False).encode("utf-8"))
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot write checkpoint: {exc}") from exc
    fsync_directory(path.parent)


def load_checkpoint(
    path: str | os.PathLike, operations: Mapping, optimizer=None, *, max_bytes: int | None = None
) -> None:
    """Restore a file written by ``save_checkpoint``: everything is checked, then applied all or nothing.

    Without ``optimizer`` only the model state is restored. Random state, module modes and training progress
    are left as they are: the file does not hold them. The file must be a regular file of at most
    ``max_bytes``; by default what the operations' state can need (six times its size, plus 16 MiB).
    """
    path = Path(path)
    if max_bytes is None:
        max_bytes = max(MANIFEST_MAX_BYTES, 6 * state_bytes(operation_mapping(operations)) + 16 * 2**20)
    restore(read_json(path, max_bytes=max_bytes), path, operations, optimizer)


def restore(record: dict, path: Path, operations: Mapping, optimizer=None) -> None:
    """``load_checkpoint`` of a parsed file (``Trainer.load_checkpoint`` reads it to pick the format)."""
    operations = operation_mapping(operations)
    check_header(record, FORMAT, path)
    check_operations(field(record, "operations", dict, "checkpoint"), operations)
    model = ModelState(operations)
    saved = field(record, "model", dict, "checkpoint")
    stored = field(saved, "tensors", dict, "model")
    copies = check_model(
        stored,
        field(saved, "aliases", dict, "model"),
        {k: _decode(v, f"model tensor {k!r}") for k, v in stored.items()},
        model,
    )
    prepared = None
    if optimizer is not None:
        state = record.get("optimizer")
        if not isinstance(state, dict):
            raise CheckpointError(f"{path} holds no optimizer state; load it without an optimizer")
        stored = field(state, "tensors", dict, "optimizer")
        payload = {k: _decode(v, f"optimizer tensor {k!r}") for k, v in stored.items()}
        prepared = check_optimizer(state, payload, optimizer, model)
        unused = sorted(set(payload) - set(_slot_keys(prepared)))
        if unused:
            raise CheckpointError(f"optimizer tensors {unused} belong to no recorded optimizer slot")
    with Rollback(model.tensors.values(), optimizer if prepared is not None else None):
        apply_model(copies)
        if prepared is not None:
            optimizer.load_state_dict(prepared)


def _slot_keys(prepared: dict) -> list[str]:
    return [f"{i}/{slot}" for i, slots in prepared["state"].items() for slot in slots]


def _encode(tensor) -> dict:
    import torch

    if sys.byteorder != "little":
        raise CheckpointError("JSON checkpoints store little-endian bytes; this host is big-endian")
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return {
        "dtype": dtype_name(tensor.dtype),
        "shape": list(tensor.shape),
        "data": base64.b64encode(raw).decode(),
    }


def _decode(record: Any, where: str):
    import torch

    shape, dtype = tensor_meta(record, where)
    data = record.get("data")
    kind = getattr(torch, dtype)
    size = math.prod(shape) * torch.empty((), dtype=kind).element_size()
    if not isinstance(data, str) or len(data) != 4 * -(-size // 3):  # before decoding: nothing to allocate
        raise CheckpointError(f"{where}: expected {size} bytes of {dtype} data for shape {shape}")
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError as exc:
        raise CheckpointError(f"{where}: data is not base64: {exc}") from exc
    if len(raw) != size:
        raise CheckpointError(f"{where}: expected {size} bytes of {dtype} data for shape {shape}")
    if size == 0:
        return torch.empty(shape, dtype=kind)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(kind).reshape(shape)
