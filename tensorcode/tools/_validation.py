"""What each tool accepts, per mode: the one place that reads inputs and targets, importable without torch.

The tools' ``plan_capture`` and ``forward`` read their inputs with ``read_inputs`` and their targets with
``read_targets``, and ``validate_inputs``/``validate_target`` (``tensorcode.tools``) call the same two functions,
so a submission checked without a model gets the verdict and the message ``Trainer.capture`` would give.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import _checks as check
from ._configuration import CONFIGS
from ._registry import MODES, check_mode, check_name

__all__ = ["Request", "configuration_for", "read_inputs", "read_targets", "validate_inputs", "validate_target"]


@dataclass(frozen=True)
class Request:
    """Checked inputs of one call: the mode, the normalized items, and whether they came as a list."""

    mode: str
    items: list
    batched: bool


def validate_inputs(name: str, mode: str, inputs: Any, configuration: dict | None = None) -> Any:
    """One example's ``inputs`` (without the mode envelope) checked as ``name`` in ``mode`` would check them.

    ``configuration`` is the tool's configuration (defaults for missing fields; its ``limits`` apply). Returns
    the normalized inputs; raises ``ValueError`` naming the field. Never imports torch.
    """
    config = configuration_for(name, mode, configuration)
    return _single(name, mode, inputs, config).items[0]


def validate_target(name: str, mode: str, inputs: Any, target: Any, configuration: dict | None = None) -> Any:
    """``target`` for one example's ``inputs``, checked exactly as ``Trainer.capture`` checks it.

    Returns the target in JSON form: rank modes give the candidate id (for an id or an index) or the normalized
    distribution; planner outcomes give ``{"candidate_id", "outcome"}`` or the list of outcomes; text, labels and
    masks come back as checked. Raises ``ValueError`` with the message ``capture`` gives. Never imports torch.
    """
    config = configuration_for(name, mode, configuration)
    request = _single(name, mode, inputs, config)
    checked = read_targets(name, request, target, config)[0]
    item = request.items[0]
    if mode == "rank":
        ids = [c["id"] for c in item[_CANDIDATES[name]]]
        if isinstance(target, str):
            return target
        if isinstance(target, int):
            return ids[target]
        return checked
    if mode == "outcomes":
        if isinstance(target, dict):
            (index, value), = checked.items()
            return {"candidate_id": item["plans"][index]["id"], "outcome": value}
        return [checked[k] for k in range(len(item["plans"]))]
    return checked


def configuration_for(name: str, mode: str, configuration: dict | None) -> dict:
    """The full configuration (defaults filled in, bounds checked) of a ``name`` tool used in ``mode``."""
    check_mode(check_name(name, "name"), mode)
    cls = CONFIGS[name]
    return cls.from_mapping(cls.for_mode(mode, {} if configuration is None else configuration)).as_dict()


def read_inputs(name: str, inputs: Any, configuration: dict) -> Request:
    """Open the mode envelope (plain inputs select the default mode), check the mode and every input."""
    mode, payload = _envelope(name, inputs, configuration)
    limits = configuration["limits"]
    items, batched = check.batch(payload, "inputs", limits["max_batch"], item=str if name == "chatbot" else dict)
    read = _INPUTS[(name, mode)]
    return Request(mode, [read(x, f"inputs[{i}]" if batched else "inputs", configuration)
                          for i, x in enumerate(items)], batched)


def read_targets(name: str, request: Request, targets: Any, configuration: dict) -> list:
    """One checked target per input of ``request`` (a single input takes a single target)."""
    if name == "investigator" and request.mode == "retrieval" and configuration["retrieval_encoder"]["frozen"]:
        raise ValueError(
            "retrieval_encoder.frozen: the retrieval encoder is frozen and cannot be trained; call "
            "model.unfreeze_retrieval() (or configure retrieval_encoder={'frozen': false}) and build a new Trainer"
        )
    targets = check.targets_for(targets, len(request.items), request.batched)
    read = _TARGETS[(name, request.mode)]
    return [read(t, item, f"targets[{i}]" if request.batched else "targets", configuration)
            for i, (item, t) in enumerate(zip(request.items, targets, strict=True))]


def _single(name: str, mode: str, inputs: Any, configuration: dict) -> Request:
    if isinstance(inputs, (list, tuple)):
        raise ValueError("inputs: expected one example's inputs, got a list; validate each example on its own")
    return read_inputs(name, {"mode": mode, "inputs": inputs}, configuration)


# -- mode envelopes --------------------------------------------------------------------------------------------
def _envelope(name: str, inputs: Any, configuration: dict) -> tuple[str, Any]:
    """``(mode, payload)``: ``{"mode", "inputs"}`` selects a mode; a list of one-example envelopes of one mode is
    a batch of that mode; anything else is the tool's default mode."""
    if isinstance(inputs, dict) and "mode" in inputs:
        return _open(name, inputs, configuration, "inputs")
    if isinstance(inputs, (list, tuple)) and any(isinstance(x, dict) and "mode" in x for x in inputs):
        opened: list[tuple[str, Any]] = []
        for i, item in enumerate(inputs):
            if not (isinstance(item, dict) and "mode" in item):
                raise ValueError(f"inputs[{i}]: a batch of envelopes needs an envelope {{'mode', 'inputs'}} here")
            mode, payload = _open(name, item, configuration, f"inputs[{i}]")
            if opened and mode != opened[0][0]:
                raise ValueError(f"inputs[{i}]['mode']: a batch holds one mode; got {mode!r} after {opened[0][0]!r}")
            if isinstance(payload, (list, tuple)):
                raise ValueError(f"inputs[{i}]['inputs']: each envelope of a batch holds one example")
            opened.append((mode, payload))
        return opened[0][0], [payload for _, payload in opened]
    mode = configuration["mode"] if name == "scene" else MODES[name][0]
    _enabled(name, mode, configuration, "mode", plain=True)
    return mode, inputs


