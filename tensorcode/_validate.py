"""``tensorcode validate``: load a file as strictly as training would, against the tool it names.

An experience file or checkpoint of a registered tool names that tool and its configuration in its
fingerprint, so it can be checked completely (bindings, state shapes, tensors, DAG, checksums) by building that
tool fresh, without the trained model. ``tool_dir`` checks compatibility with one saved tool instead.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import _inspect as inspect

_OPTIMIZERS = {"SGD": "sgd", "Adam": "adam", "AdamW": "adamw"}


def validate(path: Path, *, tool_dir: Path | None = None) -> str:
    """A one-line description of the valid file at ``path``; ``ValueError`` with the reason otherwise."""
    try:
        return _validate(path, tool_dir)
    except _ToolDirError:
        raise
    except ValueError as exc:
        if str(path) in str(exc):
            raise
        raise ValueError(f"{path}: {exc}") from exc


class _ToolDirError(ValueError):
    """``--tool`` could not be loaded: the message is about it, not about the file being checked."""


def _validate(path: Path, tool_dir: Path | None) -> str:
    kind = inspect.kind_of(path)
    if kind == "tool":
        from . import tools

        directory = path if path.is_dir() else path.parent
        tool = tools.load_pretrained(directory)
        return f"{directory}: tool {tool.NAME} ({inspect.fingerprint(tool.NAME, tool.configuration())})"
    summary = inspect.summarize(path)
    bindings = summary["bindings"] if kind == "experience" else summary["operations"]
    tool = _tool(tool_dir, bindings, path)
    if kind == "experience":
        from .experience import load_experience

        session = load_experience(path, operations=tool.training_operations())
        return (
            f"{path}: experience for {tool.NAME}, {len(session.calls)} call(s), "
            f"{len(session.supervisions)} supervision(s)"
        )
    return _checkpoint(Path(summary["path"]), tool, summary)


def _tool(tool_dir: Path | None, bindings: list[dict], path: Path):
    from . import tools

    if tool_dir is not None:
        try:
            return tools.load_pretrained(tool_dir)
        except ValueError as exc:
            message = " ".join(str(exc).split())
            raise _ToolDirError(f"--tool {tool_dir}: {message.removeprefix(f'{tool_dir}: ')}") from exc
    named = [b for b in bindings if b.get("tool")]
    if len(bindings) != 1 or not named:
        names = ", ".join(repr(b["name"]) for b in bindings) or "none"
        raise ValueError(
            f"{path}: its operations ({names}) are not one registered tool; only a tool's files can be checked "
            "without the program that wrote them"
        )
    binding = named[0]
    tools.get(binding["tool"])  # an unknown name fails here, naming the registered tools
    configuration = binding["configuration"]
    if not isinstance(configuration, dict):
        raise ValueError(f"{path}: the fingerprint of {binding['name']!r} holds no tool configuration")
    return tools.get(binding["tool"])(**configuration)


def _checkpoint(directory: Path, tool, summary: dict) -> str:
    import torch

    from .training import Trainer

    saved = str(summary["optimizer"]["type"]).rsplit(".", 1)[-1]
    if saved not in _OPTIMIZERS:
        raise ValueError(f"{directory}: optimizer {summary['optimizer']['type']!r} is not SGD, Adam or AdamW")
    factory = getattr(torch.optim, saved)
    trainer = Trainer.from_tool(tool, optimizer=lambda ps: factory(ps, lr=0.001))
    trainer.load_checkpoint(directory)
    progress = json.loads((directory / "training.json").read_text("utf-8")).get("progress")
    run = progress.get("run") if isinstance(progress, dict) else None
    detail = ""
    if run is not None:
        if not isinstance(run, dict):
            raise ValueError(f"{directory}: the training run cursor is malformed (not a JSON object)")
        losses, step = run.get("losses"), run.get("step")
        if not isinstance(losses, list) or not isinstance(step, int) or len(losses) != step:
            raise ValueError(f"{directory}: the training run cursor is malformed (step {step!r})")
        detail = f", run at step {step} of {summary['run']['total']}"
    return f"{directory}: checkpoint of {tool.NAME}, {trainer.steps} step(s){detail}"
