"""Text pieces shared by the tools: an open-vocabulary tokenizer, a word encoder and a greedy generator.

Words are hashed into buckets with a stable hash, so unseen words get distinct ids instead of one shared
"unknown" id; generation works on UTF-8 bytes, so any reviewed text can be a target.
"""

from __future__ import annotations

import itertools
import re
import zlib

import torch
from torch import nn
from torch.nn import functional as F

_WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)

PAD, BOS, EOS = 256, 257, 258
BYTE_VOCAB = 259


class Tokenizer:
    """Hashed words for encoding, UTF-8 bytes for generation. Its state is its configuration."""

    def __init__(self, buckets: int = 4096, lowercase: bool = True, max_words: int = 64):
        self.buckets = buckets
        self.lowercase = lowercase
        self.max_words = max_words

    def pieces(self, text: str) -> list[str]:
        """The words (and punctuation marks) the encoder reads, as written, at most ``max_words``."""
        return _WORD.findall(text)[: self.max_words]

    def spans(self, text: str) -> list[tuple[int, int]]:
        """``(start, end)`` character offsets in ``text`` of each of its :meth:`pieces`."""
        return [match.span() for match in itertools.islice(_WORD.finditer(text), self.max_words)]

    def words(self, text: str) -> list[int]:
        """Word ids in ``1..buckets`` (0 is padding); at least one id for any text."""
        return self.ids(self.pieces(text)) or [1]

    def ids(self, pieces: list[str]) -> list[int]:
        if self.lowercase:
            pieces = [p.lower() for p in pieces]
        return [1 + zlib.crc32(p.encode("utf-8")) % self.buckets for p in pieces]

    def batch(self, texts: list[str], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids, mask)``, both ``(batch, words)``, right-padded with 0."""
        return self.pad([self.words(t) for t in texts], device)

    @staticmethod
    def pad(rows: list[list[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(r) for r in rows)
        # One tensor from padded lists: a tensor and a slice assignment per row cost more than the model.
        ids = torch.tensor([row + [0] * (width - len(row)) for row in rows], dtype=torch.long, device=device)
        return ids, ids != 0

    @staticmethod
    def encode_bytes(text: str) -> list[int]:
        return list(text.encode("utf-8"))

    @staticmethod
    def decode_bytes(ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class TextEncoder(nn.Module):
    """Embeds hashed words with positions; returns per-word states, their mask, and a masked mean."""

    def __init__(self, buckets: int, dim: int, max_words: int = 64):
        super().__init__()
        self.words = nn.Embedding(buckets + 1, dim, padding_idx=0)
        self.positions = nn.Embedding(max_words, dim)
        self.mix = nn.Linear(dim, dim)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        positions = torch.arange(ids.shape[1], device=ids.device)
        states = torch.tanh(self.mix(self.words(ids) + 0.1 * self.positions(positions)))  # (batch, words, dim)
        weights = mask.unsqueeze(-1).to(states.dtype)
        pooled = (states * weights).sum(1) / weights.sum(1).clamp(min=1.0)  # (batch, dim)
        return states, mask, pooled


class Generator(nn.Module):
    """A byte-level GRU decoder conditioned on a context vector; teacher-forced loss, greedy decoding."""

    def __init__(self, dim: int, max_length: int):
        super().__init__()
        self.max_length = max_length
        self.embed = nn.Embedding(BYTE_VOCAB, dim)
        self.init = nn.Linear(dim, dim)
        self.gru = nn.GRU(dim, dim, batch_first=True)
        self.out = nn.Linear(2 * dim, BYTE_VOCAB)

    def loss(self, context: torch.Tensor, targets: list[str]) -> torch.Tensor:
        """Teacher-forced cross-entropy of ``targets`` (texts) given ``context`` ``(batch, dim)``."""
        rows = [Tokenizer.encode_bytes(t)[: self.max_length] + [EOS] for t in targets]
        width = max(len(r) for r in rows)
        gold = torch.full((len(rows), width), PAD, dtype=torch.long)
        for i, row in enumerate(rows):
            gold[i, : len(row)] = torch.tensor(row)
        gold = gold.to(context.device)
        inputs = torch.cat([torch.full_like(gold[:, :1], BOS), gold[:, :-1]], dim=1)
        logits = self.step(context, inputs, self.start(context))[0]  # (batch, steps, vocab)
        return F.cross_entropy(logits.reshape(-1, BYTE_VOCAB), gold.reshape(-1), ignore_index=PAD)

    @torch.no_grad()
    def generate(self, context: torch.Tensor, max_length: int | None = None) -> list[str]:
        """Greedy decoding, one text per context row, at most ``max_length`` bytes."""
        limit = self.max_length if max_length is None else max_length
        batch = context.shape[0]
        token = torch.full((batch, 1), BOS, dtype=torch.long, device=context.device)
        hidden = self.start(context)
        produced = [[] for _ in range(batch)]
        done = [False] * batch
        for _ in range(limit):
            logits, hidden = self.step(context, token, hidden)
            logits[..., PAD] = float("-inf")
            logits[..., BOS] = float("-inf")
            token = logits[:, -1].argmax(-1, keepdim=True)
            for i, t in enumerate(token[:, 0].tolist()):
                if not done[i]:
                    if t == EOS:
                        done[i] = True
                    else:
                        produced[i].append(t)
            if all(done):
                break
        return [Tokenizer.decode_bytes(p) for p in produced]

    def start(self, context: torch.Tensor) -> torch.Tensor:
        """The decoder's initial hidden state for ``context`` ``(batch, dim)``."""
        return torch.tanh(self.init(context)).unsqueeze(0)  # (1, batch, dim)

    def step(self, context, tokens, hidden):
        """Logits ``(batch, steps, vocab)`` for ``tokens`` after ``hidden``, and the next hidden state."""
        states, hidden = self.gru(self.embed(tokens), hidden)  # (batch, steps, dim)
        joined = torch.cat([states, context.unsqueeze(1).expand_as(states)], dim=-1)
        return self.out(joined), hidden
