"""Built-in losses: cross-entropy (indices, label strings or probabilities) and shape-exact MSE."""

from __future__ import annotations

import torch
from torch.nn import functional as F

_NO_IGNORE = -(2**63)


def cross_entropy(output: torch.Tensor, target, labels: list | None = None) -> torch.Tensor:
    """Cross-entropy of logits ``(classes,)`` or ``(batch, classes)`` against indices, labels or probabilities."""
    if not isinstance(output, torch.Tensor) or output.dim() not in (1, 2):
        raise ValueError("cross_entropy needs logits of shape (classes,) or (batch, classes)")
    classes = output.shape[-1]
    if (  # the common case, checked in fewer steps: one class index per logit row, already in place
        type(target) is torch.Tensor
        and target.dtype == torch.int64
        and output.dim() == 2
        and target.shape == output.shape[:1]
        and target.device == output.device
    ):
        return _indexed(output, target, classes)
    if isinstance(target, str) or (
        isinstance(target, (list, tuple)) and target and all(isinstance(t, str) for t in target)
    ):
        if labels is None:
            raise ValueError(
                "label-string targets need an operation with a label order (labels or configuration()['labels'])"
            )
        names = [target] if isinstance(target, str) else list(target)
        unknown = [n for n in names if n not in labels]
        if unknown:
            raise ValueError(f"unknown label {unknown[0]!r}; the producing operation's labels are {list(labels)}")
        target = labels.index(target) if isinstance(target, str) else [labels.index(n) for n in names]
    if not isinstance(target, torch.Tensor):
        try:
            target = torch.as_tensor(target)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"cross_entropy target must be indices, label strings or probabilities: {exc}") from exc
    target = target.to(output.device)
    if target.is_floating_point():
        if target.shape != output.shape:
            raise ValueError(
                f"probability targets need the output's shape {tuple(output.shape)}, got {tuple(target.shape)}"
            )
        return F.cross_entropy(
            output.unsqueeze(0) if output.dim() == 1 else output,
            target.unsqueeze(0).to(output.dtype) if output.dim() == 1 else target.to(output.dtype),
        )
    if target.dtype == torch.bool or target.is_complex():
        raise ValueError("cross_entropy targets must be integer class indices")
    target = target.long()
    if output.dim() == 1:
        if target.dim() != 0:
            raise ValueError(f"one logit vector needs one class index, got shape {tuple(target.shape)}")
        output, target = output.unsqueeze(0), target.unsqueeze(0)
    elif target.shape != output.shape[:1]:
        raise ValueError(
            f"{output.shape[0]} logit rows need {output.shape[0]} class indices, got shape {tuple(target.shape)}"
        )
    return _indexed(output, target, classes)


def _indexed(output: torch.Tensor, target: torch.Tensor, classes: int) -> torch.Tensor:
    # The kernel bounds-checks every index; an impossible ignore_index keeps -100 from being skipped silently.
    try:
        return F.cross_entropy(output, target, ignore_index=_NO_IGNORE)
    except IndexError as exc:
        raise ValueError(f"class index out of range for {classes} classes: {target.tolist()}") from exc


def mse(output: torch.Tensor, target, labels: list | None = None) -> torch.Tensor:
    """Mean squared error; the target must have exactly the output's shape."""
    if not isinstance(output, torch.Tensor):
        raise ValueError("mse needs a tensor output")
    try:
        target = torch.as_tensor(target, dtype=output.dtype, device=output.device)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"mse target must be numeric: {exc}") from exc
    if target.shape != output.shape:
        raise ValueError(f"mse needs matching shapes: output {tuple(output.shape)}, target {tuple(target.shape)}")
    return F.mse_loss(output, target)


BUILTIN = {"cross_entropy": cross_entropy, "mse": mse}
