"""Decision: ranks supplied hypotheses for a question, given evidence sources, and learns from reviews."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from . import _metrics as metrics
from . import _validation as validation
from ._base import CapturePlan, Tool
from ._configuration import DecisionConfig
from ._ranking import EvidenceRanker, distribution_tensor, ranking_receipt, soft_cross_entropy
from ._text import Tokenizer


class Decision(Tool):
    """Ranks hypotheses ``{"question", "evidence": [{"source_id", "text"}], "hypotheses": [{"id", "text"}]}``.

    Calling the tool returns a ``ranking`` receipt (:mod:`tensorcode.receipts`) per input: ``selected_id``,
    ``selected_index``, every hypothesis under ``candidates`` with its ``score``, ``probability`` and text
    ``attention`` (weight per evidence ``source_id`` and per word span), and the selected hypothesis's
    ``attention`` (where the model looked). A list of inputs gives a list of receipts from one batched forward.

    Training (``Trainer.from_tool``): a target names one supplied hypothesis by id or index, or is a finite
    nonnegative distribution over the supplied hypotheses summing to one; the loss (``"decision.rank"``) is
    cross-entropy against it. ``capture`` takes one input and one target, or a list of inputs and an
    equal-length list of targets (one batched call). The envelope ``{"mode": "rank", "inputs": ...}`` is
    accepted too; ``rank`` is the only mode.

    Configuration:

    - ``seed`` (int or null, default 0): seeds initialisation.
    - ``dim`` (int, default 32): width of word states and every projection.
    - ``buckets`` (int, default 4096): hashed word-id buckets of the open-vocabulary tokenizer.
    - ``max_words`` (int, default 64): words kept per text.
    - ``lowercase`` (bool, default true): lowercase text before hashing words.
    - ``limits`` (mapping): the largest request accepted (``max_batch``, ``max_candidates``, ``max_evidence``,
      ``max_text_chars``); see ``tensorcode.tools.Limits``.

    Upper bounds: ``dim`` 512, ``buckets`` 65536, ``max_words`` 512.
    """

    NAME: ClassVar[str] = "decision"
    CONFIG: ClassVar[type[DecisionConfig]] = DecisionConfig
    FIELDS: ClassVar[dict[str, Any]] = DecisionConfig.defaults()

    def build(self) -> None:
        config = self._configuration
        self.tokenizer = Tokenizer(config["buckets"], config["lowercase"], config["max_words"])
        self.ranker = EvidenceRanker(self.tokenizer, config["dim"])

    # -- prediction ----------------------------------------------------------------------------------------
    def forward(self, inputs: Any) -> dict | list[dict]:
        """Rank one input (returns a receipt) or a list of inputs (returns a list of receipts)."""
        request = validation.read_inputs(self.NAME, inputs, self._configuration)
        examples = request.items
        with torch.no_grad():
            output = self.ranker(*_columns(examples), words=True)
        receipts = [
            ranking_receipt(self, "rank", example["hypotheses"], example["evidence"], output, b)
            for b, example in enumerate(examples)
        ]
        return receipts if request.batched else receipts[0]

    def ranking_loss(self, inputs: Any, targets: Any) -> torch.Tensor:
        """The training loss of ``inputs``/``targets`` (same forms as ``capture``), differentiable."""
        return self.loss(inputs, targets)

    # -- training protocol ---------------------------------------------------------------------------------
    def plan_capture(self, inputs: Any, targets: Any) -> CapturePlan:
        request = validation.read_inputs(self.NAME, inputs, self._configuration)
        distributions = validation.read_targets(self.NAME, request, targets, self._configuration)
        return CapturePlan(
            operation=self.NAME,
            inputs={"mode": "rank", "examples": request.items},
            target=distribution_tensor(distributions),
            loss="decision.rank",
            examples=len(request.items),
        )

    def objective(self, batch: Any) -> dict[str, torch.Tensor]:
        """``{"scores": (batch, hypotheses), "mask": (batch, hypotheses)}`` for a captured batch."""
        if not isinstance(batch, dict) or batch.get("mode") != "rank":
            raise ValueError(
                "batch: expected {'mode': 'rank', 'examples': [...]} from Decision.prepare_capture"
            )
        output = self.ranker(*_columns(batch["examples"]))
        return {"scores": output.scores, "mask": output.candidate_mask}

    def losses(self) -> dict:
        return {"decision.rank": _rank_loss}

    def evaluation_metrics(self) -> dict:
        return {"decision.rank": lambda output, target: metrics.top1(output["scores"], output["mask"], target)}


def _rank_loss(output: dict[str, torch.Tensor], target: torch.Tensor) -> torch.Tensor:
    return soft_cross_entropy(output["scores"], output["mask"], target)


def _columns(examples: list[dict]) -> tuple[list[str], list[list[str]], list[list[str]]]:
    return (
        [e["question"] for e in examples],
        [[s["text"] for s in e["evidence"]] for e in examples],
        [[h["text"] for h in e["hypotheses"]] for e in examples],
    )

