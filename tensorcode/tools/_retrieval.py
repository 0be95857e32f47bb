"""Owned retrieval: the episodic encoder, its contrastive objective, and an episodic index over raw records.

An index keeps the raw source records it was given and the embeddings the encoder produced for them. Those
embeddings describe one set of encoder weights, so the index remembers a fingerprint of those weights and
refuses queries once they change, until ``rebuild()`` re-embeds every record. A snapshot holds only the raw
records; restoring it embeds them again with the model it is restored into.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ..errors import StaleIndexError
from ._checks import records, text
from ._text import TextEncoder, Tokenizer

SNAPSHOT_FORMAT = "tensorcode-episodic-index"
SNAPSHOT_VERSION = 1
# Logits of query/document pairs from different reviewed groups: never compared, so never a negative.
_UNRELATED = -1e4
# An index is built by its owner from records it chose, so only requests are bounded, not the index.
_NO_LIMIT = float("inf")


class EpisodicEncoder(nn.Module):
    """Texts -> unit vectors ``(texts, dim)``; ``similarity`` scales their cosine into retrieval logits."""

    def __init__(self, tokenizer: Tokenizer, dim: int):
        super().__init__()
        self.tokenizer = tokenizer
        self.words = TextEncoder(tokenizer.buckets, dim, tokenizer.max_words)
        self.gate = nn.Linear(dim, 1)
        self.project = nn.Linear(dim, dim)
        self.log_scale = nn.Parameter(torch.tensor(math.log(10.0)))

    def forward(self, texts: list[str]) -> torch.Tensor:
        ids, mask = self.tokenizer.batch(texts, self.log_scale.device)
        states = self.words(ids, mask)[0]  # (texts, words, dim)
        # A learned weight per word lets template words that every document shares fade out of the pooled vector.
        weights = torch.sigmoid(self.gate(states)).squeeze(-1) * mask.to(states.dtype)  # (texts, words)
        pooled = (states * weights.unsqueeze(-1)).sum(1) / weights.sum(1, keepdim=True).clamp(min=1e-6)
        return nn.functional.normalize(self.project(pooled), dim=-1)

    def similarity(self, queries: torch.Tensor, documents: torch.Tensor) -> torch.Tensor:
        return self.log_scale.clamp(max=math.log(100.0)).exp() * queries @ documents.T


def group_logits(encoder: EpisodicEncoder, groups: list[dict]) -> torch.Tensor:
    """Logits ``(all queries, all documents)``; pairs from different groups hold a large negative constant."""
    queries = encoder([q for g in groups for q in g["queries"]])
    documents = encoder([d for g in groups for d in g["documents"]])
    logits = encoder.similarity(queries, documents)  # (queries, documents)
    same = torch.zeros_like(logits, dtype=torch.bool)
    row = column = 0
    for g in groups:
        same[row: row + len(g["queries"]), column: column + len(g["documents"])] = True
        row, column = row + len(g["queries"]), column + len(g["documents"])
    return logits.masked_fill(~same, _UNRELATED)


def group_target(masks: list[list[list[bool]]]) -> torch.Tensor:
    """Block-diagonal target ``(all queries, all documents)``: each query's positives share weight equally."""
    rows = sum(len(m) for m in masks)
    columns = sum(len(m[0]) for m in masks)
    target = torch.zeros(rows, columns)
    row = column = 0
    for mask in masks:
        block = torch.tensor(mask, dtype=torch.float32)
        target[row: row + block.shape[0], column: column + block.shape[1]] = block / block.sum(1, keepdim=True)
        row, column = row + block.shape[0], column + block.shape[1]
    return target


def contrastive_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each query's softmax over documents against its equal-weight positives."""
    return -(target.to(logits.device) * logits.log_softmax(-1)).sum(-1).mean()


