"""Scoring candidates against a question and evidence sources, with attention over the sources.

Shared by the tools that rank supplied alternatives (Decision's hypotheses, Planner's plans; usable for an
Investigator's ranking mode). Inputs and targets are checked before they get here (``_validation``). Two pieces:

- the model: :class:`EvidenceRanker` scores every candidate with attention over the evidence sources
  (:class:`RankingOutput`), and :meth:`EvidenceRanker.context` summarises a question and its evidence into one
  vector (for a generator).
- training and receipts: :func:`soft_cross_entropy` (cross-entropy against target distributions, padding
  ignored), :func:`distribution_tensor`, and :func:`ranking_receipt` / :func:`candidate_attention` (the
  ``ranking`` receipt a reviewer reads, with attention per source and per word).

How a candidate is scored: a source's relevance to the question and a candidate's match with a source are
token-level soft matches (each query token's best-matching source token, as in ColBERT's late interaction), so
a candidate naming what a relevant source says scores high even for word combinations never seen in training.
Candidate ``k``'s score is ``direct(question, k) + logsumexp_j(relevance_j + match_kj)``: a soft "some source
is relevant to the question and supports the candidate". A source's relevance also has a learned salience
term (its content alone: an alert matters more than chatter). The softmax inside that logsumexp is the
attention reported for ``k`` (where the model looked); with no evidence the score is the direct term alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .. import receipts
from ._receipts import model_id, text_attention
from ._text import TextEncoder, Tokenizer

__all__ = [
    "NEGATIVE",
    "EvidenceRanker",
    "RankingOutput",
    "candidate_attention",
    "distribution_tensor",
    "ranking_receipt",
    "soft_cross_entropy",
]

# Padding scores are a large finite negative rather than -inf: outputs stay finite (they may be snapshotted)
# and a fully padded row cannot turn gradients into NaN. It also fits in float16.
NEGATIVE = -1.0e4


# -- model ---------------------------------------------------------------------------------------------------
@dataclass
class RankingOutput:
    """What :class:`EvidenceRanker` computes for a batch (``K`` candidates, ``S`` sources, padded).

    ``scores`` (batch, K): padded entries hold :data:`NEGATIVE`. ``candidate_mask`` (batch, K) and
    ``source_mask`` (batch, S) are boolean. ``attention`` (batch, K, S): per candidate, a distribution over
    its example's sources (all zero without evidence). ``relevance`` (batch, S): attention of the question
    alone. ``features`` (batch, K, feature_dim): candidate, question, attended evidence and their product, for
    heads that predict something other than a ranking score (Planner's outcomes). ``words`` (batch, K, S,
    words), only when asked for: per candidate and source, each source word's share of the question and
    candidate words whose best match in that source it is (the words the score read), summing to one.
    """

    scores: torch.Tensor
    candidate_mask: torch.Tensor
    attention: torch.Tensor
    source_mask: torch.Tensor
    relevance: torch.Tensor
    features: torch.Tensor
    words: torch.Tensor | None = None


class EvidenceRanker(nn.Module):
    """Scores candidates given a question and evidence sources, attending over the sources.

    ``encoder`` is any module with :class:`~tensorcode.tools._text.TextEncoder`'s interface
    (``encoder(ids, mask) -> (states, mask, pooled)``); by default a new one is built, pass one to share word
    embeddings with other parts of a tool. ``feature_dim`` is ``4 * dim``.
    """

    def __init__(self, tokenizer: Tokenizer, dim: int, encoder: nn.Module | None = None):
        super().__init__()
        self.tokenizer = tokenizer
        self.dim = dim
        self.feature_dim = 4 * dim
        if encoder is None:
            encoder = TextEncoder(tokenizer.buckets, dim, tokenizer.max_words)
        self.encoder = encoder
        self.question_key = nn.Linear(dim, dim, bias=False)
        self.source_key = nn.Linear(dim, dim, bias=False)
        self.candidate_key = nn.Linear(dim, dim, bias=False)
        self.source_value = nn.Linear(dim, dim, bias=False)
        self.relevance_scale = nn.Parameter(torch.tensor(1.0))
        self.match_scale = nn.Parameter(torch.tensor(1.0))
        # A source can matter by its content alone (an alert vs. chatter), whatever the question's wording.
        self.salience = nn.Linear(dim, 1)
        self.direct = nn.Sequential(nn.Linear(3 * dim, dim), nn.Tanh(), nn.Linear(dim, 1))
        with torch.no_grad():
            # Start every key projection at the identity (plus the default noise) so token matching works
            # from the first step; training then learns which words should match.
            for layer in (self.question_key, self.source_key, self.candidate_key, self.source_value):
                layer.weight.add_(torch.eye(dim))

    def forward(
        self, questions: list[str], evidence: list[list[str]], candidates: list[list[str]], *, words: bool = False
    ) -> RankingOutput:
        """Score ``candidates[b]`` (texts) for ``questions[b]`` given the source texts ``evidence[b]``.

        With ``words=True`` the output also holds the word-level attention a receipt reports.
        """
        question, question_tokens, question_mask = self._encode_flat(questions)
        sources, source_tokens, token_mask, source_mask = self._encode_groups(evidence)
        cands, cand_tokens, cand_tokens_mask, cand_mask = self._encode_groups(candidates)
        relevance = self._relevance(question_tokens, question_mask, sources, source_tokens, token_mask)
        match = (
            self.match_scale
            * self.dim**-0.5
            * _late_interaction(
                self.candidate_key(cand_tokens).unsqueeze(2),
                cand_tokens_mask.unsqueeze(2),
                self.source_key(source_tokens).unsqueeze(1),
                token_mask.unsqueeze(1),
            )
        )  # (batch, K, S)
        joint = (relevance.unsqueeze(1) + match).masked_fill(~source_mask.unsqueeze(1), NEGATIVE)
        has_source = source_mask.any(-1, keepdim=True)  # (batch, 1)
        attention = torch.softmax(joint, dim=-1) * source_mask.unsqueeze(1)  # (batch, K, S)
        support = torch.logsumexp(joint, dim=-1) if joint.shape[-1] else joint.new_zeros(joint.shape[:-1])
        support = torch.where(has_source, support, torch.zeros_like(support))  # (batch, K)

        q = question.unsqueeze(1).expand_as(cands)  # (batch, K, dim)
        direct = self.direct(torch.cat([q, cands, q * cands], dim=-1)).squeeze(-1)  # (batch, K)
        scores = (direct + support).masked_fill(~cand_mask, NEGATIVE)

        attended = attention @ self.source_value(sources)  # (batch, K, dim)
        features = torch.cat([cands, q, attended, cands * attended], dim=-1)  # (batch, K, 4 * dim)
        relevance_weights = _masked_softmax(relevance, source_mask)
        chosen = None
        if words:
            asked = _choices(
                self.question_key(question_tokens).unsqueeze(1), question_mask.unsqueeze(1),
                self.source_key(source_tokens), token_mask,
            )  # (batch, S, words)
            matched = _choices(
                self.candidate_key(cand_tokens).unsqueeze(2), cand_tokens_mask.unsqueeze(2),
                self.source_key(source_tokens).unsqueeze(1), token_mask.unsqueeze(1),
            )  # (batch, K, S, words)
            chosen = _normalized(asked.unsqueeze(1) + matched)
        return RankingOutput(scores, cand_mask, attention, source_mask, relevance_weights, features, chosen)

    def context(self, questions: list[str], evidence: list[list[str]], *, words: bool = False):
        """``(context (batch, dim), attention (batch, S))``: the question plus the evidence it attends to.

        With ``words=True`` a third item: (batch, S, words), each source word's share of the question words
        whose best match in that source it is.
        """
        question, question_tokens, question_mask = self._encode_flat(questions)
        sources, source_tokens, token_mask, source_mask = self._encode_groups(evidence)
        relevance = self._relevance(question_tokens, question_mask, sources, source_tokens, token_mask)
        attention = _masked_softmax(relevance, source_mask)  # (batch, S)
        attended = (attention.unsqueeze(-1) * self.source_value(sources)).sum(1)  # (batch, dim)
        context = torch.tanh(question + attended)
        if not words:
            return context, attention
        chosen = _choices(
            self.question_key(question_tokens).unsqueeze(1), question_mask.unsqueeze(1),
            self.source_key(source_tokens), token_mask,
        )
        return context, attention, _normalized(chosen)

    def _relevance(self, question_tokens, question_mask, sources, source_tokens, token_mask) -> torch.Tensor:
        """(batch, S): how well each source answers the question, plus how informative it is on its own."""
        matched = _late_interaction(
            self.question_key(question_tokens).unsqueeze(1),
            question_mask.unsqueeze(1),
            self.source_key(source_tokens),
            token_mask,
        )
        return self.relevance_scale * self.dim**-0.5 * matched + self.salience(sources).squeeze(-1)

    # (texts) -> pooled (batch, dim), token states (batch, words, dim), token mask (batch, words)
    def _encode_flat(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ids, mask = self.tokenizer.batch(texts, self._device())
        states, mask, pooled = self.encoder(ids, mask)
        return pooled, states, mask

    def _encode_groups(self, groups: list[list[str]]):
        """Pooled (batch, M, dim), tokens (batch, M, words, dim), token mask, item mask (batch, M)."""
        device = self._device()
        batch, width = len(groups), max((len(g) for g in groups), default=0)
        rows = torch.tensor([b for b, g in enumerate(groups) for _ in g], dtype=torch.long, device=device)
        cols = torch.tensor([m for g in groups for m in range(len(g))], dtype=torch.long, device=device)
        flat = [text for g in groups for text in g]
        if not flat:
            pooled = torch.zeros(batch, width, self.dim, device=device)
            token_mask = torch.zeros(batch, width, 1, dtype=torch.bool, device=device)
            return pooled, pooled.unsqueeze(2), token_mask, token_mask[..., 0]
        ids, mask = self.tokenizer.batch(flat, device)
        states, mask, pooled_flat = self.encoder(ids, mask)  # (items, words, dim)
        words = ids.shape[1]
        tokens = states.new_zeros(batch, width, words, self.dim).index_put((rows, cols), states)
        token_mask = mask.new_zeros(batch, width, words).index_put((rows, cols), mask)
        pooled = pooled_flat.new_zeros(batch, width, self.dim).index_put((rows, cols), pooled_flat)
        item_mask = torch.zeros(batch, width, dtype=torch.bool, device=device)
        item_mask[rows, cols] = True
        return pooled, tokens, token_mask, item_mask

    def _device(self) -> torch.device:
        return self.question_key.weight.device


def _masked_softmax(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension with masked entries at zero (all zero for a fully masked row)."""
    return torch.softmax(logits.masked_fill(~mask, NEGATIVE), dim=-1) * mask


