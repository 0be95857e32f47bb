"""The Investigator's proposal generator: question and evidence -> new hypothesis text.

Reviewed hypothesis text trains it with teacher forcing. ``propose`` returns distinct candidates: the greedy
decoding first, then the best other beam-search completions, then (only if those run out) samples from a
generator seeded by the tool's configuration, so the same model and inputs always propose the same texts.
"""

from __future__ import annotations

import torch
from torch import nn

from ._decoding import beam_search, log_probabilities, sample
from ._text import Generator, TextEncoder, Tokenizer


class Proposer(nn.Module):
    def __init__(self, tokenizer: Tokenizer, dim: int, max_length: int):
        super().__init__()
        self.tokenizer = tokenizer
        self.encoder = TextEncoder(tokenizer.buckets, dim, tokenizer.max_words)
        self.context = nn.Linear(2 * dim, dim)
        self.generator = Generator(dim, max_length)

    def forward(self, examples: list[dict]) -> torch.Tensor:
        """Context vectors ``(examples, dim)`` from each question and the mean of its evidence."""
        device = self.context.weight.device
        question = self.encoder(*self.tokenizer.batch([e["question"] for e in examples], device))[2]
        texts = [r["text"] for e in examples for r in e["evidence"]]
        evidence = torch.zeros_like(question)  # (examples, dim); zero for an example without evidence
        if texts:
            pooled = self.encoder(*self.tokenizer.batch(texts, device))[2]  # (sources, dim)
            owner = torch.tensor([i for i, e in enumerate(examples) for _ in e["evidence"]], device=device)
            counts = torch.bincount(owner, minlength=len(examples)).clamp(min=1).unsqueeze(-1)
            evidence = evidence.index_add(0, owner, pooled) / counts
        return torch.tanh(self.context(torch.cat([question, evidence], dim=-1)))

    def loss(self, context: torch.Tensor, targets: list[str]) -> torch.Tensor:
        return self.generator.loss(context, targets)

    @torch.no_grad()
    def propose(self, context: torch.Tensor, count: int, width: int, seed: int) -> list[list[dict]]:
        """``count`` distinct ``{"text", "log_probability"}`` per context row, greedy decoding first."""
        greedy = self.generator.generate(context)
        beams = beam_search(self.generator, context, max(width, count))
        sampler = torch.Generator(device=context.device)
        sampler.manual_seed(seed)
        proposals = []
        for row in range(context.shape[0]):
            texts = [greedy[row]]
            texts += [t for t in beams[row] if t not in texts][: count - 1]
            for _ in range(4 * count):
                if len(texts) >= count:
                    break
                drawn = sample(self.generator, context[row: row + 1], sampler)
                if drawn not in texts:
                    texts.append(drawn)
            texts = list(dict.fromkeys(texts))[:count]
            scores = log_probabilities(self.generator, context[row: row + 1].expand(len(texts), -1), texts)
            proposals.append([{"text": t, "log_probability": s} for t, s in zip(texts, scores, strict=True)])
        return proposals