class WeightWatch:
    """Notices whether a module's parameters changed since ``reset()``: version counters first, then values."""

    def __init__(self, module: nn.Module):
        self.module = module
        self._versions: tuple | None = None
        self.reset()

    def reset(self) -> None:
        stamp = self._stamp()
        if stamp != self._versions:
            self._versions, self._values = stamp, self._fingerprint()

    def changed(self) -> bool:
        stamp = self._stamp()
        if stamp == self._versions:
            return False
        # Something wrote the weights (an optimizer step, a load, a move); only different values matter.
        if torch.allclose(self._fingerprint(), self._values, rtol=1e-10, atol=0.0):
            self._versions = stamp
            return False
        return True

    def _stamp(self) -> tuple:
        return tuple((p.data_ptr(), p._version) for p in self.module.parameters())

    @torch.no_grad()
    def _fingerprint(self) -> torch.Tensor:
        if any(p.is_meta for p in self.module.parameters()):  # a layout-only skeleton has no values to watch
            return torch.zeros(0)
        sums = [torch.stack([p.double().sum(), p.double().abs().sum(), p.double().square().sum()])
                for p in self.module.parameters()]
        return torch.cat(sums).cpu()


class EpisodicIndex:
    """Raw ``{"source_id", "text"}`` records embedded by ``model.episodic_encoder``; ``query`` returns top-k."""

    def __init__(self, model: Any, records: Any = ()):
        encoder = getattr(model, "episodic_encoder", None)
        if not isinstance(encoder, EpisodicEncoder):
            raise ValueError(
                "model has no episodic_encoder; construct the Investigator with a retrieval_encoder configuration"
            )
        self.model = model
        self._encoder = encoder
        self._records: list[dict] = []
        self._embeddings = torch.zeros(0, encoder.project.out_features, device=encoder.log_scale.device)
        self._watch = WeightWatch(encoder)
        if records:
            self.add(records)

    def __len__(self) -> int:
        return len(self._records)

    @property
    def stale(self) -> bool:
        """True once the encoder's weights differ from those that embedded the records."""
        return self._watch.changed()

    def add(self, new_records: Any) -> None:
        """Index ``[{"source_id", "text"}]``; ids must be new. Nothing is added if any record is bad."""
        checked = records(new_records, "records", "source_id", limit=_NO_LIMIT, limit_name="records",
                          text_limit=None, allow_empty=False)
        known = {r["source_id"] for r in self._records}
        for i, record in enumerate(checked):
            if record["source_id"] in known:
                raise ValueError(f"records[{i}]['source_id']: {record['source_id']!r} is already indexed")
        self._refuse_if_stale()
        embeddings = self._embed([r["text"] for r in checked])
        self._records.extend(checked)
        self._embeddings = torch.cat([self._embeddings, embeddings])

    def query(self, query: str, k: int = 5) -> list[dict]:
        """The ``k`` best records as ``[{"source_id", "score"}]``, score being cosine similarity, best first."""
        query = text(query, "query")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        self._refuse_if_stale()
        if not self._records:
            return []
        scores = (self._embed([query]) @ self._embeddings.T)[0]  # (records,)
        top = scores.topk(min(k, len(self._records)))
        return [{"source_id": self._records[i]["source_id"], "score": float(s)}
                for s, i in zip(top.values.tolist(), top.indices.tolist(), strict=True)]

    def rebuild(self) -> None:
        """Re-embed every record with the encoder's current weights."""
        self._watch.reset()
        if self._records:
            self._embeddings = self._embed([r["text"] for r in self._records])
        else:
            self._embeddings = torch.zeros(0, self._encoder.project.out_features, device=self._encoder.log_scale.device)

    def snapshot(self) -> dict:
        """JSON-safe raw records only; embeddings are rebuilt on restore."""
        return {"format": SNAPSHOT_FORMAT, "version": SNAPSHOT_VERSION,
                "records": [dict(r) for r in self._records]}

    @classmethod
    def restore(cls, snapshot: Any, model: Any) -> EpisodicIndex:
        if not isinstance(snapshot, dict) or snapshot.get("format") != SNAPSHOT_FORMAT:
            raise ValueError(f"snapshot: not a {SNAPSHOT_FORMAT} snapshot")
        if snapshot.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"snapshot.version: expected {SNAPSHOT_VERSION}, got {snapshot.get('version')!r}")
        if set(snapshot) != {"format", "version", "records"}:
            raise ValueError(f"snapshot: expected fields format, version, records; got {sorted(snapshot)}")
        index = cls(model)
        if snapshot["records"]:
            index.add(snapshot["records"])
        return index

    def _refuse_if_stale(self) -> None:
        if self._watch.changed():
            raise StaleIndexError(
                "the episodic encoder's weights changed since this index embedded its records; "
                "call index.rebuild() before querying or adding"
            )

    @torch.no_grad()
    def _embed(self, texts: list[str]) -> torch.Tensor:
        return self._encoder(texts)