def _late_interaction(queries, query_mask, keys, key_mask) -> torch.Tensor:
    """Mean over query tokens of each one's best dot product with a key token.

    ``queries`` (..., Lq, dim) with mask (..., Lq); ``keys`` (..., Lk, dim) with mask (..., Lk); leading
    dimensions broadcast. Returns (...).
    """
    sims = queries.unsqueeze(-2) @ keys.unsqueeze(-3).transpose(-1, -2)  # (..., Lq, 1, Lk)
    sims = sims.squeeze(-2).masked_fill(~key_mask.unsqueeze(-2), NEGATIVE)  # (..., Lq, Lk)
    best = sims.max(dim=-1).values.clamp(min=NEGATIVE)  # (..., Lq)
    best = best * key_mask.any(-1, keepdim=True).to(best.dtype)  # a padded key set matches nothing
    weights = query_mask.to(best.dtype)
    return (best * weights).sum(-1) / weights.sum(-1).clamp(min=1.0)


def _choices(queries, query_mask, keys, key_mask) -> torch.Tensor:
    """How many query tokens pick each key token as their best match (what :func:`_late_interaction` reads).

    Same arguments as :func:`_late_interaction`; returns (..., Lk) counts, zero at padded keys.
    """
    sims = queries.unsqueeze(-2) @ keys.unsqueeze(-3).transpose(-1, -2)  # (..., Lq, 1, Lk)
    sims = sims.squeeze(-2).masked_fill(~key_mask.unsqueeze(-2), NEGATIVE)  # (..., Lq, Lk)
    picked = torch.nn.functional.one_hot(sims.argmax(-1), sims.shape[-1]).to(sims.dtype)  # (..., Lq, Lk)
    picked = picked * query_mask.unsqueeze(-1).to(sims.dtype) * key_mask.unsqueeze(-2).to(sims.dtype)
    return picked.sum(-2)


