"""Planner: predicts the outcome of each supplied plan for a goal and proposes plans; learns from reviews."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from .. import receipts
from . import _metrics as metrics
from . import _validation as validation
from ._base import CapturePlan, Tool
from ._configuration import PlannerConfig
from ._decoding import beam_search, log_probabilities
from ._ranking import EvidenceRanker, candidate_attention
from ._receipts import model_id, text_attention
from ._text import Generator, Tokenizer

MODES = ("outcomes", "proposal")


class Planner(Tool):
    """Predicts a numeric outcome per plan and generates plan text.

    Inputs are ``{"goal", "evidence": [{"source_id", "text"}], "plans": [{"id", "text"}]}``. Calling the tool
    on one returns an ``outcome`` receipt (:mod:`tensorcode.receipts`): ``selected_id``/``selected_index`` (the
    plan with the best predicted outcome, highest or lowest per ``prefer``), every plan under ``candidates``
    with its predicted ``outcome``, ``score`` (the outcome, negated when lower is better), ``probability``
    (softmax of the scores: how strongly the model prefers it) and text ``attention`` over evidence
    ``source_id``s and word spans, and the selected plan's ``attention``. A list of inputs gives a list of
    receipts from one batched forward.

    Modes, chosen by an envelope ``{"mode": ..., "inputs": ...}`` (plain inputs are ``outcomes``):

    - ``outcomes``: targets are ``{"candidate_id": id, "outcome": number}`` (the loss covers that plan only) or
      a list of one finite outcome per plan. Loss ``"planner.outcomes"``: mean squared error over the observed
      plans.
    - ``proposal``: inputs ``{"goal", "evidence"}`` (any ``plans`` are ignored); targets are reviewed plan
      text. Loss ``"planner.proposal"``: teacher-forced cross-entropy of the plan generator.
      ``propose(inputs, count=...)`` generates plans; calling the tool on a proposal envelope returns
      ``generation`` receipts (the greedy plan, its log-probability, attention over the evidence).

    ``capture`` takes one input and one target, or a list of inputs and an equal-length list of targets (one
    batched call, one provenance string per example).

    Configuration:

    - ``seed`` (int or null, default 0): seeds initialisation.
    - ``dim`` (int, default 32): width of word states, projections and the generator.
    - ``buckets`` (int, default 4096): hashed word-id buckets of the open-vocabulary tokenizer.
    - ``max_words`` (int, default 64): words kept per text.
    - ``lowercase`` (bool, default true): lowercase text before hashing words.
    - ``max_length`` (int, default 96): most UTF-8 bytes in a generated plan (and in a proposal target).
    - ``prefer`` (``"max"`` or ``"min"``, default ``"max"``): whether a higher or a lower outcome is better.
    - ``limits`` (mapping): the largest request accepted (``max_batch``, ``max_candidates`` plans,
      ``max_evidence``, ``max_text_chars``); see ``tensorcode.tools.Limits``.

    Upper bounds: ``dim`` 512, ``buckets`` 65536, ``max_words`` 512, ``max_length`` 4096.
    """

    NAME: ClassVar[str] = "planner"
    CONFIG: ClassVar[type[PlannerConfig]] = PlannerConfig
    FIELDS: ClassVar[dict[str, Any]] = PlannerConfig.defaults()

    def build(self) -> None:
        config = self._configuration
        dim = config["dim"]
        self.tokenizer = Tokenizer(config["buckets"], config["lowercase"], config["max_words"])
        self.ranker = EvidenceRanker(self.tokenizer, dim)
        self.outcome_head = nn.Sequential(
            nn.Linear(self.ranker.feature_dim, dim), nn.Tanh(), nn.Linear(dim, 1)
        )
        self.generator = Generator(dim, config["max_length"])

    # -- prediction ----------------------------------------------------------------------------------------
    def forward(self, inputs: Any) -> dict | list[dict]:
        """Receipts for one input or a list of inputs (``outcome`` receipts, or ``generation`` receipts)."""
        request = validation.read_inputs(self.NAME, inputs, self._configuration)
        examples = request.items
        with torch.no_grad():
            if request.mode == "proposal":
                out = self._proposal_receipts(examples)
            else:
                output = self._outcomes(examples, words=True)
                out = [self._receipt(request.mode, example, output, b) for b, example in enumerate(examples)]
        return out if request.batched else out[0]

    def propose(self, inputs: Any, count: int = 1) -> list[str] | list[list[str]]:
        """``count`` distinct plan texts for one input (or a list per input): the greedy decoding first, then
        the next most likely beam-search alternatives. Fewer come back only if fewer distinct texts exist."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"count: expected a positive integer, got {count!r}")
        request = validation.read_inputs(self.NAME, _with_mode("proposal", inputs), self._configuration)
        examples = request.items
        with torch.no_grad():
            context, _ = self._context(examples)
            greedy = self.generator.generate(context)
            proposals = []
            for b, first in enumerate(greedy):
                texts = [first]
                if count > 1:
                    for text in beam_search(self.generator, context[b : b + 1], count + 1)[0]:
                        if text not in texts:
                            texts.append(text)
                proposals.append(texts[:count])
        return proposals if request.batched else proposals[0]

    # -- training protocol ---------------------------------------------------------------------------------
    def plan_capture(self, inputs: Any, targets: Any) -> CapturePlan:
        request = validation.read_inputs(self.NAME, inputs, self._configuration)
        checked = validation.read_targets(self.NAME, request, targets, self._configuration)
        examples = request.items
        if request.mode == "proposal":
            return CapturePlan(
                self.NAME, {"mode": "proposal", "examples": examples}, checked, "planner.proposal", len(examples)
            )
        width = max(len(e["plans"]) for e in examples)
        outcomes = torch.zeros(len(examples), width)
        observed = torch.zeros(len(examples), width)
        for b, observations in enumerate(checked):
            for k, value in observations.items():
                outcomes[b, k], observed[b, k] = value, 1.0
        return CapturePlan(
            self.NAME,
            {"mode": "outcomes", "examples": examples},
            {"outcomes": outcomes, "observed": observed},
            "planner.outcomes",
            len(examples),
        )

    def objective(self, batch: Any) -> dict[str, torch.Tensor]:
        """Outcomes mode: ``{"outcomes": (batch, plans), "mask"}``; proposal: ``{"context": (batch, dim)}``."""
        mode = batch.get("mode") if isinstance(batch, dict) else None
        if mode == "outcomes":
            outcomes, mask, _ = self._outcomes(batch["examples"])
            return {"outcomes": outcomes, "mask": mask}
        if mode == "proposal":
            return {"context": self._context(batch["examples"])[0]}
        raise ValueError(f"batch: unknown mode {mode!r}; expected a batch from Planner.prepare_capture")

    def losses(self) -> dict:
        return {"planner.outcomes": _outcome_loss, "planner.proposal": self._proposal_loss}

    def evaluation_metrics(self) -> dict:
        return {
            "planner.outcomes": lambda output, target: metrics.squared_error(
                output["outcomes"], target["outcomes"], target["observed"]
            ),
            "planner.proposal": lambda output, target: metrics.exact_match(self.generator, output["context"], target),
        }

    def outcome_loss(self, inputs: Any, targets: Any) -> torch.Tensor:
        """The outcomes-mode training loss of ``inputs``/``targets`` (same forms as ``capture``)."""
        return self.loss(_with_mode("outcomes", inputs), targets)

    def proposal_loss(self, inputs: Any, targets: Any) -> torch.Tensor:
        """Teacher-forced loss of reviewed plan ``targets`` for proposal ``inputs`` (envelope optional)."""
        return self.loss(_with_mode("proposal", inputs), targets)

    # -- internals -----------------------------------------------------------------------------------------
    def _outcomes(self, examples: list[dict], *, words: bool = False):
        """Predicted outcomes (batch, plans) (0 at padding), plan mask, and the ranking output."""
        output = self.ranker(
            [e["goal"] for e in examples],
            [[s["text"] for s in e["evidence"]] for e in examples],
            [[p["text"] for p in e["plans"]] for e in examples],
            words=words,
        )
        outcomes = self.outcome_head(output.features).squeeze(-1) * output.candidate_mask  # (batch, plans)
        return outcomes, output.candidate_mask, output

    def _context(self, examples: list[dict], *, words: bool = False):
        return self.ranker.context(
            [e["goal"] for e in examples], [[s["text"] for s in e["evidence"]] for e in examples], words=words
        )

    def _receipt(self, mode: str, example: dict, output, b: int) -> dict:
        outcomes, _, ranking = output
        return receipts.outcome(
            self.NAME, mode, model_id(self), example["plans"], outcomes[b, : len(example["plans"])].tolist(),
            self._configuration["prefer"], candidate_attention(self.tokenizer, example["evidence"], ranking, b),
        )

    def _proposal_receipts(self, examples: list[dict]) -> list[dict]:
        context, attention, words = self._context(examples, words=True)
        texts = self.generator.generate(context)
        scores = log_probabilities(self.generator, context, texts)
        model, sources = model_id(self), [len(e["evidence"]) for e in examples]
        return [
            receipts.generation(
                self.NAME, "proposal", model, [text], [score],
                text_attention(self.tokenizer, example["evidence"], attention[b, :count].tolist(),
                               words[b, :count].tolist()),
            )
            for b, (example, text, score, count) in enumerate(zip(examples, texts, scores, sources, strict=True))
        ]

    def _proposal_loss(self, output: dict[str, torch.Tensor], target: list[str]) -> torch.Tensor:
        return self.generator.loss(output["context"], list(target))


def _outcome_loss(output: dict[str, torch.Tensor], target: dict[str, torch.Tensor]) -> torch.Tensor:
    """Squared error averaged over the observed plans only."""
    predicted = output["outcomes"]
    outcomes = target["outcomes"].to(predicted.device, predicted.dtype)
    observed = target["observed"].to(predicted.device, predicted.dtype)
    return (observed * (predicted - outcomes) ** 2).sum() / observed.sum().clamp(min=1.0)


def _with_mode(mode: str, inputs: Any) -> Any:
    """Plain inputs wrapped in ``mode``'s envelope; an envelope of another mode is refused."""
    if isinstance(inputs, dict) and "mode" in inputs:
        if inputs["mode"] != mode:
            raise ValueError(f"mode: this method takes {mode} inputs, got mode {inputs['mode']!r}")
        return inputs
    return {"mode": mode, "inputs": inputs}

