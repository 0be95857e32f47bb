"""Training on captured experience: ``Trainer``, ``load_experience``, checkpoints, ``calibration``.

Importing this package does not load torch; ``Trainer`` (and tensor decoding) load it on first use and need
the ``vec`` extra.
"""

from __future__ import annotations

from ..errors import ExperienceError
from ..experience import load_experience

__all__ = ["ExperienceError", "Trainer", "load_experience"]


def __getattr__(name: str):
    if name == "Trainer":
        from ._trainer import Trainer

        return Trainer
    raise AttributeError(f"module 'tensorcode.training' has no attribute {name!r}")
