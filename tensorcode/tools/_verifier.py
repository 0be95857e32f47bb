"""The Investigator's NLI verifier: premise/hypothesis pairs -> entailment / neutral / contradiction logits.

Words of each side are softly aligned to the other side (a small ESIM-style comparison) and also marked when the
same word occurs on the other side, so a verifier trained on some names still compares names it never saw.
``calibration`` is a ``TemperatureCalibration`` persisted with the model. It describes the weights it was fitted
for, so changing them marks it stale: at once when a backward pass reaches them (before an optimizer can step),
and, for any other change (a direct edit), when the verifier next scores or reports, by comparing a fingerprint
of the weights with the one taken when the fit was made.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .. import receipts
from ..training.calibration import TemperatureCalibration
from ._checks import LABELS
from ._retrieval import WeightWatch
from ._text import TextEncoder, Tokenizer


class Verifier(nn.Module):
    """Scores pairs ``{"premise", "hypothesis"}``; ``forward`` returns logits ``(pairs, 3)`` in ``LABELS`` order."""

    def __init__(self, tokenizer: Tokenizer, dim: int):
        super().__init__()
        self.tokenizer = tokenizer
        self.encoder = TextEncoder(tokenizer.buckets, dim, tokenizer.max_words)
        self.compare = nn.Linear(4 * dim + 1, dim)
        self.head = nn.Sequential(nn.Linear(4 * dim, dim), nn.Tanh(), nn.Linear(dim, len(LABELS)))
        self.calibration = TemperatureCalibration()
        # The hook fires when a backward pass reaches these weights, i.e. before any optimizer can change them;
        # a fit made after that update binds to the new weights again.
        for parameter in self.parameters():
            parameter.register_post_accumulate_grad_hook(self._weights_changing)
        # While no fit is valid the watch follows the weights, so a fit binds to the weights that produced the
        # logits it was given (their forward pass checked last); once fitted, any difference makes it stale.
        self._watch = WeightWatch(self)
        self.register_load_state_dict_post_hook(self._loaded)

    def _weights_changing(self, _parameter: torch.Tensor) -> None:
        self.calibration.mark_stale()

    def _loaded(self, _module: nn.Module, _keys: object) -> None:
        # A loaded state brings its own weights and the calibration that belongs to them.
        self._watch.reset()

    def check_calibration(self) -> bool:
        """Mark the calibration stale if the weights changed since its fit; return whether it is still valid."""
        if not self.calibration.is_fitted:
            self._watch.reset()
            return False
        if self._watch.changed():
            self.calibration.mark_stale()
            return False
        return True

    def forward(self, pairs: list[dict]) -> torch.Tensor:
        self.check_calibration()
        device = self.head[0].weight.device
        p_ids, p_mask = self.tokenizer.batch([p["premise"] for p in pairs], device)
        h_ids, h_mask = self.tokenizer.batch([p["hypothesis"] for p in pairs], device)
        p_states = self.encoder(p_ids, p_mask)[0]  # (pairs, premise words, dim)
        h_states = self.encoder(h_ids, h_mask)[0]  # (pairs, hypothesis words, dim)
        hypothesis_side = self._side(h_states, h_ids, h_mask, p_states, p_ids, p_mask)
        premise_side = self._side(p_states, p_ids, p_mask, h_states, h_ids, h_mask)
        return self.head(torch.cat([hypothesis_side, premise_side], dim=-1))  # (pairs, 3)

    def _side(self, x, x_ids, x_mask, y, y_ids, y_mask) -> torch.Tensor:
        """Compare every word of ``x`` with its soft alignment in ``y``; mean and max pooled ``(pairs, 2 dim)``."""
        affinity = x @ y.transpose(1, 2) / x.shape[-1] ** 0.5  # (pairs, x words, y words)
        affinity = affinity.masked_fill(~y_mask.unsqueeze(1), float("-inf"))
        aligned = affinity.softmax(-1) @ y  # (pairs, x words, dim)
        exact = ((x_ids.unsqueeze(2) == y_ids.unsqueeze(1)) & y_mask.unsqueeze(1)).any(-1)  # (pairs, x words)
        features = torch.cat([x, aligned, x - aligned, x * aligned, exact.unsqueeze(-1).to(x.dtype)], dim=-1)
        compared = F.relu(self.compare(features))  # (pairs, x words, dim)
        weights = x_mask.unsqueeze(-1).to(x.dtype)
        mean = (compared * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        peak = compared.masked_fill(~x_mask.unsqueeze(-1), float("-inf")).amax(1)
        return torch.cat([mean, peak], dim=-1)

    def report(self, logits: torch.Tensor, *, tool: str, mode: str, model: str) -> list[dict]:
        """One ``classification`` receipt per row of ``logits``; calibrated probabilities only while the fit
        is fresh (otherwise ``calibration.fitted`` is false and every ``calibrated_probability`` is null)."""
        logits = logits.detach().float()
        fresh = self.check_calibration()
        calibrated = self.calibration(logits).softmax(-1).tolist() if fresh else None
        temperature = float(self.calibration.temperature) if fresh else None
        return [
            receipts.classification(tool, mode, model, LABELS, row, None if calibrated is None else calibrated[i],
                                    temperature)
            for i, row in enumerate(logits.tolist())
        ]
