"""Temperature scaling, calibration metrics and abstention thresholds for verifier scores.

These utilities describe a calibration sample; they do not certify truth or error rates on new inputs. Fit and
evaluate on separate held-out data, and refit whenever the scored model's weights change.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["TemperatureCalibration", "evaluate_calibration", "fit_threshold"]

# The fitted temperature is searched in this range; beyond it a verifier is better retrained than rescaled.
_MIN_TEMPERATURE = 1e-2
_MAX_TEMPERATURE = 1e2
_LOG_TOLERANCE = 1e-7
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


class TemperatureCalibration(nn.Module):
    """Divides logits by one temperature fitted to minimise held-out NLL (Guo et al. 2017).

    ``temperature`` (float32 scalar, 1.0 until fitted) and ``fitted`` (bool scalar) are persistent buffers,
    so a parent model's ``state_dict`` and safetensors export carry the value and whether it is still valid.
    Calling the module always applies the current temperature; :meth:`calibrated` additionally refuses a
    calibration that was never fitted or has been marked stale.
    """

    temperature: torch.Tensor
    fitted: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("temperature", torch.tensor(1.0, dtype=torch.float32))
        self.register_buffer("fitted", torch.tensor(False))

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        """Return ``logits / temperature``, whatever the fitted state; classes lie on the last dimension."""
        return logits / self.temperature

    def calibrated(self, logits: torch.Tensor) -> torch.Tensor:
        """Like calling the module, but raise RuntimeError unless the calibration is fitted and not stale."""
        if not self.is_fitted:
            raise RuntimeError(
                "calibration is stale or not fitted; refit it on a separate held-out set with "
                "fit(logits, labels) before reporting calibrated scores"
            )
        return self(logits)

    @property
    def is_fitted(self) -> bool:
        """True after a successful :meth:`fit` that no later :meth:`mark_stale` has invalidated."""
        return bool(self.fitted.item())

    def mark_stale(self) -> None:
        """Invalidate the fit (the scored weights changed); the temperature is kept but no longer trusted."""
        with torch.no_grad():
            self.fitted.fill_(False)

    def fit(
        self,
        logits: torch.Tensor,
        labels: Any,
        *,
        max_iter: int = 100,
        bins: int = 15,
    ) -> dict[str, Any]:
        """Fit the temperature on ``logits`` [examples, classes] and integer ``labels`` [examples].

        The temperature minimising mean NLL is found by a deterministic golden-section search over
        log-temperature in [0.01, 100] (NLL is convex in 1/T, so the search is unimodal), running at most
        ``max_iter`` steps on the logits' device. If the result does not lower the NLL of the uncalibrated
        logits on this sample, the temperature is set to 1.0, so fitting is never worse than no calibration.

        Returns ``{"temperature": float, "before": metrics, "after": metrics}``, where ``before`` evaluates
        the raw logits (temperature 1) and ``after`` the logits divided by the stored temperature, both with
        :func:`evaluate_calibration` and ``bins``. Invalid input or a failed search raises ValueError and
        leaves the buffers unchanged; success sets ``fitted``.
        """
        _check_positive_int("max_iter", max_iter)
        _check_positive_int("bins", bins)
        logits, labels = _check_logits_labels(logits, labels)
        with torch.no_grad():
            before = _metrics(logits, labels, bins)
            found = _search_temperature(logits, labels, max_iter)
            # Score the value exactly as forward() will apply it, after rounding to the buffer's dtype.
            stored = self.temperature.new_tensor(found)
            after = _metrics(logits / stored.to(logits.device), labels, bins)
            # Ties keep 1.0 too: a temperature that does not help on the fitting set is not applied.
            if not after["nll"] < before["nll"]:
                stored = self.temperature.new_tensor(1.0)
                after = before
            self.temperature.copy_(stored)
            self.fitted.fill_(True)
        return {"temperature": float(stored.item()), "before": before, "after": after}

    def extra_repr(self) -> str:
        return f"temperature={float(self.temperature.item()):.6g}, fitted={self.is_fitted}"


def evaluate_calibration(logits: torch.Tensor, labels: Any, *, bins: int = 15) -> dict[str, Any]:
    """Return calibration metrics of ``logits`` [examples, classes] against integer ``labels`` [examples].

    Keys, all plain Python numbers computed in float64 on the logits' device:

    - ``nll``: mean negative log-likelihood of the labels under softmax(logits).
    - ``brier``: mean over examples of the sum over classes of (probability - one-hot label) ** 2.
    - ``accuracy``: fraction whose predicted class (first maximal logit) equals the label.
    - ``ece``: expected calibration error (Guo et al. 2017). The confidence of an example is its maximum
      softmax probability; examples fall into ``bins`` equal-width bins over [0, 1], right-closed
      ((i / bins, (i + 1) / bins], the first bin also holding 0). ECE is the sum over bins of
      |accuracy - mean confidence| weighted by the bin's share of examples; empty bins contribute nothing.
    - ``count``: number of examples; ``bins``: the bin count used.
    """
    _check_positive_int("bins", bins)
    logits, labels = _check_logits_labels(logits, labels)
    with torch.no_grad():
        return _metrics(logits, labels, bins)


def fit_threshold(scores: Any, correct: Any, *, max_error: float) -> dict[str, Any]:
    """Choose the lowest score threshold whose accepted examples have empirical error <= ``max_error``.

    ``scores`` are finite confidence values [examples]; ``correct`` are explicit booleans [examples] (a bool
    tensor/array or a list of bools; 0/1 integers are rejected). An example is accepted when
    ``score >= threshold``, so tied scores are accepted or abstained together. Among all thresholds meeting
    ``max_error`` the lowest one, hence the highest coverage, is returned.

    Returns ``threshold`` (a float equal to one of the scores, or None meaning abstain on all), ``coverage``
    (accepted / count), ``accepted``, ``error`` (fraction of accepted examples that are incorrect; None when
    nothing is accepted), ``count`` and ``max_error``. Selection and the reported error use this same sample:
    evaluate the resulting policy on separate test data.
    """
    if isinstance(max_error, bool) or not isinstance(max_error, (int, float)):
        raise ValueError(f"max_error must be a float in [0, 1], got {max_error!r}")
    if not 0.0 <= max_error <= 1.0:
        raise ValueError(f"max_error must be in [0, 1], got {max_error!r}")
    scores = _as_vector("scores", scores)
    if scores.dtype == torch.bool or not (scores.is_floating_point() or _is_integer(scores.dtype)):
        raise ValueError(f"scores must be real-valued confidence values, got dtype {scores.dtype}")
    scores = scores.detach().to(device="cpu", dtype=torch.float64)
    if not bool(torch.isfinite(scores).all()):
        raise ValueError("scores must be finite; found NaN or infinite values")
    correct = _as_vector("correct", correct)
    if correct.dtype != torch.bool:
        raise ValueError(
            f"correct must hold explicit booleans (True/False), got dtype {correct.dtype}; "
            "convert 0/1 labels with `.bool()` only if that is what they mean"
        )
    if correct.shape != scores.shape:
        raise ValueError(
            f"correct must have one entry per score: scores has {scores.numel()}, "
            f"correct has {correct.numel()}"
        )

    count = scores.numel()
    order = torch.sort(scores, descending=True, stable=True).indices
    ranked = scores[order]  # (examples,) highest first
    errors = torch.cumsum((~correct.cpu()[order]).to(torch.int64), 0)
    # A cut may only fall after the last of a group of tied scores.
    cut = torch.ones(count, dtype=torch.bool)
    cut[:-1] = ranked[1:] != ranked[:-1]
    rates = errors.to(torch.float64) / torch.arange(1, count + 1, dtype=torch.float64)
    meeting = torch.nonzero(cut & (rates <= max_error)).flatten()
    if meeting.numel() == 0:
        return {
            "threshold": None,
            "coverage": 0.0,
            "accepted": 0,
            "error": None,
            "count": count,
            "max_error": float(max_error),
        }
    best = int(meeting[-1])
    accepted = best + 1
    return {
        "threshold": float(ranked[best]),
        "coverage": accepted / count,
        "accepted": accepted,
        "error": int(errors[best]) / accepted,
        "count": count,
        "max_error": float(max_error),
    }


def _metrics(logits: torch.Tensor, labels: torch.Tensor, bins: int) -> dict[str, Any]:
    work = logits.to(_work_dtype(logits.device))
    count, classes = work.shape
    log_probs = F.log_softmax(work, dim=1)  # (examples, classes)
    probs = log_probs.exp()
    nll = -log_probs.gather(1, labels[:, None]).mean()
    brier = (probs - F.one_hot(labels, classes).to(work.dtype)).pow(2).sum(dim=1).mean()
    predicted = probs.argmax(dim=1)
    confidence = probs.gather(1, predicted[:, None]).squeeze(1)  # (examples,)
    hits = (predicted == labels).to(work.dtype)
    bin_index = (torch.ceil(confidence * bins).long() - 1).clamp(0, bins - 1)
    # A one-hot matmul rather than index_add_, whose float atomics are nondeterministic on CUDA.
    membership = F.one_hot(bin_index, bins).to(work.dtype)  # (examples, bins)
    ece = (membership.T @ (confidence - hits)).abs().sum() / count
    return {
        "nll": float(nll.item()),
        "brier": float(brier.item()),
        "accuracy": float(hits.mean().item()),
        "ece": float(ece.item()),
        "count": int(count),
        "bins": int(bins),
    }


def _search_temperature(logits: torch.Tensor, labels: torch.Tensor, max_iter: int) -> float:
    work = logits.to(_work_dtype(logits.device))

    def nll(log_temperature: float) -> float:
        value = float(F.cross_entropy(work / math.exp(log_temperature), labels).item())
        if not math.isfinite(value):
            raise ValueError(
                f"temperature fit failed: NLL is not finite at temperature {math.exp(log_temperature):.6g}; "
                "logits are too large in magnitude, rescale them before fitting"
            )
        return value

    low, high = math.log(_MIN_TEMPERATURE), math.log(_MAX_TEMPERATURE)
    left, right = high - _GOLDEN * (high - low), low + _GOLDEN * (high - low)
    left_nll, right_nll = nll(left), nll(right)
    for _ in range(max_iter):
        if high - low < _LOG_TOLERANCE:
            break
        if left_nll <= right_nll:
            high, right, right_nll = right, left, left_nll
            left = high - _GOLDEN * (high - low)
            left_nll = nll(left)
        else:
            low, left, left_nll = left, right, right_nll
            right = low + _GOLDEN * (high - low)
            right_nll = nll(right)
    return math.exp(left if left_nll <= right_nll else right)


def _check_logits_labels(logits: Any, labels: Any) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(logits, torch.Tensor):
        raise ValueError(
            f"logits must be a torch.Tensor of shape [examples, classes], got {type(logits).__name__}"
        )
    if logits.dim() != 2:
        raise ValueError(f"logits must be 2-D [examples, classes], got shape {tuple(logits.shape)}")
    if not logits.is_floating_point():
        raise ValueError(f"logits must be floating point, got dtype {logits.dtype}; convert with `.float()`")
    examples, classes = logits.shape
    if examples == 0:
        raise ValueError("logits is empty: calibration needs at least one example")
    if classes < 2:
        raise ValueError(f"logits must have at least 2 classes, got {classes}")
    logits = logits.detach()
    if not bool(torch.isfinite(logits).all()):
        raise ValueError("logits must be finite; found NaN or infinite values")
    labels = _as_vector("labels", labels)
    if not _is_integer(labels.dtype):
        raise ValueError(f"labels must be integer class indices, got dtype {labels.dtype}")
    if labels.numel() != examples:
        raise ValueError(
            f"labels must have one entry per example: logits has {examples}, labels has {labels.numel()}"
        )
    labels = labels.detach().to(device=logits.device, dtype=torch.int64)
    low, high = int(labels.min()), int(labels.max())
    if low < 0 or high >= classes:
        raise ValueError(f"labels must be class indices in [0, {classes - 1}], got values in [{low}, {high}]")
    return logits, labels


def _check_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _as_vector(name: str, value: Any) -> torch.Tensor:
    try:
        tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
        if tensor.dtype == torch.float32 and not isinstance(value, torch.Tensor):
            # Python floats are doubles; keep their exact values rather than torch's float32 default.
            tensor = torch.as_tensor(value, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"{name} must be a 1-D tensor or sequence of numbers: {exc}") from exc
    if tensor.dim() != 1:
        raise ValueError(f"{name} must be 1-D [examples], got shape {tuple(tensor.shape)}")
    if tensor.numel() == 0:
        raise ValueError(f"{name} is empty: at least one example is needed")
    return tensor


def _is_integer(dtype: torch.dtype) -> bool:
    return dtype != torch.bool and not dtype.is_floating_point and not dtype.is_complex


def _work_dtype(device: torch.device) -> torch.dtype:
    # MPS has no float64; everywhere else metrics and the search run in double precision.
    return torch.float32 if device.type == "mps" else torch.float64
