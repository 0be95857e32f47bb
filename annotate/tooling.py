"""The only module of the app that touches `tensorcode`: tools by name, predictions in a trace, targets checked.

Torch-free functions (`check_tool_mode`, `validate_inputs`, `validate_target`) run in the web process;
`load_version`, `predict` and the experience helpers import torch and run only in Celery workers.
"""

from __future__ import annotations

from tensorcode import tools as _tools

# The contract's registry (`tensorcode.tools.names/MODES/...`) is landing on main; until it does these
# names are the contract's, so the web process can validate a project's tool and mode.
TOOL_MODES: dict[str, tuple[str, ...]] = getattr(_tools, "MODES", None) or {
    "investigator": ("rank", "verification", "proposal", "retrieval"),
    "decision": ("rank",),
    "planner": ("outcomes", "proposal"),
    "scene": ("rank", "language"),
    "chatbot": ("reply",),
}


def tool_names() -> tuple[str, ...]:
    """Registered tool names."""
    return tuple(TOOL_MODES)


def check_tool_mode(tool: str, mode: str) -> None:
    """Raise `ValueError` naming the valid choices when `tool` is not registered or has no mode `mode`."""
    if tool not in TOOL_MODES:
        raise ValueError(f"tool: unknown tool {tool!r}; registered tools: {', '.join(TOOL_MODES)}")
    if mode not in TOOL_MODES[tool]:
        raise ValueError(f"mode: {tool} has no mode {mode!r}; its modes: {', '.join(TOOL_MODES[tool])}")
