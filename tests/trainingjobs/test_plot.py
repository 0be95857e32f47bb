"""The loss curve's geometry: linear for a loss that moves little, a log scale once it falls a hundredfold."""

from __future__ import annotations

from trainingjobs.plot import HEIGHT, PAD_BOTTOM, PAD_TOP, loss_curve


def _ys(curve) -> list[float]:
    return [float(point.split(",")[1]) for point in curve.points.split()]


def test_a_loss_that_falls_a_hundredfold_is_drawn_on_a_log_scale_with_a_gridline_per_power_of_ten() -> None:
    curve = loss_curve([(step, 0.5 * 10 ** (-step / 50)) for step in range(1, 201)], 200)  # 0.477 down to 5e-5

    assert curve.log
    ys = _ys(curve)
    assert ys[0] == PAD_TOP and ys[-1] == HEIGHT - PAD_BOTTOM
    # Each step down by the same factor moves the line by the same height: straight on a log scale.
    gaps = {round(b - a, 1) for a, b in zip(ys, ys[1:], strict=False)}
    assert max(gaps) - min(gaps) <= 0.2
    labels = {text: (y, grid) for y, text, grid in curve.ticks}
    assert labels["0.477"] == (PAD_TOP, False) and labels["5e-5"] == (HEIGHT - PAD_BOTTOM, False)
    # 0.0001 would sit 12 px above 5e-5's label, so it is left out rather than drawn over it.
    assert {text for text, (_, grid) in labels.items() if grid} == {"0.1", "0.01", "0.001"}


def test_a_loss_that_falls_less_than_a_hundredfold_or_reaches_zero_stays_linear() -> None:
    gentle = loss_curve([(step, 1.0 - step / 200) for step in range(1, 101)], 100)  # 0.995 down to 0.5
    assert not gentle.log
    assert [(y, text) for y, text, _ in gentle.ticks] == [(PAD_TOP, "0.995"), (HEIGHT - PAD_BOTTOM, "0.5")]
    ys = _ys(gentle)
    assert abs((ys[1] - ys[0]) - (ys[-1] - ys[-2])) <= 0.2  # evenly spaced: linear

    to_zero = loss_curve([(1, 0.7), (2, 0.001), (3, 0.0)], 3)
    assert not to_zero.log and [text for _, text, _ in to_zero.ticks] == ["0.7", "0"]

    flat = loss_curve([(1, 0.25), (2, 0.25)], 2)
    assert [text for _, text, _ in flat.ticks] == ["0.25"]  # one label, not two on top of each other
