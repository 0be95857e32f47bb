"""The spec's "Compose and trace individual operations" example, run as written.

``encoder`` maps one text to a vector through hashed words; ``head`` carries a ``labels`` attribute, so the
target ``"target label"`` is a prediction label string resolved through the head's label order.
"""

from __future__ import annotations

import json
import math
import zlib

import torch
from torch import nn

torch.set_num_threads(1)


class HashedTextEncoder(nn.Module):
    def __init__(self, buckets: int = 128, dim: int = 16):
        super().__init__()
        self.buckets = buckets
        self.embed = nn.EmbeddingBag(buckets, dim, mode="mean")

    def forward(self, text: str) -> torch.Tensor:  # str -> (dim,)
        ids = torch.tensor([[zlib.crc32(w.encode()) % self.buckets for w in text.lower().split()]])
        return torch.tanh(self.embed(ids))[0]


class LabelHead(nn.Module):
    def __init__(self, labels: list[str], dim: int = 16):
        super().__init__()
        self.labels = labels
        self.out = nn.Linear(dim, len(labels))

    def forward(self, vector: torch.Tensor) -> torch.Tensor:  # (dim,) -> (labels,)
        return self.out(vector)


def test_compose_and_trace_individual_operations_example(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    encoder = HashedTextEncoder()
    head = LabelHead(["other label", "target label", "third label"])
    text = "the nightly export failed with a timeout"
    encoder.eval()
    head.train()  # from_ops must leave both modes exactly as configured here

    # -- the example -------------------------------------------------------------------------------------------
    from tensorcode import trace, training

    with trace() as session:
        prediction = head(encoder(text))
    session.supervise(prediction, "target label", source="human:review-42")
    operations = {"encoder": encoder, "head": head}
    session.save("experience.json", operations=operations, release=True)
    experience = training.load_experience("experience.json", operations=operations)
    trainer = training.Trainer.from_ops(operations, lr=0.01)
    losses = trainer.fit([experience], epochs=10)
    trainer.save_checkpoint("./program-training", progress={"epochs": 10})
    # ------------------------------------------------------------------------------------------------------------

    assert session.released
    saved = json.loads((tmp_path / "experience.json").read_text())
    assert saved["supervisions"][0]["target"] == "target label"
    assert saved["supervisions"][0]["source"] == "human:review-42"
    assert [c["op"] for c in saved["calls"]] == ["encoder", "head"]
    assert len(losses) == 10 and all(math.isfinite(x) for x in losses)
    assert losses == sorted(losses, reverse=True) and losses[-1] < losses[0]  # the target label is learned
    assert trainer.steps == 10
    assert not encoder.training and head.training
    assert (tmp_path / "program-training" / "training.json").is_file()
    assert trainer.load_checkpoint("./program-training") == {"epochs": 10}
