"""Tool configurations: one frozen dataclass per tool, with defaults and documented upper bounds in one place.

Importable without torch, so a manifest's configuration (and a web form's) is checked before anything is built.
``Config.from_mapping(mapping)`` fills in defaults, refuses an unknown field naming the valid ones, and refuses a
value of the wrong type or outside its bounds naming the field; ``as_dict()`` gives the JSON-safe mapping a tool
stores in ``tool.json``. Upper bounds keep an edited number in ``tool.json`` from allocating gigabytes.

Every tool has a ``limits`` section: the largest request it accepts (see ``Limits``), checked by
``tensorcode.tools.validate_inputs`` and by the tool itself before any large allocation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

__all__ = [
    "ChatbotConfig", "Configuration", "DecisionConfig", "InvestigatorConfig", "Limits", "PlannerConfig",
    "RetrievalEncoderConfig", "SceneConfig",
]

SEED_RANGE = (-(2**63), 2**64 - 1)


def integer(default: int, low: int, high: int) -> Any:
    return field(default=default, metadata={"kind": "int", "low": low, "high": high})


def flag(default: bool) -> Any:
    return field(default=default, metadata={"kind": "bool"})


def choice(default: str, *options: str) -> Any:
    return field(default=default, metadata={"kind": "choice", "options": options})


def seed() -> Any:
    return field(default=0, metadata={"kind": "seed"})


def section(cls: type, *, nullable: bool = False) -> Any:
    return field(default_factory=cls, metadata={"kind": "section", "type": cls, "nullable": nullable})


class Configuration:
    """Base of the configuration dataclasses: parsing from JSON data and back."""

    @classmethod
    def from_mapping(cls, mapping: Any, prefix: str = "") -> Configuration:
        if not isinstance(mapping, dict):
            where = prefix.rstrip(".") or "configuration"
            raise ValueError(f"{where}: expected a mapping, got {type(mapping).__name__}")
        names = [f.name for f in fields(cls)]
        unknown = sorted(str(k) for k in mapping if k not in names)
        if unknown:
            where = f"{prefix.rstrip('.')}: unknown field" if prefix else f"{cls.TOOL}: unknown configuration field"
            raise ValueError(f"{where} {unknown[0]!r}; valid fields: {', '.join(sorted(names))}")
        values = {}
        for f in fields(cls):
            if f.name in mapping:
                values[f.name] = _check(f, mapping[f.name], prefix + f.name)
            elif f.metadata.get("kind") == "section":
                values[f.name] = f.default_factory()
        config = cls(**values)
        config.check(prefix)
        return config

    @classmethod
    def defaults(cls) -> dict:
        return cls().as_dict()

    @classmethod
    def for_mode(cls, mode: str, configuration: dict) -> dict:
        """The configuration of a fresh tool for ``mode``; tools whose configuration holds modes override it."""
        return dict(configuration)

    def check(self, prefix: str = "") -> None:
        """Relations between fields; raise ``ValueError`` naming the field."""

    def as_dict(self) -> dict:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Configuration):
                value = value.as_dict()
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out


def _check(f: dataclasses.Field, value: Any, name: str) -> Any:
    kind = f.metadata.get("kind")
    if kind == "int":
        low, high = f.metadata["low"], f.metadata["high"]
        if isinstance(value, bool) or not isinstance(value, int):
            noun = "a positive integer" if low == 1 else f"an integer >= {low}"
            raise ValueError(f"{name}: expected {noun}, got {value!r}")
        if value < low:
            noun = "a positive integer" if low == 1 else ("a nonnegative integer" if low == 0 else f">= {low}")
            raise ValueError(f"{name}: expected {noun}, got {value!r}")
        if value > high:
            raise ValueError(f"{name}: {value} is over the upper bound {high}")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"{name}: expected true or false, got {value!r}")
        return value
    if kind == "choice":
        options = f.metadata["options"]
        if not isinstance(value, str) or value not in options:
            raise ValueError(f"{name}: expected one of {', '.join(map(repr, options))}, got {value!r}")
        return value
    if kind == "seed":
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{name}: expected an integer or null, got {value!r}")
        if value is not None and not SEED_RANGE[0] <= value <= SEED_RANGE[1]:
            raise ValueError(f"{name}: {value} is outside the seed range [-2**63, 2**64 - 1]")
        return value
    if kind == "modes":
        return _check_modes(value, name)
    if kind == "section":
        if value is None and f.metadata["nullable"]:
            return None
        if not isinstance(value, dict):
            noun = "a mapping or null" if f.metadata["nullable"] else "a mapping"
            raise ValueError(f"{name}: expected {noun}, got {value!r}")
        return f.metadata["type"].from_mapping(value, f"{name}.")
    raise AssertionError(f"{name}: field without a kind")  # pragma: no cover


@dataclass(frozen=True)
class Limits(Configuration):
    """The largest request a tool accepts; larger ones are refused before any allocation.

    - ``max_batch`` (default 256, at most 4096): inputs in one call.
    - ``max_candidates`` (default 32, at most 4096): hypotheses, plans or candidate descriptions per input.
    - ``max_evidence`` (default 16, at most 1024): evidence passages per input.
    - ``max_queries`` (default 32, at most 4096) and ``max_documents`` (default 256, at most 65536): retrieval.
    - ``max_text_chars`` (default 10000, at most 1000000): characters in any one input text.
    - ``max_image_side`` (default 1024, at most 8192): pixels on either side of an input image.
    """

    TOOL: ClassVar[str] = "limits"
    max_batch: int = integer(256, 1, 4096)
    max_candidates: int = integer(32, 1, 4096)
    max_evidence: int = integer(16, 0, 1024)
    max_queries: int = integer(32, 1, 4096)
    max_documents: int = integer(256, 1, 65536)
    max_text_chars: int = integer(10_000, 1, 1_000_000)
    max_image_side: int = integer(1024, 1, 8192)


@dataclass(frozen=True)
class _Text(Configuration):
    seed: int | None = seed()
    dim: int = integer(32, 1, 512)
    buckets: int = integer(4096, 1, 65536)
    max_words: int = integer(64, 1, 512)
    lowercase: bool = flag(True)


@dataclass(frozen=True)
class DecisionConfig(_Text):
    TOOL: ClassVar[str] = "Decision"
    limits: Limits = section(Limits)


@dataclass(frozen=True)
class PlannerConfig(_Text):
    TOOL: ClassVar[str] = "Planner"
    max_length: int = integer(96, 1, 4096)
    prefer: str = choice("max", "max", "min")
    limits: Limits = section(Limits)


@dataclass(frozen=True)
class ChatbotConfig(_Text):
    TOOL: ClassVar[str] = "Chatbot"
    dim: int = integer(64, 1, 512)
    max_length: int = integer(96, 1, 4096)
    history_turns: int = integer(0, 0, 64)
    limits: Limits = section(Limits)


@dataclass(frozen=True)
class RetrievalEncoderConfig(Configuration):
    TOOL: ClassVar[str] = "retrieval_encoder"
    dim: int = integer(32, 1, 512)
    frozen: bool = flag(False)


INVESTIGATOR_MODES = ("rank", "verification", "proposal", "retrieval")


@dataclass(frozen=True)
class InvestigatorConfig(_Text):
    TOOL: ClassVar[str] = "Investigator"
    modes: tuple[str, ...] = field(default=INVESTIGATOR_MODES, metadata={"kind": "modes"})
    max_length: int = integer(48, 1, 4096)
    proposals: int = integer(3, 1, 32)
    beam_width: int = integer(4, 1, 32)
    retrieval_encoder: RetrievalEncoderConfig | None = section(RetrievalEncoderConfig, nullable=True)
    limits: Limits = section(Limits)

    @classmethod
    def for_mode(cls, mode: str, configuration: dict) -> dict:
        """A fresh Investigator for one mode builds only that mode's modules (unless ``modes`` is given)."""
        configuration = dict(configuration)
        modes = configuration.setdefault("modes", [mode])
        if isinstance(modes, list) and mode not in modes:
            raise ValueError(f"modes: {modes} does not include the mode {mode!r}")
        if mode != "retrieval":
            configuration.setdefault("retrieval_encoder", None)
        return configuration

    def check(self, prefix: str = "") -> None:
        modes = self.modes
        if modes == () or "retrieval" not in modes or self.retrieval_encoder is not None:
            return
        raise ValueError(f"{prefix}retrieval_encoder: the 'retrieval' mode needs a retrieval_encoder section")


