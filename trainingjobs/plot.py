"""The loss curve as SVG coordinates, computed on the server (no charting library in the browser)."""

from __future__ import annotations

import math
from dataclasses import dataclass

WIDTH, HEIGHT = 640, 200
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 56, 12, 10, 24  # the left pad holds labels such as "3.36e-6"
MAX_POINTS = 400  # a longer history is averaged into this many points
# A loss that falls by this factor or more is drawn on a log scale: on a linear one, a loss going from 0.6 to
# 0.0001 is a cliff and then a flat line, and what happens after the first epoch cannot be seen.
LOG_SPAN = 100.0


@dataclass(frozen=True)
class LossCurve:
    points: str  # the polyline's "x,y x,y ..."
    first_step: int
    last_step: int
    low: float
    high: float
    latest: float
    count: int
    log: bool = False
    ticks: tuple[tuple[float, str, bool], ...] = ()  # the y axis's (y, label, gridline): ends, and powers of ten
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
    log = low > 0 and high / low >= LOG_SPAN
    scale = math.log10 if log else float
    top, bottom = scale(high), scale(low)
    span_x = max(1, last - first)
    span_y = (top - bottom) or 1.0
    inner_w = WIDTH - PAD_LEFT - PAD_RIGHT
    inner_h = HEIGHT - PAD_TOP - PAD_BOTTOM

    def y(loss: float) -> float:
        return PAD_TOP + inner_h * (top - scale(loss)) / span_y

    coordinates = " ".join(f"{PAD_LEFT + inner_w * (step - first) / span_x:.1f},{y(loss):.1f}"
                           for step, loss in history)
    ticks = [(y(high), _label(high), False)] + ([(y(low), _label(low), False)] if low < high else [])
    if log:  # each power of ten strictly between the ends, with a gridline, where it leaves room for the labels
        for power in range(math.floor(bottom) + 1, math.ceil(top)):
            at = y(10.0**power)
            if all(abs(at - other) >= 14 for other, _, _ in ticks):
                ticks.append((at, _label(10.0**power), True))
    return LossCurve(coordinates, first, last, low, high, losses[-1], len(history), log=log,
                     ticks=tuple((round(at, 1), text, grid) for at, text, grid in ticks))


def _label(value: float) -> str:
    """A loss for an axis: three significant digits, in exponent form only when it is small or large ("3.36e-6")."""
    return f"{value:.3g}".replace("e-0", "e-").replace("e+0", "e+")


def _bucketed(history: list[tuple[int, float]]) -> list[tuple[int, float]]:
    if len(history) <= MAX_POINTS:
        return history
    size = math.ceil(len(history) / MAX_POINTS)
    buckets = [history[i : i + size] for i in range(0, len(history), size)]
    return [(bucket[-1][0], sum(loss for _, loss in bucket) / len(bucket)) for bucket in buckets]
