"""Tools by registered name: the one list of tools and their modes, and building, loading and predicting by name.

Importing this module does not import torch; ``get`` (and what calls it) imports the tool's module lazily.
Stored files (``tool.json``, fingerprints, checkpoints) name tools only by these names, so modules can move
without making saved artifacts unloadable.
"""

from __future__ import annotations

import importlib
import os
from types import MappingProxyType
from typing import Any

from ._artifacts import read_manifest

# name -> (module inside tensorcode.tools, class name)
REGISTERED = {
    "chatbot": ("chatbot", "Chatbot"),
    "decision": ("decision", "Decision"),
    "investigator": ("investigator", "Investigator"),
    "planner": ("planner", "Planner"),
    "scene": ("scene", "Scene"),
}

MODES = MappingProxyType(
    {
        "chatbot": ("reply",),
        "decision": ("rank",),
        "investigator": ("rank", "verification", "proposal", "retrieval"),
        "planner": ("outcomes", "proposal"),
        "scene": ("rank", "language"),
    }
)


def names() -> tuple[str, ...]:
    """The registered tool names, sorted."""
    return tuple(sorted(REGISTERED))


def check_name(name: Any, field: str = "tool") -> str:
    if not isinstance(name, str) or name not in REGISTERED:
        raise ValueError(f"{field}: unknown tool {name!r}; registered tools: {', '.join(names())}")
    return name


def check_mode(name: str, mode: Any, field: str = "mode") -> str:
    modes = MODES[check_name(name)]
    if not isinstance(mode, str) or mode not in modes:
        raise ValueError(f"{field}: unknown mode {mode!r} for {name!r}; valid modes: {', '.join(modes)}")
    return mode


def get(name: str) -> type:
    """The tool class registered as ``name`` (imports torch)."""
    module, attribute = REGISTERED[check_name(name)]
    return getattr(importlib.import_module(f"{__package__}.{module}"), attribute)


def create(name: str, mode: str | None = None, **configuration: Any):
    """A fresh tool registered as ``name``, configured for ``mode`` (default: its first mode)."""
    check_name(name)
    mode = MODES[name][0] if mode is None else check_mode(name, mode)
    cls = get(name)
    return cls(**cls.configuration_for_mode(mode, configuration))


def load_pretrained(directory: str | os.PathLike, *, device: Any = "cpu"):
    """The tool saved in ``directory`` by ``save_pretrained``, built by its registered name, in eval mode.

    Raises ``ToolError`` (a ``ValueError``) for an unknown name, a manifest of another format or version, or
    any other bad artifact.
    """
    from ..errors import ToolError

    manifest = read_manifest(directory)
    if manifest.tool not in REGISTERED:
        raise ToolError(
            f"{directory}: tool: unknown tool {manifest.tool!r}; registered tools: {', '.join(names())}"
        )
    return get(manifest.tool).from_pretrained(directory, device=device)


def predict(tool: Any, mode: str, inputs_list: list) -> list[dict]:
    """One receipt per input of ``inputs_list`` (payloads without the mode envelope), from one batched call."""
    name = check_name(getattr(tool, "NAME", None), "tool")
    check_mode(name, mode)
    if not isinstance(inputs_list, (list, tuple)):
        raise ValueError(f"inputs_list: expected a list of inputs, got {type(inputs_list).__name__}")
    if not inputs_list:
        return []
    if name == "chatbot":
        # respond() answers one message; read the whole request first so limits apply to it as a batch.
        from ._validation import read_inputs

        texts = read_inputs(name, {"mode": mode, "inputs": list(inputs_list)}, tool.configuration()).items
        return [tool.respond(text) for text in texts]
    return list(tool({"mode": mode, "inputs": list(inputs_list)}))
