"""``Trainer.from_tool`` and ``capture`` against a tiny tool defined here (not the packaged tools).

``BagOfWords`` follows the ``tensorcode.tools._base.Tool`` protocol: a frozen hashed-embedding foundation (with a
dropout that must stay in eval) under a trainable linear head, a declared objective and a capture plan.
"""

from __future__ import annotations

import copy
import json
import math
import zlib

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from tensorcode import training
from tensorcode.tools._base import CapturePlan, Tool

torch.set_num_threads(1)


class BagOfWords(Tool):
    NAME = "bow"
    FIELDS = {"labels": ["billing", "outage", "other"], "buckets": 64, "dim": 8, "seed": 0}

    def build(self) -> None:
        c = self._configuration
        self.encoder = nn.Sequential(
            nn.EmbeddingBag(c["buckets"], c["dim"], mode="mean", padding_idx=0), nn.Dropout(0.5)
        )
        self.encoder.requires_grad_(False)
        self.head = nn.Linear(c["dim"], len(c["labels"]))

    def frozen_modules(self) -> list[nn.Module]:
        return [self.encoder]

    def objective(self, batch):  # {"ids": (batch, tokens)} -> (batch, labels)
        return self.head(self.encoder(batch["ids"]))

    def losses(self) -> dict:
        return {"bow.cross_entropy": bow_cross_entropy}

    def plan_capture(self, inputs, targets) -> CapturePlan:
        ids = inputs if isinstance(inputs, torch.Tensor) else self.tokenize(inputs)
        if not isinstance(targets, torch.Tensor):
            labels = self._configuration["labels"]
            if not isinstance(targets, list) or len(targets) != len(ids):
                raise ValueError(f"targets must be a list of {len(ids)} labels")
            unknown = [t for t in targets if t not in labels]
            if unknown:
                raise ValueError(f"unknown label {unknown[0]!r}; labels are {labels}")
            targets = torch.tensor([labels.index(t) for t in targets])
        return CapturePlan(
            operation=self.NAME, inputs={"ids": ids}, target=targets, loss="bow.cross_entropy", examples=len(ids)
        )

    def tokenize(self, texts: list[str]) -> torch.Tensor:
        """Hashed token ids, padded with 0: (batch, tokens)."""
        buckets = self._configuration["buckets"]
        rows = [[1 + zlib.crc32(word.encode()) % (buckets - 1) for word in text.lower().split()] for text in texts]
        width = max(len(r) for r in rows)
        return torch.tensor([r + [0] * (width - len(r)) for r in rows])


def bow_cross_entropy(output, target):
    return F.cross_entropy(output, target)


TEXTS = ["my invoice is wrong", "the site is down again", "hello there", "refund my last invoice"]
LABELS = ["billing", "outage", "other", "billing"]


def head_state(tool) -> list[torch.Tensor]:
    return [p.detach().clone() for p in tool.parameters()]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


# -- construction --------------------------------------------------------------------------------------------------
def test_from_tool_exposes_the_tool_its_operation_and_an_sgd_default_of_lr_0_001():
    tool = BagOfWords()
    trainer = training.Trainer.from_tool(tool)
    assert trainer.tool is tool
    assert list(trainer.operations) == ["bow"]
    assert trainer.operations["bow"] is tool.training_operations()["bow"]
    assert type(trainer.optimizer) is torch.optim.SGD
    assert trainer.optimizer.param_groups[0]["lr"] == 0.001
    assert [id(p) for p in trainer.parameters] == [id(tool.head.weight), id(tool.head.bias)]
    assert training.Trainer.from_tool(BagOfWords(), lr=0.05).optimizer.param_groups[0]["lr"] == 0.05


def test_from_tool_factory_receives_only_the_trainable_parameters():
    tool = BagOfWords()
    received = []

    def factory(params):
        received.append(params)
        return torch.optim.Adam(params, lr=1e-3)

    trainer = training.Trainer.from_tool(tool, optimizer=factory)
    assert [id(p) for p in received[0]] == [id(tool.head.weight), id(tool.head.bias)]
    assert type(trainer.optimizer) is torch.optim.Adam


def test_from_tool_applies_the_training_mode_policy():
    tool = BagOfWords().eval()
    training.Trainer.from_tool(tool)
    assert tool.training and tool.head.training
    assert not any(m.training for m in tool.encoder.modules())


def test_from_tool_refuses_an_object_without_the_tool_protocol():
    with pytest.raises(TypeError, match="not an owned tool.*Trainer.from_ops"):
        training.Trainer.from_tool(nn.Linear(2, 2))


# -- capture ---------------------------------------------------------------------------------------------------------
def test_capture_traces_one_call_of_the_declared_operation_supervised_by_the_tool_objective():
    tool = BagOfWords()
    trainer = training.Trainer.from_tool(tool)
    session = trainer.capture(TEXTS, LABELS, source="review:42")
    assert len(session.calls) == 1
    assert session.calls[0].op is trainer.operations["bow"]
    [record] = session.supervisions
    assert record.output == session.calls[0].output
    assert record.loss == "bow.cross_entropy"
    assert record.source == "review:42"
    assert torch.equal(record.target, torch.tensor([0, 1, 2, 0]))
    assert torch.equal(session.value(session.inputs[0])["ids"], tool.tokenize(TEXTS))


