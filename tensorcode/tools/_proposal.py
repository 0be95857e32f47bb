"""The Investigator's proposal generator: question and evidence -> new hypothesis text.

Reviewed hypothesis text trains it with teacher forcing. ``propose`` returns distinct candidates: the greedy
decoding first, then the best other beam-search completions, then (only if those run out) samples from a
generator seeded by the tool's configuration, so the same model and inputs always propose the same texts.
"""

from __future__ import annotations

import torch
from torch import nn

from ._text import BOS, BYTE_VOCAB, EOS, PAD, Generator, TextEncoder, Tokenizer


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
        beams = _beam_search(self.generator, context, max(width, count))
        sampler = torch.Generator(device=context.device)
        sampler.manual_seed(seed)
        proposals = []
        for row in range(context.shape[0]):
            texts = [greedy[row]]
            texts += [t for t in beams[row] if t not in texts][: count - 1]
            for _ in range(4 * count):
                if len(texts) >= count:
                    break
                sample = _sample(self.generator, context[row: row + 1], sampler)
                if sample not in texts:
                    texts.append(sample)
            texts = list(dict.fromkeys(texts))[:count]
            scores = _log_probabilities(self.generator, context[row: row + 1].expand(len(texts), -1), texts)
            proposals.append([{"text": t, "log_probability": s} for t, s in zip(texts, scores, strict=True)])
        return proposals


def _beam_search(generator: Generator, context: torch.Tensor, width: int) -> list[list[str]]:
    """Finished and length-limited beams per row, most probable first, as texts."""
    batch, limit = context.shape[0], generator.max_length
    rows = context.repeat_interleave(width, 0)  # (batch * width, dim)
    hidden = generator._start(rows)
    token = torch.full((batch * width, 1), BOS, dtype=torch.long, device=context.device)
    scores = torch.full((batch, width), float("-inf"), device=context.device)
    scores[:, 0] = 0.0  # only the first beam is live before the first step
    prefixes = [[[] for _ in range(width)] for _ in range(batch)]
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(batch)]
    for _ in range(limit):
        logits, hidden = generator._logits(rows, token, hidden)
        step = logits[:, -1].log_softmax(-1)  # (batch * width, vocab)
        step[:, PAD] = float("-inf")
        step[:, BOS] = float("-inf")
        total = (scores.reshape(-1, 1) + step).reshape(batch, width * BYTE_VOCAB)
        best = total.topk(2 * width, dim=-1)
        new_scores = torch.full_like(scores, float("-inf"))
        source = torch.zeros(batch, width, dtype=torch.long, device=context.device)
        chosen = torch.full((batch, width), PAD, dtype=torch.long, device=context.device)
        new_prefixes = [[[] for _ in range(width)] for _ in range(batch)]
        for b, (values, indices) in enumerate(zip(best.values.tolist(), best.indices.tolist(), strict=True)):
            kept = 0
            for value, index in zip(values, indices, strict=True):
                if value == float("-inf") or kept == width:
                    break
                beam, byte = divmod(index, BYTE_VOCAB)
                if byte == EOS:
                    finished[b].append((value, prefixes[b][beam]))
                    continue
                new_scores[b, kept], source[b, kept], chosen[b, kept] = value, beam, byte
                new_prefixes[b][kept] = prefixes[b][beam] + [byte]
                kept += 1
        scores, prefixes = new_scores, new_prefixes
        gather = (source + torch.arange(batch, device=context.device).unsqueeze(1) * width).reshape(-1)
        hidden = hidden[:, gather]
        token = chosen.reshape(-1, 1)
        if all(len(f) >= width for f in finished):
            break
    results = []
    for b in range(batch):
        # Beams cut off by the length limit are candidates too, as in greedy decoding.
        alive = [(s, prefixes[b][w]) for w, s in enumerate(scores[b].tolist()) if s != float("-inf")]
        ranked = sorted(finished[b] + alive, key=lambda item: -item[0])
        results.append(list(dict.fromkeys(Tokenizer.decode_bytes(p) for _, p in ranked)))
    return results


def _sample(generator: Generator, context: torch.Tensor, sampler: torch.Generator) -> str:
    hidden = generator._start(context)
    token = torch.full((1, 1), BOS, dtype=torch.long, device=context.device)
    produced = []
    for _ in range(generator.max_length):
        logits, hidden = generator._logits(context, token, hidden)
        logits[..., PAD] = float("-inf")
        logits[..., BOS] = float("-inf")
        token = torch.multinomial(logits[:, -1].softmax(-1), 1, generator=sampler)
        if int(token) == EOS:
            break
        produced.append(int(token))
    return Tokenizer.decode_bytes(produced)


def _log_probabilities(generator: Generator, context: torch.Tensor, texts: list[str]) -> list[float]:
    """Log probability of each text under the decoder (with its end mark unless it reached the length limit)."""
    rows = []
    for t in texts:
        data = Tokenizer.encode_bytes(t)[: generator.max_length]
        rows.append(data if len(data) >= generator.max_length else data + [EOS])
    width = max(len(r) for r in rows)
    gold = torch.full((len(rows), width), PAD, dtype=torch.long, device=context.device)
    for i, row in enumerate(rows):
        gold[i, : len(row)] = torch.tensor(row, device=context.device)
    inputs = torch.cat([torch.full_like(gold[:, :1], BOS), gold[:, :-1]], dim=1)
    logits = generator._logits(context, inputs, generator._start(context))[0]  # (texts, steps, vocab)
    logits[..., PAD] = float("-inf")
    logits[..., BOS] = float("-inf")
    picked = logits.log_softmax(-1).gather(-1, gold.clamp(max=BYTE_VOCAB - 1).unsqueeze(-1)).squeeze(-1)
    picked = picked.masked_fill(gold == PAD, 0.0)
    return [float(v) for v in picked.sum(-1)]
