"""Training on captured experience: ``Trainer``, ``load_experience``, checkpoints, ``calibration``, and the
resumable training run ``run`` with ``evaluate``.

Importing this package does not load torch; ``Trainer`` (and tensor decoding) load it on first use and need
the ``vec`` extra.
"""

from __future__ import annotations

from ..errors import ExperienceError
from ..experience import load_experience

__all__ = ["ExperienceError", "Report", "RunError", "RunResult", "Trainer", "evaluate", "load_experience", "run"]
_RUN = {"Report", "RunError", "RunResult", "run"}


def __getattr__(name: str):
    if name == "Trainer":
        from ._trainer import Trainer

        return Trainer
    if name in _RUN:
        from . import _run as module

        return getattr(module, name)
    if name == "evaluate":
        from ._evaluation import evaluate

        return evaluate
    raise AttributeError(f"module 'tensorcode.training' has no attribute {name!r}")