def test_capture_takes_no_optimizer_step():
    tool = BagOfWords()
    trainer = training.Trainer.from_tool(tool, optimizer=lambda ps: torch.optim.Adam(ps, lr=0.1))
    for p in trainer.parameters:
        p.grad = torch.ones_like(p)  # stale gradients: any optimizer step would move the weights
    before = head_state(tool)
    trainer.capture(TEXTS, LABELS, source="review:42")
    assert same(before, head_state(tool))
    assert trainer.steps == 0
    assert trainer.optimizer.state_dict()["state"] == {}


def test_capture_snapshots_inputs_and_targets():
    tool = BagOfWords()
    trainer = training.Trainer.from_tool(tool)
    ids, targets = tool.tokenize(TEXTS), torch.tensor([0, 1, 2, 0])
    session = trainer.capture(ids, targets, source="review:42")
    with torch.no_grad():
        expected = F.cross_entropy(tool.objective({"ids": ids.clone()}), targets.clone()).item()
    ids.fill_(0)
    targets.fill_(2)  # later edits of the caller's tensors do not reach the experience
    assert trainer.step(session) == pytest.approx(expected, rel=1e-6)


def test_capture_keeps_one_source_per_example_in_the_saved_experience(tmp_path):
    trainer = training.Trainer.from_tool(BagOfWords())
    sources = [f"review:{i}" for i in range(len(TEXTS))]
    session = trainer.capture(TEXTS, LABELS, source=sources)
    session.save(tmp_path / "batch.json", operations=trainer.operations, release=True)
    assert json.loads((tmp_path / "batch.json").read_text())["supervisions"][0]["source"] == sources
    loaded = training.load_experience(tmp_path / "batch.json", operations=trainer.operations)
    assert loaded.supervisions[0].source == tuple(sources)


def test_capture_refuses_a_source_count_that_differs_from_the_examples():
    trainer = training.Trainer.from_tool(BagOfWords())
    with pytest.raises(ValueError, match="source has 2 entries for 4 examples"):
        trainer.capture(TEXTS, LABELS, source=["review:1", "review:2"])
    with pytest.raises(ValueError, match="nonempty provenance string"):
        trainer.capture(TEXTS, LABELS, source="  ")


def test_capture_passes_the_tools_validation_error_through():
    trainer = training.Trainer.from_tool(BagOfWords())
    with pytest.raises(ValueError, match="unknown label 'fraud'"):
        trainer.capture(TEXTS, ["billing", "fraud", "other", "billing"], source="review:1")


# -- training ----------------------------------------------------------------------------------------------------------
def test_tool_experience_from_file_trains_identically_to_the_live_capture(tmp_path):
    live, twin = BagOfWords(), BagOfWords()
    live_trainer, twin_trainer = training.Trainer.from_tool(live), training.Trainer.from_tool(twin)
    session = live_trainer.capture(TEXTS, LABELS, source="review:42")
    session.save(tmp_path / "e.json", operations=live_trainer.operations, release=True)
    loaded = training.load_experience(tmp_path / "e.json", operations=twin_trainer.operations)
    assert live_trainer.fit([session], epochs=3) == twin_trainer.fit([loaded], epochs=3)
    assert same(head_state(live), head_state(twin))
    assert not same(head_state(live), head_state(BagOfWords()))


def test_frozen_foundation_is_unchanged_by_training():
    tool = BagOfWords()
    frozen = copy.deepcopy(tool.encoder.state_dict())
    trainer = training.Trainer.from_tool(tool, lr=0.5)
    trainer.fit([trainer.capture(TEXTS, LABELS, source="review:1")], epochs=3)
    assert all(torch.equal(v, tool.encoder.state_dict()[k]) for k, v in frozen.items())


def test_train_an_owned_tool_spec_example(tmp_path, monkeypatch):
    """The spec's "Train an owned tool" example, as written, with this file's tool as ``model``."""
    monkeypatch.chdir(tmp_path)
    model, inputs, targets = BagOfWords(), TEXTS, LABELS

    trainer = training.Trainer.from_tool(model, lr=0.001)
    experience = trainer.capture(inputs, targets, source="review:42")
    experience.save("experience.json", operations=trainer.operations, release=True)

    experience = training.load_experience("experience.json", operations=trainer.operations)
    losses = trainer.fit([experience], epochs=10)
    model.save_pretrained("./model")
    trainer.save_checkpoint("./training", progress={"next_example": 43})

    assert len(losses) == 10 and all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0]
    assert trainer.steps == 10
    assert same(head_state(model), head_state(BagOfWords.from_pretrained("./model")))
    assert (tmp_path / "training" / "training.json").is_file()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="training a restored experience on a GPU needs CUDA")
def test_restored_cpu_experience_trains_a_tool_on_the_gpu(tmp_path):
    tool = BagOfWords()
    trainer = training.Trainer.from_tool(tool)
    trainer.capture(TEXTS, LABELS, source="review:42").save(tmp_path / "e.json", operations=trainer.operations)
    tool.to("cuda")  # the objective does not move its inputs: the trainer must
    loaded = training.load_experience(tmp_path / "e.json", operations=trainer.operations)
    assert loaded.value(loaded.inputs[0])["ids"].device.type == "cpu"
    assert loaded.supervisions[0].target.device.type == "cpu"
    before = head_state(tool)
    assert math.isfinite(trainer.step(loaded))
    assert not same(before, head_state(tool))