def _open(name: str, envelope: dict, configuration: dict, field: str) -> tuple[str, Any]:
    extra = sorted(str(k) for k in envelope if k not in ("mode", "inputs"))
    if extra:
        raise ValueError(f"{field}: unknown envelope key {extra[0]!r}; valid keys: inputs, mode")
    mode = envelope["mode"]
    where = "mode" if field == "inputs" else f"{field}['mode']"
    check_mode(name, mode, where)
    _enabled(name, mode, configuration, where)
    if "inputs" not in envelope:
        raise ValueError(f"{field}: the envelope is missing 'inputs'")
    return mode, envelope["inputs"]


def _enabled(name: str, mode: str, configuration: dict, where: str, plain: bool = False) -> None:
    if name == "scene" and mode != configuration["mode"]:
        raise ValueError(
            f"{where}: this Scene is configured for {configuration['mode']!r}; use Scene(mode={mode!r}) for "
            f"{mode!r} inputs"
        )
    if name == "investigator" and mode not in configuration["modes"]:
        if plain:
            raise ValueError(
                f"{where}: plain inputs select {mode!r}, which is not enabled; configuration 'modes' are "
                f"{configuration['modes']}"
            )
        raise ValueError(
            f"{where}: {mode!r} is not enabled in this Investigator; its configuration 'modes' are "
            f"{configuration['modes']}"
        )


# -- inputs per mode -------------------------------------------------------------------------------------------
def _ranking(question: str, candidates: str, *, keep_candidates: bool) -> Callable[[Any, str, dict], dict]:
    """``{question, "evidence"?, candidates}``; without ``keep_candidates`` the candidates are optional and
    dropped (a generator reads only the question and the evidence)."""

    def read(value: Any, field: str, configuration: dict) -> dict:
        limits = configuration["limits"]
        chars = limits["max_text_chars"]
        if keep_candidates:
            check.mapping(value, field, (question, candidates), ("evidence",))
        else:
            check.mapping(value, field, (question,), ("evidence", candidates))
        item = {
            question: check.text(value[question], f"{field}[{question!r}]", chars),
            "evidence": check.records(
                value.get("evidence", []), f"{field}['evidence']", "source_id", limit=limits["max_evidence"],
                limit_name="max_evidence", text_limit=chars, allow_empty=True,
            ),
        }
        if keep_candidates:
            item[candidates] = check.records(
                value[candidates], f"{field}[{candidates!r}]", "id", limit=limits["max_candidates"],
                limit_name="max_candidates", text_limit=chars, allow_empty=False,
            )
        elif candidates in value:
            # Alternatives the reviewer saw are not evidence for the generator, but they must still be sound.
            check.records(
                value[candidates], f"{field}[{candidates!r}]", "id", limit=limits["max_candidates"],
                limit_name="max_candidates", text_limit=chars, allow_empty=True,
            )
        return item

    return read


def _pair(value: Any, field: str, configuration: dict) -> dict:
    chars = configuration["limits"]["max_text_chars"]
    check.mapping(value, field, ("premise", "hypothesis"))
    return {"premise": check.text(value["premise"], f"{field}['premise']", chars),
            "hypothesis": check.text(value["hypothesis"], f"{field}['hypothesis']", chars)}