def _check_modes(value: Any, name: str) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{name}: expected a nonempty list drawn from {list(INVESTIGATOR_MODES)}, got {value!r}")
    for mode in value:
        if mode not in INVESTIGATOR_MODES:
            raise ValueError(f"{name}: unknown mode {mode!r}; valid modes: {', '.join(INVESTIGATOR_MODES)}")
    if len(set(value)) != len(value):
        raise ValueError(f"{name}: duplicate mode in {list(value)}")
    return tuple(value)


@dataclass(frozen=True)
class SceneConfig(Configuration):
    TOOL: ClassVar[str] = "Scene"
    mode: str = choice("rank", "rank", "language")
    seed: int | None = seed()
    image_size: int = integer(32, 1, 512)
    patch_size: int = integer(4, 1, 512)
    channels: int = integer(16, 1, 256)
    dim: int = integer(32, 1, 512)
    heads: int = integer(2, 1, 64)
    layers: int = integer(0, 0, 16)
    buckets: int = integer(4096, 1, 65536)
    max_words: int = integer(32, 1, 512)
    max_length: int = integer(64, 1, 4096)
    limits: Limits = section(Limits)

    @classmethod
    def for_mode(cls, mode: str, configuration: dict) -> dict:
        if configuration.get("mode", mode) != mode:
            raise ValueError(f"mode: configuration mode {configuration['mode']!r} differs from the mode {mode!r}")
        return {**configuration, "mode": mode}

    def check(self, prefix: str = "") -> None:
        size, patch = self.image_size, self.patch_size
        if patch & (patch - 1):
            raise ValueError(f"{prefix}patch_size: expected a power of two, got {patch}")
        if size % patch:
            raise ValueError(f"{prefix}patch_size: {patch} must divide image_size {size}")
        if self.dim % self.heads:
            raise ValueError(f"{prefix}dim: {self.dim} must be divisible by heads {self.heads}")


CONFIGS: dict[str, type[Configuration]] = {
    "chatbot": ChatbotConfig,
    "decision": DecisionConfig,
    "investigator": InvestigatorConfig,
    "planner": PlannerConfig,
    "scene": SceneConfig,
}

