from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from tensorcode.training.calibration import TemperatureCalibration, evaluate_calibration, fit_threshold

torch.set_num_threads(1)


def _synthetic(
    examples: int, *, scale: float, seed: int, classes: int = 4
) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels drawn from softmax(true logits); returned logits are the true ones times ``scale``."""
    generator = torch.Generator().manual_seed(seed)
    true_logits = 1.5 * torch.randn(examples, classes, generator=generator)  # (examples, classes)
    labels = torch.multinomial(torch.softmax(true_logits, dim=1), 1, generator=generator).squeeze(1)
    return scale * true_logits, labels


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.clone() for name, value in module.state_dict().items()}


def _assert_same_state(module: torch.nn.Module, snapshot: dict[str, torch.Tensor]) -> None:
    state = module.state_dict()
    assert state.keys() == snapshot.keys()
    for name, value in snapshot.items():
        assert torch.equal(state[name], value), name


@pytest.fixture
def fitted() -> TemperatureCalibration:
    calibration = TemperatureCalibration()
    logits, labels = _synthetic(200, scale=3.0, seed=0)
    calibration.fit(logits, labels)
    return calibration


def test_spec_example_runs_as_written() -> None:
    held_out_logits, labels = _synthetic(300, scale=3.0, seed=1)
    test_logits, test_labels = _synthetic(300, scale=3.0, seed=2)

    calibration = TemperatureCalibration()
    report = calibration.fit(held_out_logits, labels)
    calibrated_logits = calibration(test_logits)
    metrics = evaluate_calibration(calibrated_logits, test_labels)

    assert set(report) == {"temperature", "before", "after"}
    assert torch.allclose(calibrated_logits, test_logits / report["temperature"])
    assert metrics["count"] == 300


def test_fit_lowers_nll_and_ece_of_overconfident_logits() -> None:
    logits, labels = _synthetic(600, scale=3.0, seed=3)
    report = TemperatureCalibration().fit(logits, labels)
    assert 2.0 < report["temperature"] < 4.5
    assert report["after"]["nll"] < report["before"]["nll"]
    assert report["after"]["ece"] < report["before"]["ece"]


def test_fit_lowers_ece_on_held_out_split() -> None:
    fit_logits, fit_labels = _synthetic(600, scale=3.0, seed=4)
    test_logits, test_labels = _synthetic(600, scale=3.0, seed=5)
    calibration = TemperatureCalibration()
    calibration.fit(fit_logits, fit_labels)
    before = evaluate_calibration(test_logits, test_labels)
    after = evaluate_calibration(calibration(test_logits), test_labels)
    assert after["ece"] < before["ece"]
    assert after["nll"] < before["nll"]


def test_fit_keeps_calibrated_logits_near_unit_temperature() -> None:
    logits, labels = _synthetic(600, scale=1.0, seed=6)
    report = TemperatureCalibration().fit(logits, labels)
    assert report["temperature"] == pytest.approx(1.0, abs=0.2)
    assert report["after"]["nll"] <= report["before"]["nll"]


def test_fit_is_never_worse_than_no_calibration_on_fitting_set() -> None:
    """Constant logits make every temperature equal; the fit must then keep exactly 1.0."""
    logits = torch.zeros(5, 3)
    labels = torch.tensor([0, 1, 2, 0, 1])
    calibration = TemperatureCalibration()
    report = calibration.fit(logits, labels)
    assert report["temperature"] == 1.0
    assert report["after"] == report["before"]
    assert float(calibration.temperature) == 1.0
    assert calibration.is_fitted


def test_fit_is_deterministic() -> None:
    logits, labels = _synthetic(300, scale=2.5, seed=7)
    first = TemperatureCalibration().fit(logits, labels)
    second = TemperatureCalibration().fit(logits, labels)
    assert first == second


def test_fit_report_after_matches_forward(fitted: TemperatureCalibration) -> None:
    logits, labels = _synthetic(100, scale=3.0, seed=8)
    report = fitted.fit(logits, labels)
    assert report["after"] == evaluate_calibration(fitted(logits), labels)
    assert report["before"] == evaluate_calibration(logits, labels)


def test_fit_accepts_float64_logits_and_list_labels() -> None:
    logits, labels = _synthetic(100, scale=3.0, seed=9)
    report = TemperatureCalibration().fit(logits.double(), labels.tolist())
    assert report["after"]["nll"] < report["before"]["nll"]


def test_buffers_appear_in_parent_state_dict() -> None:
    parent = torch.nn.Module()
    parent.calibration = TemperatureCalibration()
    state = parent.state_dict()
    assert set(state) == {"calibration.temperature", "calibration.fitted"}
    assert state["calibration.temperature"].dtype == torch.float32
    assert float(state["calibration.temperature"]) == 1.0
    assert not bool(state["calibration.fitted"])


def test_state_round_trips_through_safetensors(fitted: TemperatureCalibration, tmp_path) -> None:
    path = tmp_path / "calibration.safetensors"
    save_file(fitted.state_dict(), str(path))
    restored = TemperatureCalibration()
    restored.load_state_dict(load_file(str(path)))
    assert restored.is_fitted
    assert torch.equal(restored.temperature, fitted.temperature)
    logits = torch.randn(3, 4)
    assert torch.equal(restored.calibrated(logits), fitted.calibrated(logits))


def test_stale_state_round_trips_through_safetensors(fitted: TemperatureCalibration, tmp_path) -> None:
    fitted.mark_stale()
    path = tmp_path / "calibration.safetensors"
    save_file(fitted.state_dict(), str(path))
    restored = TemperatureCalibration()
    restored.load_state_dict(load_file(str(path)))
    assert not restored.is_fitted


def test_unfitted_module_scales_but_calibrated_raises() -> None:
    calibration = TemperatureCalibration()
    logits = torch.randn(2, 3)
    assert not calibration.is_fitted
    assert torch.equal(calibration(logits), logits)
    with pytest.raises(RuntimeError, match="stale or not fitted; refit"):
        calibration.calibrated(logits)


def test_mark_stale_keeps_temperature_but_blocks_calibrated(fitted: TemperatureCalibration) -> None:
    temperature = fitted.temperature.clone()
    logits = torch.randn(2, 4)
    assert fitted.is_fitted
    fitted.mark_stale()
    assert not fitted.is_fitted
    assert torch.equal(fitted.temperature, temperature)
    assert torch.equal(fitted(logits), logits / temperature)
    with pytest.raises(RuntimeError, match="stale or not fitted"):
        fitted.calibrated(logits)


def test_refit_clears_stale(fitted: TemperatureCalibration) -> None:
    fitted.mark_stale()
    fitted.fit(*_synthetic(100, scale=2.0, seed=10))
    assert fitted.is_fitted


def test_evaluate_calibration_hand_computed() -> None:
    """Probabilities [.8, .1, .1] (label 0, right) and [.2, .6, .2] (label 0, wrong) in 4 bins."""
    logits = torch.tensor([[8.0, 1.0, 1.0], [2.0, 6.0, 2.0]], dtype=torch.float64).log()
    metrics = evaluate_calibration(logits, torch.tensor([0, 0]), bins=4)
    assert metrics["nll"] == pytest.approx((-math.log(0.8) - math.log(0.2)) / 2)
    assert metrics["brier"] == pytest.approx((0.06 + 1.04) / 2)
    assert metrics["accuracy"] == 0.5
    # Confidence .8 in bin (.75, 1] with accuracy 1; .6 in bin (.5, .75] with accuracy 0.
    assert metrics["ece"] == pytest.approx((abs(1 - 0.8) + abs(0 - 0.6)) / 2)
    assert metrics["count"] == 2
    assert metrics["bins"] == 4


def test_evaluate_calibration_same_bin_gaps_cancel() -> None:
    """Both confidences .8 share a bin whose accuracy is .5, so ECE is |.5 - .8|."""
    logits = torch.tensor([[8.0, 1.0, 1.0], [8.0, 1.0, 1.0]], dtype=torch.float64).log()
    metrics = evaluate_calibration(logits, [0, 1], bins=4)
    assert metrics["ece"] == pytest.approx(0.3)


def test_evaluate_calibration_returns_plain_python_numbers() -> None:
    logits, labels = _synthetic(20, scale=1.0, seed=11)
    metrics = evaluate_calibration(logits, labels)
    assert metrics["bins"] == 15
    for key in ("nll", "brier", "accuracy", "ece"):
        assert type(metrics[key]) is float
    assert type(metrics["count"]) is int


def test_fit_threshold_chooses_lowest_threshold_meeting_max_error() -> None:
    scores = [0.9, 0.8, 0.7, 0.6, 0.5]
    correct = [True, True, False, True, False]
    report = fit_threshold(scores, correct, max_error=0.25)
    assert report["threshold"] == 0.6
    assert report["accepted"] == 4
    assert report["coverage"] == 0.8
    assert report["error"] == 0.25
    assert report["count"] == 5


@pytest.mark.parametrize(
    ("max_error", "threshold", "accepted", "error"),
    [(0.0, 0.8, 2, 0.0), (1 / 3, 0.6, 4, 0.25), (0.4, 0.5, 5, 0.4), (1.0, 0.5, 5, 0.4)],
)
def test_fit_threshold_levels(max_error: float, threshold: float, accepted: int, error: float) -> None:
    report = fit_threshold(
        torch.tensor([0.5, 0.9, 0.7, 0.8, 0.6], dtype=torch.float64),
        torch.tensor([False, True, False, True, True]),
        max_error=max_error,
    )
    assert (report["threshold"], report["accepted"], report["error"]) == (threshold, accepted, error)
    assert report["coverage"] == accepted / 5


def test_fit_threshold_takes_lowest_even_when_error_is_not_monotone() -> None:
    report = fit_threshold([0.9, 0.8, 0.7], [False, True, True], max_error=0.34)
    assert report["threshold"] == 0.7
    assert report["error"] == pytest.approx(1 / 3)


def test_fit_threshold_never_splits_tied_scores() -> None:
    report = fit_threshold([0.9, 0.8, 0.8], [True, True, False], max_error=0.0)
    assert report["threshold"] == 0.9
    assert report["accepted"] == 1


def test_fit_threshold_abstains_on_all_when_nothing_meets_max_error() -> None:
    report = fit_threshold([0.9, 0.8], [False, True], max_error=0.0)
    assert report["threshold"] is None
    assert report["coverage"] == 0.0
    assert report["accepted"] == 0
    assert report["error"] is None


def test_fit_threshold_accepts_numpy_and_float32_scores() -> None:
    report = fit_threshold(np.array([0.25, 0.75], dtype=np.float32), np.array([False, True]), max_error=0.0)
    assert report["threshold"] == 0.75
    scores = torch.tensor([0.3, 0.7])
    report = fit_threshold(scores, torch.tensor([False, True]), max_error=0.0)
    assert bool((scores >= report["threshold"]).sum() == report["accepted"])


_GOOD_LOGITS = torch.tensor([[1.0, 0.0, -1.0], [0.0, 2.0, 0.5]])
_GOOD_LABELS = torch.tensor([0, 1])

_BAD_LOGITS_LABELS = [
    pytest.param(torch.tensor([1.0, 2.0]), _GOOD_LABELS, "logits", id="logits-1d"),
    pytest.param(torch.zeros(2, 3, 1), _GOOD_LABELS, "logits", id="logits-3d"),
    pytest.param(torch.tensor([[1, 0, 0], [0, 1, 0]]), _GOOD_LABELS, "logits", id="logits-int"),
    pytest.param([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], _GOOD_LABELS, "logits", id="logits-list"),
    pytest.param(torch.tensor([[float("nan"), 0.0, 0.0], [0.0, 1.0, 0.0]]), _GOOD_LABELS, "logits", id="nan"),
    pytest.param(torch.tensor([[float("inf"), 0.0, 0.0], [0.0, 1.0, 0.0]]), _GOOD_LABELS, "logits", id="inf"),
    pytest.param(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long), "logits is empty", id="empty"),
    pytest.param(torch.zeros(2, 1), torch.tensor([0, 0]), "at least 2 classes", id="one-class"),
    pytest.param(_GOOD_LOGITS, torch.tensor([[0], [1]]), "labels", id="labels-2d"),
    pytest.param(_GOOD_LOGITS, torch.tensor([0, 1, 2]), "labels", id="labels-length"),
    pytest.param(_GOOD_LOGITS, torch.tensor([0.0, 1.0]), "labels", id="labels-float"),
    pytest.param(_GOOD_LOGITS, torch.tensor([True, False]), "labels", id="labels-bool"),
    pytest.param(_GOOD_LOGITS, torch.tensor([0, 3]), "labels", id="labels-too-high"),
    pytest.param(_GOOD_LOGITS, torch.tensor([-1, 0]), "labels", id="labels-negative"),
    pytest.param(_GOOD_LOGITS, ["a", "b"], "labels", id="labels-strings"),
]


@pytest.mark.parametrize(("logits", "labels", "field"), _BAD_LOGITS_LABELS)
def test_fit_rejects_invalid_input_without_changing_state(
    fitted: TemperatureCalibration, logits, labels, field: str
) -> None:
    fitted.mark_stale()
    snapshot = _snapshot(fitted)
    with pytest.raises(ValueError, match=field):
        fitted.fit(logits, labels)
    _assert_same_state(fitted, snapshot)


@pytest.mark.parametrize(("logits", "labels", "field"), _BAD_LOGITS_LABELS)
def test_evaluate_calibration_rejects_invalid_input(logits, labels, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        evaluate_calibration(logits, labels)


@pytest.mark.parametrize("value", [0, -1, 2.5, True, None])
@pytest.mark.parametrize("option", ["max_iter", "bins"])
def test_fit_rejects_bad_options_without_changing_state(
    fitted: TemperatureCalibration, option, value
) -> None:
    snapshot = _snapshot(fitted)
    with pytest.raises(ValueError, match=option):
        fitted.fit(_GOOD_LOGITS, _GOOD_LABELS, **{option: value})
    _assert_same_state(fitted, snapshot)


@pytest.mark.parametrize("bins", [0, -3, 1.5, False])
def test_evaluate_calibration_rejects_bad_bins(bins) -> None:
    with pytest.raises(ValueError, match="bins"):
        evaluate_calibration(_GOOD_LOGITS, _GOOD_LABELS, bins=bins)


def test_fit_failure_raises_without_changing_state(fitted: TemperatureCalibration) -> None:
    """Finite float64 logits near the float64 limit overflow when divided by a small temperature."""
    logits = torch.tensor([[1e307, -1e307], [-1e307, 1e307], [1e307, -1e307]], dtype=torch.float64)
    snapshot = _snapshot(fitted)
    with pytest.raises(ValueError, match="temperature fit failed"):
        fitted.fit(logits, torch.tensor([0, 1, 0]))
    _assert_same_state(fitted, snapshot)


@pytest.mark.parametrize(
    ("scores", "correct", "max_error", "field"),
    [
        pytest.param([0.5, float("nan")], [True, False], 0.1, "scores", id="scores-nan"),
        pytest.param([0.5, float("inf")], [True, False], 0.1, "scores", id="scores-inf"),
        pytest.param([[0.5, 0.6]], [True, False], 0.1, "scores", id="scores-2d"),
        pytest.param([True, False], [True, False], 0.1, "scores", id="scores-bool"),
        pytest.param(["high", "low"], [True, False], 0.1, "scores", id="scores-strings"),
        pytest.param([], [], 0.1, "scores is empty", id="empty"),
        pytest.param([0.5, 0.6], [1, 0], 0.1, "correct", id="correct-int"),
        pytest.param([0.5, 0.6], torch.tensor([1.0, 0.0]), 0.1, "correct", id="correct-float"),
        pytest.param([0.5, 0.6], [True], 0.1, "correct", id="correct-length"),
        pytest.param([0.5, 0.6], [True, False], -0.1, "max_error", id="max-error-negative"),
        pytest.param([0.5, 0.6], [True, False], 1.5, "max_error", id="max-error-above-one"),
        pytest.param([0.5, 0.6], [True, False], float("nan"), "max_error", id="max-error-nan"),
        pytest.param([0.5, 0.6], [True, False], "0.1", "max_error", id="max-error-string"),
        pytest.param([0.5, 0.6], [True, False], True, "max_error", id="max-error-bool"),
    ],
)
def test_fit_threshold_rejects_invalid_input(scores, correct, max_error, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        fit_threshold(scores, correct, max_error=max_error)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_fit_runs_on_the_logits_device() -> None:
    logits, labels = _synthetic(100, scale=3.0, seed=12)
    calibration = TemperatureCalibration().cuda()
    report = calibration.fit(logits.cuda(), labels.cuda())
    assert calibration.temperature.device.type == "cuda"
    assert calibration.is_fitted
    assert calibration(logits.cuda()).device.type == "cuda"
    expected = TemperatureCalibration().fit(logits, labels)["temperature"]
    assert report["temperature"] == pytest.approx(expected, rel=1e-5)


def test_module_move_keeps_fitted_state(fitted: TemperatureCalibration) -> None:
    temperature = float(fitted.temperature)
    moved = fitted.to(torch.float64)
    assert moved.is_fitted
    assert float(moved.temperature) == pytest.approx(temperature)
