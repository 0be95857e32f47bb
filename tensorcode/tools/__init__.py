"""Owned tools by registered name: small PyTorch models that reviewers can teach.

``names()`` lists the tools ("chatbot", "decision", "investigator", "planner", "scene"), ``MODES`` their modes;
``create``, ``load_pretrained`` and ``predict`` build, load and run them by name; ``validate_inputs`` and
``validate_target`` check one reviewed example exactly as ``Trainer.capture`` would, without a model.
Importing this package does not import torch; building or loading a tool needs the ``tools`` extra (torch,
safetensors). The classes are ``get(name)`` or their modules (``tensorcode.tools.scene.Scene``); ``Tool`` is
their base class.
"""

from __future__ import annotations

from typing import Any

from ..errors import StaleIndexError, ToolError
from ._configuration import Limits
from ._protocol import CapturePlan, TrainableTool
from ._registry import MODES, create, get, load_pretrained, names, predict
from ._validation import validate_inputs, validate_target

__all__ = [
    "MODES", "CapturePlan", "Limits", "StaleIndexError", "Tool", "ToolError", "TrainableTool", "create", "get",
    "load_pretrained", "names", "predict", "validate_inputs", "validate_target",
]


def __getattr__(name: str) -> Any:
    # Tool is a torch.nn.Module: imported on first use so that importing the registry stays torch-free.
    if name == "Tool":
        from ._base import Tool

        return Tool
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
