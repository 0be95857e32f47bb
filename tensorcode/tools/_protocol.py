"""What ``Trainer.from_tool`` needs of a tool, importable without torch.

``CapturePlan`` is what a tool's ``prepare_capture`` returns; ``TrainableTool`` is the structural type of
anything ``Trainer.from_tool`` accepts (every ``Tool`` satisfies it; a hand-written ``torch.nn.Module`` with these
four methods does too).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class CapturePlan:
    """What ``Trainer.capture`` records: call ``operation`` with ``inputs``, supervise with ``target``/``loss``.

    ``examples`` is the number of reviewed examples in the call, so one provenance string per example can be
    checked against it.
    """

    operation: str
    inputs: Any
    target: Any
    loss: str
    examples: int


@runtime_checkable
class TrainableTool(Protocol):
    """The protocol ``Trainer.from_tool`` relies on; nothing else of the tool is used."""

    def training_operations(self) -> Mapping[str, Any]:
        """Stable binding name -> the ``torch.nn.Module`` traced as the training operation."""
        ...

    def training_losses(self) -> Mapping[str, Callable[[Any, Any], Any]]:
        """Loss name -> ``fn(output, target) -> scalar tensor``."""
        ...

    def prepare_capture(self, inputs: Any, targets: Any) -> CapturePlan:
        """Validate inputs and targets (``ValueError`` naming the field) before anything is recorded."""
        ...

    def apply_training_mode(self) -> None:
        """Put the tool's modules into the modes training needs."""
        ...
