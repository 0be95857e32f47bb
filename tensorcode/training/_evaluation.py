"""``evaluate``: a tool's natural metric and mean loss on held-out experiences, changing nothing."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from .._trace import Trace
from ._run import PrivateRandom, RunError, load_sessions, modules_of


def evaluate(tool: Any, experiences: Iterable) -> dict:
    """Score ``tool`` on ``experiences`` (paths of experience files, or experiences loaded with the tool's
    operations) with the metric of their objective and the tool's training loss.

    Returns ``{"metric": "top1" | "accuracy" | "recall@1" | "mse" | "exact_match", "value": float,
    "loss": float, "examples": int}``: ``value`` averages the metric over the examples (over observed
    outcomes for ``mse``); ``loss`` averages each batch's loss weighted by its examples. The tool is run in
    eval mode on its current device with gradients off; its parameters, modes and the global random state are
    as they were afterwards. Raises ``RunError`` (a ``ValueError``) for an experience of another tool, or for
    experiences of several objectives (evaluate one mode at a time).
    """
    if not callable(getattr(tool, "training_operations", None)) or not isinstance(tool, torch.nn.Module):
        raise RunError(f"tool: expected an owned tool (tensorcode.tools), got {type(tool).__name__}")
    metrics = getattr(tool, "evaluation_metrics", None)
    if not callable(metrics):
        raise RunError(f"tool: {type(tool).__name__} declares no evaluation metric (evaluation_metrics())")
    sessions, _ = load_sessions(experiences, tool.training_operations())
    metrics, losses = metrics(), tool.training_losses()
    objectives = sorted({record.loss for session in sessions for record in session.supervisions})
    if len(objectives) > 1:
        raise RunError(f"experiences: they mix objectives {objectives}; evaluate one mode at a time")
    objective = objectives[0]
    if objective not in metrics:
        raise RunError(f"experiences: {type(tool).__name__} has no metric for objective {objective!r}")

    device = _device(tool)
    modules = modules_of(tool)
    modes = [m.training for m in modules]
    name, total, count, loss_sum, examples = None, 0.0, 0, 0.0, 0
    with PrivateRandom(device), torch.no_grad():
        try:
            tool.eval()
            for session in sessions:
                for record in session.supervisions:
                    output = _replay(session, record, device)
                    target = _to_device(record.target, device)
                    score = metrics[objective](output, target)
                    loss = float(losses[objective](output, target))
                    batch = _examples(output, score)
                    name, total, count = score.metric, total + score.total, count + score.count
                    loss_sum, examples = loss_sum + loss * batch, examples + batch
        finally:
            for module, mode in zip(modules, modes, strict=True):
                module.training = mode
    return {
        "metric": name,
        "value": total / count if count else float("nan"),
        "loss": loss_sum / examples if examples else float("nan"),
        "examples": examples,
    }


def _replay(session: Trace, record, device: torch.device):
    if device.type == "cpu":
        return session.replay(record.output, boundary="recorded")
    # Restored inputs land on CPU; a tool on another device reads them from there.
    inputs = {ref: _to_device(session.value(ref), device) for ref in session.inputs}
    return session.replay(record.output, inputs=inputs, boundary="recorded")


def _examples(output, score) -> int:
    """Examples in a batch: rows of the objective's output (``mse`` counts outcomes, not examples)."""
    first = output if isinstance(output, torch.Tensor) else next(iter(output.values()))
    return int(first.shape[0]) if score.metric == "mse" else score.count


def _device(tool) -> torch.device:
    for tensor in tool.parameters():
        return tensor.device
    return torch.device("cpu")


def _to_device(value, device: torch.device):
    if device.type == "cpu":
        return value
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    return value
