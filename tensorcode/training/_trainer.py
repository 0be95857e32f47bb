"""``Trainer``: replays supervised experience through operations with current parameters and updates them."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import torch

from .._trace import Trace, check_source, evaluate, trace
from .._tracing import fresh
from . import _losses

_BUILTIN_LOSSES = tuple(_losses.BUILTIN.values())


class Trainer:
    """Trains the parameters of bound operations on sessions of supervised experience.

    Build one with ``Trainer.from_ops`` (an explicitly supervised program) or ``Trainer.from_tool`` (a tool's
    declared training operation and objective). An experience (one session) is one minibatch: ``step`` performs
    exactly one optimizer update.
    """

    def __init__(self, *args, **kwargs):
        raise TypeError("construct a Trainer with Trainer.from_ops(operations, ...) or Trainer.from_tool(tool, ...)")

    # -- construction ------------------------------------------------------------------------------------------
    @classmethod
    def from_ops(
        cls, operations: Mapping, *, optimizer=None, lr: float = 0.01, losses: Mapping | None = None
    ) -> Trainer:
        """Bind already-constructed operations; module modes are left as they are."""
        return cls._create(operations, optimizer, lr, losses, tool=None)

    @classmethod
    def from_tool(cls, tool, *, optimizer=None, lr: float = 0.001) -> Trainer:
        """Bind a tool's declared training operation and objective, and apply its training-mode policy."""
        for method in ("training_operations", "training_losses", "prepare_capture", "apply_training_mode"):
            if not callable(getattr(tool, method, None)):
                raise TypeError(f"{type(tool).__qualname__} is not an owned tool (no {method}()); use Trainer.from_ops")
        trainer = cls._create(tool.training_operations(), optimizer, lr, tool.training_losses(), tool=tool)
        tool.apply_training_mode()
        return trainer

    @classmethod
    def _create(cls, operations, optimizer, lr, losses, tool) -> Trainer:
        if not isinstance(operations, Mapping) or not operations:
            raise ValueError("operations must be a nonempty mapping of binding name to operation")
        if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not math.isfinite(lr) or lr <= 0:
            raise ValueError(f"lr must be a positive finite number, got {lr!r}")
        self = object.__new__(cls)
        self._operations = dict(operations)
        self._names, self.parameters = _trainable(self._operations)
        if not self.parameters:
            raise ValueError("the operations have no trainable parameters")
        self._losses = dict(_losses.BUILTIN)
        for name, fn in (losses or {}).items():
            if not isinstance(name, str) or not name or not callable(fn):
                raise ValueError(f"losses must map nonempty names to callables, got {name!r}")
            if name in _losses.BUILTIN:
                raise ValueError(f"loss {name!r} is built in; register custom losses under another name")
            self._losses[name] = fn
        self.optimizer = _optimizer(optimizer, self.parameters, self._names, lr)
        self._plain_zero_grad = type(self.optimizer).zero_grad is torch.optim.Optimizer.zero_grad
        self.tool = tool
        self._steps = 0
        self._progress: dict = {}
        return self

    # -- public state ------------------------------------------------------------------------------------------
    @property
    def operations(self) -> dict:
        return self._operations

    @property
    def steps(self) -> int:
        return self._steps

    @steps.setter
    def steps(self, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"steps must be a nonnegative integer, got {value!r}")
        self._steps = value

    @property
    def progress(self) -> dict:
        return self._progress

    @progress.setter
    def progress(self, value: Mapping) -> None:
        self._progress = _json_mapping(value)

    @property
    def device(self) -> torch.device:
        return self.parameters[0].device

    # -- capture and training ----------------------------------------------------------------------------------
    def capture(self, inputs: Any, targets: Any, *, source) -> Trace:
        """Trace the tool's training operation on ``inputs`` and supervise it with ``targets``; no update."""
        if self.tool is None:
            raise TypeError(
                "an operations trainer has no single input/output objective: trace your program with "
                "tensorcode.trace() and call session.supervise(output, target, source=...)"
            )
        plan = self.tool.prepare_capture(inputs, targets)
        source = check_source(source)
        if isinstance(source, tuple) and len(source) != plan.examples:
            raise ValueError(f"source has {len(source)} entries for {plan.examples} examples; give one per example")
        operation = self._operations[plan.operation]
        with torch.no_grad(), trace() as session:
            output = operation(plan.inputs)
        session.supervise(
            session.calls[-1].output if _is_scalar(output) else output, plan.target, loss=plan.loss, source=source
        )
        return session

    def step(self, session: Trace) -> float:
        """Replay each supervised output (recorded boundaries as constants), average the losses, update once."""
        self._check_session(session)
        return self._update(session)

    def _check_session(self, session: Trace) -> None:
        if not isinstance(session, Trace):
            raise TypeError(f"step needs a tensorcode.Trace, got {type(session).__name__}")
        if not session.supervisions:
            raise ValueError("this experience has no supervision records; call session.supervise(...) first")
        for record in session.supervisions:
            if record.loss not in self._losses:
                raise ValueError(f"unknown loss {record.loss!r}; registered losses: {sorted(self._losses)}")

    def _update(self, session: Trace) -> float:
        records = session.supervisions
        # Restored tensors land on CPU: on another device, inputs, targets and recorded results move there.
        adapt = None if self.parameters[0].device.type == "cpu" else self._adapt
        self._zero_grad()
        count = len(records)
        total = 0.0
        try:
            for record in records:
                output = evaluate(session, [record.output], boundary="recorded", adapt=adapt)[0]
                loss, value = self._loss(session, record, output, adapt)
                (loss / count if count > 1 else loss).backward()
                total += value
            self._check_gradients()
        except BaseException:
            self._zero_grad()
            raise
        self.optimizer.step()
        self._steps += 1
        return total / count

    def fit(self, sessions, *, epochs: int = 1) -> list[float]:
        """One update per session per epoch; returns the loss of each update."""
        if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1:
            raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
        sessions = list(sessions)
        for session in sessions:  # checked once, not once per epoch
            self._check_session(session)
        update = self._update
        return [update(session) for _ in range(epochs) for session in sessions]

    # -- checkpoints -------------------------------------------------------------------------------------------
    def save_checkpoint(self, directory: str | os.PathLike, progress: Mapping | None = None) -> None:
        """Write a resumable checkpoint directory (``training.json`` + one safetensors generation)."""
        from . import _checkpoint

        progress = self._progress if progress is None else _json_mapping(progress)
        _checkpoint.save_checkpoint(self, directory, progress)
        self._progress = progress  # only once the checkpoint that records it exists

    def load_checkpoint(
        self, path: str | os.PathLike, *, max_bytes: int | None = None, max_manifest_bytes: int | None = None
    ) -> dict:
        """Restore a checkpoint (all or nothing) and return its progress mapping.

        The loaded tensors become the memory of the parameters and buffers (the objects stay the same, so the
        optimizer and any hooks keep them); a tensor whose storage is shared, such as a view kept as a buffer,
        is written into instead. A view of a parameter taken before the load keeps the old values.

        ``max_bytes`` and ``max_manifest_bytes`` raise the limits on untrusted files (README, "Loading untrusted
        files"): by default the tensors may be what this trainer's state can need and ``training.json`` 64 MiB.
        """
        from . import _checkpoint

        limits = {} if max_manifest_bytes is None else {"max_manifest_bytes": max_manifest_bytes}
        return _checkpoint.load_checkpoint(self, path, max_bytes=max_bytes, **limits)

    # -- internals ---------------------------------------------------------------------------------------------
    def _adapt(self, value):
        """Move a restored value (CPU tensors) to the parameters' device."""
        return _to_device(value, self.device)

    def _loss(self, session: Trace, record, output, adapt) -> tuple[torch.Tensor, float]:
        """The scalar loss of one supervision record and its value."""
        fn = self._losses[record.loss]
        target = record.target
        if fn not in _BUILTIN_LOSSES:  # built-in losses only read their target; a custom one gets its own copy
            target = fresh(target)
        if adapt is not None:
            target = adapt(target)
        if fn is _losses.cross_entropy:
            # The label order is looked up only for label strings: configuration() can be costly per step.
            labels = _labels(session.calls[record.output.call].op) if _names_labels(target) else None
            loss = fn(output, target, labels)
        else:
            loss = fn(output, target)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ValueError(f"loss {record.loss!r} must return a scalar tensor")
        if loss.dim():
            loss = loss.reshape(())
        if not loss.requires_grad:
            raise ValueError(
                f"loss {record.loss!r} is not differentiable: the supervised output does not depend on trainable "
                "parameters through pure operations (recorded boundaries are constants)"
            )
        value = loss.item()
        if not math.isfinite(value):
            raise ValueError(f"loss {record.loss!r} is not finite ({value}); no parameter was changed")
        return loss, value

    def _zero_grad(self) -> None:
        # The optimizer owns exactly self.parameters (checked when it was bound), so unless its class does
        # something of its own in zero_grad, dropping the gradients here is the same and costs far less than
        # Optimizer.zero_grad (a profiler range and a torch.compile guard on every call).
        if self._plain_zero_grad:
            for parameter in self.parameters:
                parameter.grad = None
        else:
            self.optimizer.zero_grad(set_to_none=True)

    def _check_gradients(self) -> None:
        # NaN and infinity propagate through sums, so a finite total proves every gradient finite in one pass over
        # the gradients, the least any check can read (an elementwise isfinite pass per parameter cost as much as
        # the update). Only a total that overflows from huge finite values needs the elementwise look. Sparse
        # gradients (an embedding with sparse=True) are checked through their stored values.
        grads = [g if not g.is_sparse else g._values() for p in self.parameters if (g := p.grad) is not None]
        if not grads:
            raise ValueError("the loss is disconnected from the trainer's parameters; no parameter was changed")
        if self.parameters[0].device.type == "cpu":
            total = 0.0
            for g in grads:  # reading CPU scalars costs less than stacking them (and is right on any device)
                total += g.sum().item()
        else:  # one transfer from an accelerator, not one per parameter
            device = grads[0].device
            total = torch.stack([g.sum().to(device) for g in grads]).sum().item()
        if not math.isfinite(total) and not all(bool(torch.isfinite(g).all()) for g in grads):
            raise ValueError("non-finite gradients; no parameter was changed")