def _normalized(counts: torch.Tensor) -> torch.Tensor:
    """Counts over the last dimension as shares summing to one (all zero where there are none)."""
    return counts / counts.sum(-1, keepdim=True).clamp(min=1.0)


# -- training and receipts -----------------------------------------------------------------------------------
def distribution_tensor(distributions: list[list[float]], width: int | None = None) -> torch.Tensor:
    """Right-pad per-example distributions with zeros into a float32 ``(batch, width)`` tensor."""
    width = max(len(d) for d in distributions) if width is None else width
    out = torch.zeros(len(distributions), width, dtype=torch.float32)
    for i, row in enumerate(distributions):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
    return out


def soft_cross_entropy(scores: torch.Tensor, mask: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``scores`` (batch, K) against distributions ``target`` (batch, K).

    Padded candidates (``mask`` false) get no probability and must carry zero target mass.
    """
    target = target.to(device=scores.device, dtype=scores.dtype)
    if target.shape != scores.shape:
        raise ValueError(f"target shape {tuple(target.shape)} does not match scores {tuple(scores.shape)}")
    log_probs = torch.log_softmax(scores.masked_fill(~mask, NEGATIVE), dim=-1).masked_fill(~mask, 0.0)
    return -(target * log_probs).sum(-1).mean()


def candidate_attention(tokenizer: Tokenizer, evidence: list[dict], output: RankingOutput, b: int) -> list:
    """Text attention of each candidate of example ``b`` over its ``evidence`` (``None`` without evidence).

    ``output`` must come from :meth:`EvidenceRanker.forward` with ``words=True``.
    """
    count = int(output.candidate_mask[b].sum())
    sources = len(evidence)
    weights = output.attention[b, :count, :sources].tolist()
    words = output.words[b, :count, :sources].tolist()
    return [text_attention(tokenizer, evidence, weights[k], words[k]) for k in range(count)]


def ranking_receipt(tool: Any, mode: str, candidates: list[dict], evidence: list[dict], output: RankingOutput,
                    b: int) -> dict:
    """The ``ranking`` receipt of example ``b`` of ``output`` (computed with ``words=True``)."""
    return receipts.ranking(
        tool.NAME, mode, model_id(tool), candidates, output.scores[b, : len(candidates)].tolist(),
        candidate_attention(tool.tokenizer, evidence, output, b),
    )
