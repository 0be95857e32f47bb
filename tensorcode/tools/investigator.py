"""Investigator: ranks hypotheses against evidence, verifies claims, proposes hypotheses and retrieves sources."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from .. import receipts
from . import _checks as check
from . import _metrics as metrics
from . import _validation as validation
from ._base import CapturePlan, Tool
from ._checks import LABELS
from ._configuration import InvestigatorConfig
from ._proposal import Proposer
from ._ranking import EvidenceRanker, distribution_tensor, ranking_receipt, soft_cross_entropy
from ._receipts import forget_model_id, model_id
from ._retrieval import EpisodicEncoder, EpisodicIndex, contrastive_loss, group_logits, group_target
from ._text import Tokenizer
from ._verifier import Verifier

__all__ = ["EpisodicIndex", "Investigator"]


class Investigator(Tool):
    """An owned investigation model with four modes, chosen per call by ``{"mode": ..., "inputs": ...}``.

    - ``rank`` (also plain inputs without an envelope): ``{"question", "evidence": [{"source_id", "text"}],
      "hypotheses": [{"id", "text"}]}`` -> a ``ranking`` receipt: ``selected_id``, every hypothesis under
      ``candidates`` (``score``, ``probability``, text ``attention`` per ``source_id`` and word span) and the
      selected hypothesis's ``attention``. Target: a hypothesis id, an index, or a finite nonnegative
      distribution summing to one.
    - ``verification``: ``{"premise", "hypothesis"}`` pairs -> ``classification`` receipts over
      ``entailment``, ``neutral``, ``contradiction``, with calibrated probabilities only while
      ``verifier.calibration`` is fitted and fresh. Targets: named labels. ``verification_loss(pairs, labels)``.
    - ``proposal``: ``{"question", "evidence"?}`` -> ``generation`` receipts: the greedy proposal as ``text``,
      and ``proposals`` distinct candidates with their log-probabilities. Targets: reviewed hypothesis text.
      ``proposal_loss(inputs, targets)``, ``propose(inputs, count=3)``.
    - ``retrieval``: ``{"queries", "documents"}`` -> a ``retrieval`` receipt: per query, every document (its id
      is its position in ``documents``, as a string) scored by ``episodic_encoder``. Target: a boolean
      ``[queries, documents]`` mask, at least one positive per query, positives weighted equally, unmarked
      documents negatives. ``retrieval_loss(inputs, mask)``, ``episodic_index()``.

    A list of inputs, an envelope whose ``inputs`` is a list, or a list of one-example envelopes of one mode gives
    a list of receipts from one batched forward; ``capture`` takes the same forms with one target per example
    (recorded as one call). Losses are ``"investigator.<mode>"``. Receipts follow :mod:`tensorcode.receipts`.

    ``verifier.calibration`` (a ``TemperatureCalibration``, saved with the model) is fitted on held-out pairs,
    directly or with ``calibrate_verifier``; any change to the verifier's weights marks it stale. An
    ``EpisodicIndex`` (``episodic_index()``) refuses queries once ``episodic_encoder`` changed, until rebuilt.

    Configuration:

    - ``seed`` (int or null, default 0): seeds initialisation.
    - ``modes`` (list, default all four): the capabilities built; leaving one out leaves its modules out.
    - ``dim`` (int, default 32): width of the ranking, verification and proposal models.
    - ``buckets`` (int, default 4096), ``max_words`` (int, default 64), ``lowercase`` (bool, default true):
      the open-vocabulary tokenizer (hashed words; generation is byte-level).
    - ``max_length`` (int, default 48): byte limit of generated proposals (greedy decoding).
    - ``proposals`` (int, default 3): candidates in a proposal receipt; ``beam_width`` (int, default 4): beam
      search width for alternatives after the greedy proposal.
    - ``retrieval_encoder`` (mapping or null, default ``{"dim": 32, "frozen": false}``): owns
      ``episodic_encoder`` (required by the ``retrieval`` mode; missing fields take these defaults). A frozen
      encoder stays in eval mode under the training-mode policy and refuses training until
      ``unfreeze_retrieval()`` (then build a new Trainer, whose optimizer will own it).
    - ``limits`` (mapping): the largest request accepted (``max_batch``, ``max_candidates`` hypotheses,
      ``max_evidence``, ``max_queries``, ``max_documents``, ``max_text_chars``); see ``tensorcode.tools.Limits``.

    Upper bounds: ``dim`` 512, ``buckets`` 65536, ``max_words`` 512, ``max_length`` 4096, ``proposals`` 32,
    ``beam_width`` 32, ``retrieval_encoder.dim`` 512.
    """

    NAME: ClassVar[str] = "investigator"
    CONFIG: ClassVar[type[InvestigatorConfig]] = InvestigatorConfig
    FIELDS: ClassVar[dict[str, Any]] = InvestigatorConfig.defaults()

    def build(self) -> None:
        config = self._configuration
        modes = config["modes"]
        self.tokenizer = Tokenizer(config["buckets"], config["lowercase"], config["max_words"])
        self.ranker = EvidenceRanker(self.tokenizer, config["dim"]) if "rank" in modes else None
        self.verifier = Verifier(self.tokenizer, config["dim"]) if "verification" in modes else None
        self.proposer = Proposer(self.tokenizer, config["dim"], config["max_length"]) if "proposal" in modes else None
        section = config["retrieval_encoder"]
        self.episodic_encoder = None if section is None else EpisodicEncoder(self.tokenizer, section["dim"])
        if section is not None and section["frozen"]:
            self.episodic_encoder.requires_grad_(False)

    # -- prediction ----------------------------------------------------------------------------------------
    def forward(self, inputs: Any) -> dict | list[dict]:
        """One receipt for one input, a list of receipts for a list of inputs (one batched forward)."""
        request = validation.read_inputs(self.NAME, inputs, self._configuration)
        with torch.no_grad():
            out = getattr(self, f"_receipts_{request.mode}")(request.items)
        return out if request.batched else out[0]

    def _receipts_rank(self, examples: list[dict]) -> list[dict]:
        output = self.ranker(*_columns(examples), words=True)
        return [ranking_receipt(self, "rank", e["hypotheses"], e["evidence"], output, b)
                for b, e in enumerate(examples)]

    def _receipts_verification(self, pairs: list[dict]) -> list[dict]:
        return self.verifier.report(self.verifier(pairs), tool=self.NAME, mode="verification", model=model_id(self))

    def _receipts_proposal(self, examples: list[dict]) -> list[dict]:
        # The proposer reads the mean of the evidence, not an attention over it: there is no attention to show.
        config = self._configuration
        proposals = self.proposer.propose(self.proposer(examples), config["proposals"], config["beam_width"],
                                          config["seed"] or 0)
        return [
            receipts.generation(self.NAME, "proposal", model_id(self), [c["text"] for c in candidates],
                                [c["log_probability"] for c in candidates], None)
            for candidates in proposals
        ]

    def _receipts_retrieval(self, groups: list[dict]) -> list[dict]:
        model = model_id(self)
        out = []
        for group in groups:
            logits = group_logits(self.episodic_encoder, [group])  # (queries, documents)
            # Documents are plain texts; a document's id is its position in the group's list.
            ids = [str(d) for d in range(len(group["documents"]))]
            out.append(receipts.retrieval(self.NAME, "retrieval", model, group["queries"], ids, logits.tolist()))
        return out

    def propose(self, inputs: Any, count: int = 3) -> list[str] | list[list[str]]:
        """``count`` distinct proposed hypothesis texts (greedy first) per input; deterministic."""
        _check_positive_int(count, "count")
        request = self._request("proposal", inputs)
        items, batched = request.items, request.batched
        with torch.no_grad():
            proposals = self.proposer.propose(self.proposer(items), count, self._configuration["beam_width"],
                                              self._configuration["seed"] or 0)
        texts = [[c["text"] for c in candidates] for candidates in proposals]
        return texts if batched else texts[0]

    def verification_logits(self, pairs: Any) -> torch.Tensor:
        """Raw verifier logits ``(pairs, 3)`` in ``LABELS`` order, detached (e.g. to fit the calibration)."""
        items = self._request("verification", pairs).items
        with torch.no_grad():
            return self.verifier(items)

    def calibrate_verifier(self, pairs: Any, labels: Any) -> dict:
        """Fit ``verifier.calibration`` on held-out pairs with named labels; returns the fit report."""
        request = self._request("verification", pairs)
        items = request.items
        targets = check.targets_for(labels, len(items), request.batched, "labels")
        names = [check.label(t, f"labels[{i}]") for i, t in enumerate(targets)]
        logits = self.verification_logits(items)
        return self.verifier.calibration.fit(logits, [LABELS.index(n) for n in names])

    def episodic_index(self, records: Any = ()) -> EpisodicIndex:
        """A new episodic index over ``records`` (``[{"source_id", "text"}]``) embedded by the episodic encoder."""
        return EpisodicIndex(self, records)

    # -- losses outside the trainer ------------------------------------------------------------------------
    def ranking_loss(self, inputs: Any, targets: Any) -> torch.Tensor:
        return self.loss({"mode": "rank", "inputs": inputs}, targets)

    def verification_loss(self, pairs: Any, labels: Any) -> torch.Tensor:
        return self.loss({"mode": "verification", "inputs": pairs}, labels)

    def proposal_loss(self, inputs: Any, targets: Any) -> torch.Tensor:
        return self.loss({"mode": "proposal", "inputs": inputs}, targets)

    def retrieval_loss(self, inputs: Any, mask: Any) -> torch.Tensor:
        return self.loss({"mode": "retrieval", "inputs": inputs}, mask)

    # -- retrieval foundation ------------------------------------------------------------------------------
    def unfreeze_retrieval(self) -> None:
        """Make the episodic encoder trainable (build a new Trainer afterwards so its optimizer owns it)."""
        self._set_frozen(False)

    def freeze_retrieval(self) -> None:
        """Stop training the episodic encoder; it stays in eval mode under the training-mode policy."""
        self._set_frozen(True)

    def _set_frozen(self, frozen: bool) -> None:
        if self.episodic_encoder is None:
            raise ValueError("retrieval_encoder: this Investigator has no episodic encoder to (un)freeze")
        self.episodic_encoder.requires_grad_(not frozen)
        self._configuration["retrieval_encoder"]["frozen"] = frozen
        forget_model_id(self)
        if frozen:
            self.episodic_encoder.eval()

    def frozen_modules(self) -> list[torch.nn.Module]:
        section = self._configuration["retrieval_encoder"]
        return [self.episodic_encoder] if section is not None and section["frozen"] else []

    # -- training protocol ---------------------------------------------------------------------------------
    def plan_capture(self, inputs: Any, targets: Any) -> CapturePlan:
        request = validation.read_inputs(self.NAME, inputs, self._configuration)
        checked = validation.read_targets(self.NAME, request, targets, self._configuration)
        mode, items = request.mode, request.items
        if mode == "rank":
            target, batch = distribution_tensor(checked), {"mode": mode, "examples": items}
        elif mode == "verification":
            target, batch = checked, {"mode": mode, "pairs": items}
        elif mode == "proposal":
            target, batch = checked, {"mode": mode, "examples": items}
        else:
            target, batch = group_target(checked), {"mode": mode, "groups": items}
        return CapturePlan(operation=self.NAME, inputs=batch, target=target, loss=f"{self.NAME}.{mode}",
                           examples=len(items))

    def objective(self, batch: Any) -> Any:
        """The differentiable forward of a captured batch ``{"mode", ...}`` (see ``plan_capture``)."""
        mode = batch.get("mode") if isinstance(batch, dict) else None
        if mode not in self._configuration["modes"]:
            raise ValueError(f"batch: expected a batch from Investigator.prepare_capture, got mode {mode!r}")
        if mode == "rank":
            output = self.ranker(*_columns(batch["examples"]))
            return {"scores": output.scores, "mask": output.candidate_mask}  # (batch, hypotheses) each
        if mode == "verification":
            return self.verifier(batch["pairs"])  # (pairs, 3)
        if mode == "proposal":
            return self.proposer(batch["examples"])  # (examples, dim) decoder contexts
        return group_logits(self.episodic_encoder, batch["groups"])  # (queries, documents)

    def losses(self) -> dict:
        available = {
            "rank": lambda output, target: soft_cross_entropy(output["scores"], output["mask"], target),
            "verification": _verification_loss,
            "proposal": lambda output, target: self.proposer.loss(output, target),
            "retrieval": contrastive_loss,
        }
        return {f"{self.NAME}.{m}": available[m] for m in self._configuration["modes"]}

    def evaluation_metrics(self) -> dict:
        available = {
            "rank": lambda output, target: metrics.top1(output["scores"], output["mask"], target),
            "verification": lambda output, target: metrics.accuracy(output, target, LABELS),
            "proposal": lambda output, target: metrics.exact_match(self.proposer.generator, output, target),
            "retrieval": metrics.recall_at_1,
        }
        return {f"{self.NAME}.{m}": available[m] for m in self._configuration["modes"]}

    # -- helpers -------------------------------------------------------------------------------------------
    def _request(self, mode: str, inputs: Any) -> validation.Request:
        """Inputs of ``mode`` (plain, or already in that mode's envelope), checked."""
        if not (isinstance(inputs, dict) and "mode" in inputs):
            inputs = {"mode": mode, "inputs": inputs}
        request = validation.read_inputs(self.NAME, inputs, self._configuration)
        if request.mode != mode:
            raise ValueError(f"mode: expected {mode} inputs, got mode {request.mode!r}")
        return request


def _verification_loss(logits: torch.Tensor, labels: list[str]) -> torch.Tensor:
    target = torch.tensor([LABELS.index(name) for name in labels], device=logits.device)
    return torch.nn.functional.cross_entropy(logits, target)


def _columns(examples: list[dict]) -> tuple[list[str], list[list[str]], list[list[str]]]:
    return (
        [e["question"] for e in examples],
        [[s["text"] for s in e["evidence"]] for e in examples],
        [[h["text"] for h in e["hypotheses"]] for e in examples],
    )


def _check_positive_int(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
