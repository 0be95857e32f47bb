"""Evaluation metrics of the tools' objectives, as ``training.evaluate`` sums them over experiences.

Each metric takes the objective's output and the captured target of one batch and returns a ``Score``: the
metric's name, the sum over the batch and the number of things summed, so batches of any size average
correctly. A tool lists its metrics per loss name in ``evaluation_metrics()``, next to ``losses()``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._text import BOS, EOS, PAD, Generator, Tokenizer


class Score(NamedTuple):
    metric: str  # "top1", "accuracy", "recall@1", "mse" or "exact_match"
    total: float
    count: int


def top1(scores: torch.Tensor, mask: torch.Tensor | None, target) -> Score:
    """Share of rows whose best-scored candidate is the target (index) or carries its largest mass."""
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    predicted = scores.argmax(-1)  # (batch,)
    target = torch.as_tensor(target, device=scores.device)
    if target.dim() == scores.dim():  # distributions over the candidates, (batch, candidates)
        hit = target.gather(-1, predicted.unsqueeze(-1)).squeeze(-1) >= target.max(-1).values
    else:
        hit = predicted == target.reshape(-1).long()
    return Score("top1", float(hit.sum()), hit.numel())


def accuracy(logits: torch.Tensor, labels, order) -> Score:
    """Share of rows whose highest logit is the named label; ``order`` is the label of each logit column."""
    expected = torch.tensor([list(order).index(label) for label in labels], device=logits.device)
    hit = logits.argmax(-1) == expected
    return Score("accuracy", float(hit.sum()), hit.numel())


def recall_at_1(logits: torch.Tensor, target: torch.Tensor) -> Score:
    """Share of queries whose best-scored document is one of their positives (``target`` > 0)."""
    best = logits.argmax(-1, keepdim=True)  # (queries, 1)
    hit = target.to(logits.device).gather(-1, best).squeeze(-1) > 0
    return Score("recall@1", float(hit.sum()), hit.numel())


def squared_error(predicted: torch.Tensor, outcomes: torch.Tensor, observed: torch.Tensor) -> Score:
    """Mean squared error over the observed outcomes only."""
    outcomes = outcomes.to(predicted.device, predicted.dtype)
    observed = observed.to(predicted.device, predicted.dtype)
    return Score("mse", float((observed * (predicted - outcomes) ** 2).sum()), int(observed.sum()))


def exact_match(generator: Generator, context: torch.Tensor, targets) -> Score:
    """Share of rows whose greedy decoding would reproduce the target text exactly.

    Greedy decoding feeds back its own argmax, so it reproduces a target exactly when, fed the target
    (teacher forcing), its argmax matches the target at every position, end mark included unless the target
    fills ``max_length`` (where decoding stops anyway). One teacher-forced pass decides it, without decoding.
    """
    limit = generator.max_length
    texts = [Tokenizer.encode_bytes(t)[:limit] for t in targets]
    rows = [t + [EOS] for t in texts]
    width = max(len(r) for r in rows)
    gold = torch.full((len(rows), width), PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        gold[i, : len(row)] = torch.tensor(row)
    gold = gold.to(context.device)
    inputs = torch.cat([torch.full_like(gold[:, :1], BOS), gold[:, :-1]], dim=1)
    logits = generator.step(context, inputs, generator.start(context))[0]  # (batch, steps, vocab)
    logits[..., PAD] = float("-inf")
    logits[..., BOS] = float("-inf")
    agree = (logits.argmax(-1) == gold).tolist()
    hits = 0
    for text, row in zip(texts, agree, strict=True):
        needed = len(text) if len(text) >= limit else len(text) + 1
        hits += all(row[:needed])
    return Score("exact_match", float(hits), len(texts))