def _group(value: Any, field: str, configuration: dict) -> dict:
    limits = configuration["limits"]
    check.mapping(value, field, ("queries", "documents"))
    return {
        key: check.texts(value[key], f"{field}[{key!r}]", limit=limits[f"max_{key}"], limit_name=f"max_{key}",
                         text_limit=limits["max_text_chars"])
        for key in ("queries", "documents")
    }


def _image(ranking: bool) -> Callable[[Any, str, dict], dict]:
    keys = ("pixels", "source_id", "question", *(("candidates",) if ranking else ()))

    def read(value: Any, field: str, configuration: dict) -> dict:
        limits = configuration["limits"]
        chars = limits["max_text_chars"]
        if not ranking and isinstance(value, dict) and "candidates" in value:
            raise ValueError(
                f"{field}['candidates']: language mode describes the image; use Scene() to rank candidates"
            )
        check.mapping(value, field, keys)
        item = {
            "pixels": check.pixels(value["pixels"], f"{field}['pixels']", limits["max_image_side"]),
            "source_id": check.text(value["source_id"], f"{field}['source_id']", chars),
            "question": check.text(value["question"], f"{field}['question']", chars),
        }
        if ranking:
            item["candidates"] = check.records(
                value["candidates"], f"{field}['candidates']", "id", limit=limits["max_candidates"],
                limit_name="max_candidates", text_limit=chars, allow_empty=False,
            )
        return item

    return read


def _message(value: Any, field: str, configuration: dict) -> str:
    return check.text(value, field, configuration["limits"]["max_text_chars"])


_INPUTS: dict[tuple[str, str], Callable[[Any, str, dict], Any]] = {
    ("decision", "rank"): _ranking("question", "hypotheses", keep_candidates=True),
    ("investigator", "rank"): _ranking("question", "hypotheses", keep_candidates=True),
    ("investigator", "verification"): _pair,
    ("investigator", "proposal"): _ranking("question", "hypotheses", keep_candidates=False),
    ("investigator", "retrieval"): _group,
    ("planner", "outcomes"): _ranking("goal", "plans", keep_candidates=True),
    ("planner", "proposal"): _ranking("goal", "plans", keep_candidates=False),
    ("scene", "rank"): _image(ranking=True),
    ("scene", "language"): _image(ranking=False),
    ("chatbot", "reply"): _message,
}


# -- targets per mode ------------------------------------------------------------------------------------------
_CANDIDATES = {"decision": "hypotheses", "investigator": "hypotheses", "scene": "candidates", "planner": "plans"}
_NOUNS = {"decision": "hypothesis", "investigator": "hypothesis", "scene": "candidate", "planner": "plan",
          "chatbot": "reply"}


def _rank_target(name: str) -> Callable[[Any, dict, str, dict], list[float]]:
    def read(target: Any, item: dict, field: str, configuration: dict) -> list[float]:
        return check.ranking_target(target, [c["id"] for c in item[_CANDIDATES[name]]], field, _NOUNS[name])

    return read


def _text_target(noun: str) -> Callable[[Any, dict, str, dict], str]:
    def read(target: Any, item: Any, field: str, configuration: dict) -> str:
        return check.reviewed_text(target, field, configuration["max_length"], noun)

    return read


def _label_target(target: Any, item: dict, field: str, configuration: dict) -> str:
    return check.label(target, field)


def _mask_target(target: Any, item: dict, field: str, configuration: dict) -> list[list[bool]]:
    return check.mask(target, (len(item["queries"]), len(item["documents"])), field)


def _outcome_target(target: Any, item: dict, field: str, configuration: dict) -> dict[int, float]:
    return check.outcome(target, [p["id"] for p in item["plans"]], field)


_TARGETS: dict[tuple[str, str], Callable[[Any, Any, str, dict], Any]] = {
    ("decision", "rank"): _rank_target("decision"),
    ("investigator", "rank"): _rank_target("investigator"),
    ("investigator", "verification"): _label_target,
    ("investigator", "proposal"): _text_target("hypothesis"),
    ("investigator", "retrieval"): _mask_target,
    ("planner", "outcomes"): _outcome_target,
    ("planner", "proposal"): _text_target("plan"),
    ("scene", "rank"): _rank_target("scene"),
    ("scene", "language"): _text_target("description"),
    ("chatbot", "reply"): _text_target("reply"),
}
