"""Chatbot: replies to text, keeps conversations apart from its weights, and learns from reviewed replies."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from .. import receipts
from .._atomic import write_atomic
from . import _checks as check
from . import _metrics as metrics
from . import _validation as validation
from ._base import CapturePlan, Tool
from ._configuration import ChatbotConfig
from ._decoding import log_probabilities
from ._receipts import model_id
from ._text import Generator, TextEncoder, Tokenizer

MODES = ("reply",)
CONVERSATION_FORMAT = "tensorcode-conversation"
CONVERSATION_VERSION = 1


class Chatbot(Tool):
    """A small encoder-decoder: ``bot(text) -> reply``, ``bot.generate(texts) -> replies``, and
    ``bot.respond(text)`` -> the reply's ``generation`` receipt (what the reviewer app shows).

    Replies are decoded greedily, at most ``max_length`` UTF-8 bytes. ``bot.start_conversation()`` opens a
    :class:`Conversation`, whose turns are saved and loaded separately from the model: the bot itself holds no
    conversation, so ``save_pretrained``/``from_pretrained`` neither store nor restore one.

    Training (``Trainer.from_tool``): inputs and targets are equal-length lists of text (a single text and
    a single reply are accepted as a batch of one; so is the envelope ``{"mode": "reply", "inputs":
    [...]}``). The loss ``"chatbot.reply"`` is teacher-forced cross-entropy of the reviewed replies under the
    decoder. The recorded call encodes only the inputs; reviewed replies stay targets and never become input.

    Configuration:

    - ``seed`` (int or null, default 0): seeds initialisation.
    - ``dim`` (int, default 64): width of the encoder and the decoder.
    - ``buckets`` (int, default 4096): hashed word-id buckets of the open-vocabulary tokenizer.
    - ``max_words`` (int, default 64): words of input the encoder reads.
    - ``lowercase`` (bool, default true): lowercase input text before hashing words.
    - ``max_length`` (int, default 96): most UTF-8 bytes in a reply (and in a reviewed target reply).
    - ``history_turns`` (int, default 0): earlier exchanges of a conversation prepended to the model input.
      With 0 a message is answered on its own, exactly as ``bot(text)`` answers it, which is what a bot
      trained on single-turn pairs needs; raise it for a bot trained on conversation inputs
      (``turn["input"]``).
    - ``limits`` (mapping): the largest request accepted (``max_batch``, ``max_text_chars``); see
      ``tensorcode.tools.Limits``.

    Upper bounds: ``dim`` 512, ``buckets`` 65536, ``max_words`` 512, ``max_length`` 4096, ``history_turns`` 64.
    """

    NAME: ClassVar[str] = "chatbot"
    CONFIG: ClassVar[type[ChatbotConfig]] = ChatbotConfig
    FIELDS: ClassVar[dict[str, Any]] = ChatbotConfig.defaults()

    def build(self) -> None:
        config = self._configuration
        dim = config["dim"]
        self.tokenizer = Tokenizer(config["buckets"], config["lowercase"], config["max_words"])
        self.encoder = TextEncoder(config["buckets"], dim, config["max_words"])
        self.summary = nn.Linear(2 * dim, dim)
        self.generator = Generator(dim, config["max_length"])

    # -- prediction ----------------------------------------------------------------------------------------
    def forward(self, text: str | list[str]) -> str | list[str]:
        """The reply to ``text``, or the list of replies to a list of texts."""
        if isinstance(text, (list, tuple)):
            return self.generate(text)
        return self.generate([self._text(text, "text")])[0]

    def generate(self, texts: list[str]) -> list[str]:
        """Greedy replies to a batch of texts, one batched forward."""
        if not isinstance(texts, (list, tuple)):
            raise ValueError(f"texts: expected a list of texts, got {type(texts).__name__}")
        limits = self._configuration["limits"]
        texts = check.texts(texts, "texts", limit=limits["max_batch"], limit_name="max_batch",
                            text_limit=limits["max_text_chars"])
        with torch.no_grad():
            return self.generator.generate(self._context(texts))

    def respond(self, text: str) -> dict:
        """The ``generation`` receipt (:mod:`tensorcode.receipts`) of the reply to ``text``: the reply as
        ``text``, its log-probability under the decoder, and how much each input word mattered to it.

        The model has no attention layer to report, so the receipt measures instead: the text attention has one
        source, ``"input"`` (the message), whose word spans are weighted by how far the reply's log-probability
        falls when that word is left out (occlusion), normalised to sum to one (uniform when no word matters).
        One batched forward over the text and its variants.
        """
        text = self._text(text, "text")
        ids = self.tokenizer.ids(self.tokenizer.pieces(text))
        rows = [ids or [1]] + [(ids[:i] + ids[i + 1 :]) or [1] for i in range(len(ids))]
        with torch.no_grad():
            context = self._encode(*self.tokenizer.pad(rows, self.device))  # (1 + words, dim)
            reply = self.generator.generate(context[:1])[0]
            scores = log_probabilities(self.generator, context, [reply] * len(rows))
        drops = [max(0.0, scores[0] - s) for s in scores[1:]]
        total = sum(drops)
        weights = [d / total for d in drops] if total > 0 else [1.0 / len(drops)] * len(drops)
        spans = [(start, end, w) for (start, end), w in zip(self.tokenizer.spans(text), weights, strict=True)]
        return receipts.generation(
            self.NAME, "reply", model_id(self), [reply], scores[:1], receipts.text_attention([("input", 1.0, spans)])
        )

    def start_conversation(self) -> Conversation:
        """A new, empty conversation with this bot."""
        return Conversation(self)

    def reply_loss(self, inputs: Any, targets: Any) -> torch.Tensor:
        """Teacher-forced loss of reviewed replies ``targets`` to ``inputs`` (same forms as ``capture``)."""
        return self.loss(inputs, targets)

    # -- training protocol ---------------------------------------------------------------------------------
    def plan_capture(self, inputs: Any, targets: Any) -> CapturePlan:
        request = validation.read_inputs(self.NAME, inputs, self._configuration)
        replies = validation.read_targets(self.NAME, request, targets, self._configuration)
        texts = request.items
        return CapturePlan(self.NAME, {"mode": "reply", "texts": texts}, replies, "chatbot.reply", len(texts))

    def objective(self, batch: Any) -> dict[str, torch.Tensor]:
        """``{"context": (batch, dim)}``: the encoded inputs the decoder is conditioned on."""
        if not isinstance(batch, dict) or batch.get("mode") != "reply":
            raise ValueError("batch: expected {'mode': 'reply', 'texts': [...]} from Chatbot.prepare_capture")
        return {"context": self._context(list(batch["texts"]))}

    def losses(self) -> dict:
        return {"chatbot.reply": self._reply_loss}

    def evaluation_metrics(self) -> dict:
        return {"chatbot.reply": lambda output, target: metrics.exact_match(self.generator, output["context"], target)}

    # -- internals -----------------------------------------------------------------------------------------
    def _context(self, texts: list[str]) -> torch.Tensor:
        return self._encode(*self.tokenizer.batch(texts, self.device))

    def _encode(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        states, mask, pooled = self.encoder(ids, mask)  # (batch, words, dim), (batch, dim)
        peak = states.masked_fill(~mask.unsqueeze(-1), -1.0).max(dim=1).values  # (batch, dim)
        return torch.tanh(self.summary(torch.cat([pooled, peak], dim=-1)))  # (batch, dim)

    def _reply_loss(self, output: dict[str, torch.Tensor], target: list[str]) -> torch.Tensor:
        return self.generator.loss(output["context"], list(target))

    def _text(self, value: Any, field: str) -> str:
        return check.text(value, field, self._configuration["limits"]["max_text_chars"])


class Conversation:
    """A conversation with a :class:`Chatbot`: the turns so far, kept and saved apart from the model.

    Each turn records ``user`` (the message), ``reply`` and ``input`` (exactly what the model read: the
    message after up to ``history_turns`` earlier exchanges), so a reviewer's corrected reply can be captured
    against the same input the bot saw: ``trainer.capture([turn["input"]], [corrected], source=...)``.
    """

    def __init__(self, bot: Chatbot, turns: list[dict] | None = None):
        if not isinstance(bot, Chatbot):
            raise ValueError(f"bot: a Conversation needs a Chatbot, got {type(bot).__name__}")
        self.bot = bot
        self._turns = [dict(t) for t in _check_turns(turns or [], "turns")]

    @property
    def turns(self) -> list[dict]:
        """A copy of the turns: ``[{"user", "reply", "input"}, ...]``, oldest first."""
        return [dict(t) for t in self._turns]

    def say(self, text: str) -> str:
        """Send ``text``, record the turn and return the bot's reply."""
        prompt = self.prompt(text)
        reply = self.bot.generate([prompt])[0]
        self._turns.append({"user": text, "reply": reply, "input": prompt})
        return reply

    def prompt(self, text: str) -> str:
        """The model input for ``text`` now: recent exchanges (as many as fit the encoder) and the message."""
        self.bot._text(text, "text")
        keep = self.bot.configuration()["history_turns"]
        history = self._turns[max(0, len(self._turns) - keep) :] if keep else []
        limit = self.bot.tokenizer.max_words
        prompt = text
        for turn in reversed(history):
            longer = f"{turn['user']}\n{turn['reply']}\n{prompt}"
            # The tokenizer keeps the first max_words words; stop before history would push the message out.
            if len(self.bot.tokenizer.words(longer)) >= limit:
                break
            prompt = longer
        return prompt

    def save(self, path: str | os.PathLike) -> None:
        """Write the conversation (turns only, no weights) as JSON, atomically."""
        document = {
            "format": CONVERSATION_FORMAT,
            "version": CONVERSATION_VERSION,
            "tool": self.bot.NAME,
            "turns": self._turns,
        }
        write_atomic(path, json.dumps(document, indent=2, ensure_ascii=False))

    @classmethod
    def load(cls, path: str | os.PathLike, bot: Chatbot) -> Conversation:
        """Restore a saved conversation and continue it with ``bot`` (any Chatbot, e.g. updated weights)."""
        path = Path(path)
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: cannot read conversation: {exc}") from exc
        if (
            not isinstance(document, dict)
            or document.get("format") != CONVERSATION_FORMAT
            or document.get("version") != CONVERSATION_VERSION
        ):
            raise ValueError(f"{path}: not a {CONVERSATION_FORMAT} version {CONVERSATION_VERSION} file")
        return cls(bot, _check_turns(document.get("turns"), f"{path}: turns"))


def _check_turns(turns: Any, field: str) -> list[dict]:
    if not isinstance(turns, list):
        raise ValueError(f"{field}: expected a list of turns, got {type(turns).__name__}")
    checked = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or set(turn) != {"user", "reply", "input"}:
            raise ValueError(f"{field}[{i}]: a turn is a mapping with exactly 'user', 'reply' and 'input'")
        for key in ("user", "input"):
            check.text(turn[key], f"{field}[{i}][{key!r}]")
        if not isinstance(turn["reply"], str):
            raise ValueError(f"{field}[{i}]['reply']: expected text, got {type(turn['reply']).__name__}")
        checked.append({"user": turn["user"], "reply": turn["reply"], "input": turn["input"]})
    return checked
