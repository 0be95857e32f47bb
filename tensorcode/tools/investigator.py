"""Investigator: ranks hypotheses against evidence, verifies claims, proposes hypotheses and retrieves sources."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from .. import receipts
from . import _investigator_inputs as checks
from . import _metrics as metrics
from ._base import CapturePlan, Tool, check_flags, check_positive, check_seed
from ._investigator_inputs import LABELS, MODES
from ._proposal import Proposer
from ._ranking import (
    EvidenceRanker,
    check_ranking_input,
    check_ranking_target,
    distribution_tensor,
    ranking_receipt,
    soft_cross_entropy,
)
from ._receipts import forget_model_id, model_id
from ._retrieval import EpisodicEncoder, EpisodicIndex, contrastive_loss, group_logits, group_target
from ._text import Tokenizer
from ._verifier import Verifier

__all__ = ["EpisodicIndex", "Investigator"]

_RETRIEVAL_DEFAULTS = {"dim": 32, "frozen": False}


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
    """

    NAME: ClassVar[str] = "investigator"
    FIELDS: ClassVar[dict[str, Any]] = {
        "seed": 0,
        "modes": list(MODES),
        "dim": 32,
        "buckets": 4096,
        "max_words": 64,
        "lowercase": True,
        "max_length": 48,
        "proposals": 3,
        "beam_width": 4,
        "retrieval_encoder": dict(_RETRIEVAL_DEFAULTS),
    }

    @classmethod
    def configuration_for_mode(cls, mode: str, configuration: dict) -> dict:
        """A fresh Investigator for one mode builds only that mode's modules (unless ``modes`` is given)."""
        configuration = dict(configuration)
        modes = configuration.setdefault("modes", [mode])
        if isinstance(modes, list) and mode not in modes:
            raise ValueError(f"modes: {modes} does not include the mode {mode!r}")
        if mode != "retrieval":
            configuration.setdefault("retrieval_encoder", None)
        return configuration

    @classmethod
    def validate_configuration(cls, configuration: dict) -> dict:
        section = configuration.get("retrieval_encoder")
        if isinstance(section, dict):
            configuration = {**configuration, "retrieval_encoder": {**_RETRIEVAL_DEFAULTS, **section}}
        return super().validate_configuration(configuration)

    @classmethod
    def check_configuration(cls, configuration: dict) -> None:
        check_seed(configuration)
        check_positive(configuration, "dim", "buckets", "max_words", "max_length", "proposals", "beam_width")
        check_flags(configuration, "lowercase")
        modes = configuration["modes"]
        if not isinstance(modes, list) or not modes:
            raise ValueError(f"modes: expected a nonempty list drawn from {list(MODES)}, got {modes!r}")
        for mode in modes:
            if mode not in MODES:
                raise ValueError(f"modes: unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
        if len(set(modes)) != len(modes):
            raise ValueError(f"modes: duplicate mode in {modes}")
        section = configuration["retrieval_encoder"]
        if section is None:
            if "retrieval" in modes:
                raise ValueError("retrieval_encoder: the 'retrieval' mode needs a retrieval_encoder section")
            return
        if not isinstance(section, dict):
            raise ValueError(f"retrieval_encoder: expected a mapping or null, got {section!r}")
        unknown = sorted(str(k) for k in set(section) - set(_RETRIEVAL_DEFAULTS))
        if unknown:
            raise ValueError(
                f"retrieval_encoder: unknown field {unknown[0]!r}; valid fields: {', '.join(_RETRIEVAL_DEFAULTS)}"
            )
        check_positive(section, "dim", prefix="retrieval_encoder.")
        check_flags(section, "frozen", prefix="retrieval_encoder.")

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
        mode, payload = checks.envelope(inputs, self._configuration["modes"])
        items, batched = self._items(mode, payload)
        with torch.no_grad():
            out = getattr(self, f"_receipts_{mode}")(items)
        return out if batched else out[0]

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
        self._require("proposal")
        items, batched = self._items("proposal", inputs)
        with torch.no_grad():
            proposals = self.proposer.propose(self.proposer(items), count, self._configuration["beam_width"],
                                              self._configuration["seed"] or 0)
        texts = [[c["text"] for c in candidates] for candidates in proposals]
        return texts if batched else texts[0]

    def verification_logits(self, pairs: Any) -> torch.Tensor:
        """Raw verifier logits ``(pairs, 3)`` in ``LABELS`` order, detached (e.g. to fit the calibration)."""
        self._require("verification")
        items, _ = self._items("verification", pairs)
        with torch.no_grad():
            return self.verifier(items)

    def calibrate_verifier(self, pairs: Any, labels: Any) -> dict:
        """Fit ``verifier.calibration`` on held-out pairs with named labels; returns the fit report."""
        items, batched = self._items("verification", pairs)
        names = [checks.label(t, f"labels[{i}]") for i, t in enumerate(checks.targets_for(labels, len(items), batched))]
        logits = self.verification_logits(items)
        return self.verifier.calibration.fit(logits, [LABELS.index(n) for n in names])

    def episodic_index(self, records: Any = ()) -> EpisodicIndex:
        """A new episodic index over ``records`` (``[{"source_id", "text"}]``) embedded by the episodic encoder."""
        return EpisodicIndex(self, records)

    # -- losses outside the trainer ------------------------------------------------------------------------
    def ranking_loss(self, inputs: Any, targets: Any) -> torch.Tensor:
        return self._loss({"mode": "rank", "inputs": inputs}, targets)

    def verification_loss(self, pairs: Any, labels: Any) -> torch.Tensor:
        return self._loss({"mode": "verification", "inputs": pairs}, labels)

    def proposal_loss(self, inputs: Any, targets: Any) -> torch.Tensor:
        return self._loss({"mode": "proposal", "inputs": inputs}, targets)

    def retrieval_loss(self, inputs: Any, mask: Any) -> torch.Tensor:
        return self._loss({"mode": "retrieval", "inputs": inputs}, mask)

    def _loss(self, inputs: Any, targets: Any) -> torch.Tensor:
        plan = self.plan_capture(inputs, targets)
        return self.losses()[plan.loss](self.objective(plan.inputs), plan.target)

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
        mode, payload = checks.envelope(inputs, self._configuration["modes"])
        if mode == "retrieval" and self._configuration["retrieval_encoder"]["frozen"]:
            raise ValueError(
                "retrieval_encoder.frozen: the retrieval encoder is frozen and cannot be trained; call "
                "model.unfreeze_retrieval() (or configure retrieval_encoder={'frozen': false}) and build a new Trainer"
            )
        items, batched = self._items(mode, payload)
        targets = checks.targets_for(targets, len(items), batched)
        field = (lambda i: f"targets[{i}]") if batched else (lambda i: "targets")
        if mode == "rank":
            target = distribution_tensor([
                check_ranking_target(t, [h["id"] for h in e["hypotheses"]], field=field(i))
                for i, (e, t) in enumerate(zip(items, targets, strict=True))
            ])
            batch = {"mode": mode, "examples": items}
        elif mode == "verification":
            target = [checks.label(t, field(i)) for i, t in enumerate(targets)]
            batch = {"mode": mode, "pairs": items}
        elif mode == "proposal":
            target = [checks.proposal_target(t, field(i)) for i, t in enumerate(targets)]
            batch = {"mode": mode, "examples": items}
        else:
            target = group_target([checks.retrieval_mask(t, g, field(i))
                                   for i, (g, t) in enumerate(zip(items, targets, strict=True))])
            batch = {"mode": mode, "groups": items}
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
    def _require(self, mode: str) -> None:
        if mode not in self._configuration["modes"]:
            raise ValueError(f"mode: {mode!r} is not enabled; configuration 'modes' are {self._configuration['modes']}")

    def _items(self, mode: str, payload: Any) -> tuple[list[dict], bool]:
        """Validated, normalized items of one mode and whether they were given as a list."""
        raw, batched = checks.batch(payload)
        field = (lambda i: f"inputs[{i}]") if batched else (lambda i: "inputs")
        if mode == "rank":
            items = [check_ranking_input(x, field=field(i)) for i, x in enumerate(raw)]
        elif mode == "verification":
            items = [checks.pair(x, field(i)) for i, x in enumerate(raw)]
        elif mode == "proposal":
            items = [check_ranking_input(x, field=field(i), require_candidates=False) for i, x in enumerate(raw)]
            items = [{"question": x["question"], "evidence": x["evidence"]} for x in items]
        else:
            items = [checks.retrieval_group(x, field(i)) for i, x in enumerate(raw)]
        return items, batched


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
