"""Searching a ``Generator``'s outputs: beam search, seeded sampling, and log-probabilities of given texts."""

from __future__ import annotations

import torch

from ._text import BOS, BYTE_VOCAB, EOS, PAD, Generator, Tokenizer


def beam_search(generator: Generator, context: torch.Tensor, width: int) -> list[list[str]]:
    """Finished and length-limited beams per row, most probable first, as texts."""
    batch, limit = context.shape[0], generator.max_length
    rows = context.repeat_interleave(width, 0)  # (batch * width, dim)
    hidden = generator.start(rows)
    token = torch.full((batch * width, 1), BOS, dtype=torch.long, device=context.device)
    scores = torch.full((batch, width), float("-inf"), device=context.device)
    scores[:, 0] = 0.0  # only the first beam is live before the first step
    prefixes = [[[] for _ in range(width)] for _ in range(batch)]
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(batch)]
    for _ in range(limit):
        logits, hidden = generator.step(rows, token, hidden)
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


def sample(generator: Generator, context: torch.Tensor, sampler: torch.Generator) -> str:
    hidden = generator.start(context)
    token = torch.full((1, 1), BOS, dtype=torch.long, device=context.device)
    produced = []
    for _ in range(generator.max_length):
        logits, hidden = generator.step(context, token, hidden)
        logits[..., PAD] = float("-inf")
        logits[..., BOS] = float("-inf")
        token = torch.multinomial(logits[:, -1].softmax(-1), 1, generator=sampler)
        if int(token) == EOS:
            break
        produced.append(int(token))
    return Tokenizer.decode_bytes(produced)


def log_probabilities(generator: Generator, context: torch.Tensor, texts: list[str]) -> list[float]:
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
    logits = generator.step(context, inputs, generator.start(context))[0]  # (texts, steps, vocab)
    logits[..., PAD] = float("-inf")
    logits[..., BOS] = float("-inf")
    picked = logits.log_softmax(-1).gather(-1, gold.clamp(max=BYTE_VOCAB - 1).unsqueeze(-1)).squeeze(-1)
    picked = picked.masked_fill(gold == PAD, 0.0)
    return [float(v) for v in picked.sum(-1)]
