"""The loss curve as SVG coordinates, computed on the server (no charting library in the browser)."""

from __future__ import annotations

import math
from dataclasses import dataclass

WIDTH, HEIGHT = 640, 200
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 48, 12, 10, 24
MAX_POINTS = 400  # a longer history is averaged into this many points


@dataclass(frozen=True)
class LossCurve:
    points: str  # the polyline's "x,y x,y ..."
    first_step: int
    last_step: int
    low: float
    high: float
    latest: float
    count: int
    width: int = WIDTH
    height: int = HEIGHT
    left: int = PAD_LEFT
    right: int = WIDTH - PAD_RIGHT
    top: int = PAD_TOP
    bottom: int = HEIGHT - PAD_BOTTOM


def loss_curve(history: list[tuple[int, float]], total_steps: int = 0) -> LossCurve | None:
    """Scale (step, loss) pairs into the plot box; the x axis spans the whole job when `total_steps` is known."""
    history = [(step, loss) for step, loss in history if math.isfinite(loss)]
    if not history:
        return None
    history = _bucketed(history)
    steps = [step for step, _ in history]
    losses = [loss for _, loss in history]
    first, last = min(steps), max(max(steps), total_steps)
    low, high = min(losses), max(losses)
    span_x = max(1, last - first)
    span_y = (high - low) or 1.0
    inner_w = WIDTH - PAD_LEFT - PAD_RIGHT
    inner_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    coordinates = " ".join(
        f"{PAD_LEFT + inner_w * (step - first) / span_x:.1f},{PAD_TOP + inner_h * (high - loss) / span_y:.1f}"
        for step, loss in history
    )
    return LossCurve(coordinates, first, last, low, high, losses[-1], len(history))


def _bucketed(history: list[tuple[int, float]]) -> list[tuple[int, float]]:
    if len(history) <= MAX_POINTS:
        return history
    size = math.ceil(len(history) / MAX_POINTS)
    buckets = [history[i : i + size] for i in range(0, len(history), size)]
    return [(bucket[-1][0], sum(loss for _, loss in bucket) / len(bucket)) for bucket in buckets]