def _trainable(operations: dict) -> tuple[list[str], list[torch.nn.Parameter]]:
    names, params, seen = [], [], set()
    for op_name, op in operations.items():
        if not isinstance(op, torch.nn.Module):
            continue
        for name, param in op.named_parameters():
            if param.requires_grad and id(param) not in seen:
                seen.add(id(param))
                names.append(f"{op_name}.{name}")
                params.append(param)
    return names, params


def _optimizer(optimizer, parameters, names, lr):
    if optimizer is None:
        return torch.optim.SGD(parameters, lr=lr)
    if not isinstance(optimizer, torch.optim.Optimizer):
        if not callable(optimizer):
            raise TypeError("optimizer must be a torch.optim.Optimizer or a factory taking the parameters")
        optimizer = optimizer(list(parameters))
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError("the optimizer factory must return a torch.optim.Optimizer")
    owned = [p for group in optimizer.param_groups for p in group["params"]]
    ids = [id(p) for p in owned]
    if len(set(ids)) != len(ids):
        raise ValueError("the optimizer holds a parameter twice (a shared parameter must appear once)")
    expected = {id(p): n for p, n in zip(parameters, names, strict=True)}
    missing = sorted(n for i, n in expected.items() if i not in set(ids))
    extra = len(set(ids) - set(expected))
    if missing or extra:
        raise ValueError(
            f"optimizer ownership must match the trainable parameters exactly: missing {missing}, "
            f"{extra} parameter(s) not owned by the operations"
        )
    return optimizer


def _labels(op) -> list | None:
    labels = getattr(op, "labels", None)
    if labels is None and callable(getattr(op, "configuration", None)):
        try:
            configuration = op.configuration()
        except Exception:  # noqa: BLE001 - a label order is optional
            configuration = None
        if isinstance(configuration, dict):
            labels = configuration.get("labels")
    return list(labels) if isinstance(labels, (list, tuple)) else None


def _names_labels(target) -> bool:
    if isinstance(target, str):
        return True
    return isinstance(target, (list, tuple)) and bool(target) and isinstance(target[0], str)


def _to_device(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, list):
        return [_to_device(v, device) for v in value]
    if isinstance(value, tuple):
        return tuple(_to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    return value


def _is_scalar(value) -> bool:
    return isinstance(value, (int, float, bool, str, type(None)))


def _json_mapping(value) -> dict:
    import json

    if not isinstance(value, Mapping):
        raise ValueError(f"progress must be a JSON mapping, got {type(value).__name__}")
    try:
        return json.loads(json.dumps(dict(value), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"progress must be JSON-safe: {exc}") from exc
