"""Built-in losses (``cross_entropy``, ``mse``) and custom in-process losses, directly and through ``Trainer.step``."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import tensorcode
from tensorcode import training
from tensorcode.training import _losses

torch.set_num_threads(1)


class LabelledHead(nn.Module):
    """Logits in the order of its ``labels`` attribute."""

    def __init__(self, labels):
        super().__init__()
        self.labels = list(labels)
        self.out = nn.Linear(4, len(labels))

    def forward(self, x):  # (batch, 4) -> (batch, labels)
        return self.out(x)


class ConfiguredHead(nn.Module):
    """Label order only through ``configuration()['labels']``."""

    def __init__(self, labels):
        super().__init__()
        self._labels = list(labels)
        self.out = nn.Linear(4, len(labels))

    def configuration(self):
        return {"labels": self._labels}

    def forward(self, x):
        return self.out(x)


def logits(rows: int = 3, classes: int = 4, seed: int = 0):
    return torch.randn(rows, classes, generator=torch.Generator().manual_seed(seed))


def features(rows: int = 3):
    return torch.randn(rows, 4, generator=torch.Generator().manual_seed(5))


def trained_loss(head, target, loss="cross_entropy", single=False):
    """The loss ``Trainer.step`` reports for ``head`` on three feature rows (or one vector) against ``target``."""
    with tensorcode.trace() as session:
        output = head(features(1)[0] if single else features())
    session.supervise(output, target, loss=loss, source="human:test")
    return training.Trainer.from_ops({"head": head}, lr=1e-9).step(session)


# -- cross-entropy -------------------------------------------------------------------------------------------------
def test_cross_entropy_with_integer_indices_matches_torch():
    x, y = logits(), torch.tensor([3, 0, 1])
    torch.testing.assert_close(_losses.cross_entropy(x, y), F.cross_entropy(x, y))
    torch.testing.assert_close(_losses.cross_entropy(x, [3, 0, 1]), F.cross_entropy(x, y))


def test_cross_entropy_of_one_logit_vector_takes_one_index():
    x = logits(1)[0]  # (classes,)
    torch.testing.assert_close(_losses.cross_entropy(x, 2), F.cross_entropy(x[None], torch.tensor([2])))
    with pytest.raises(ValueError, match="one class index"):
        _losses.cross_entropy(x, [2, 1])


def test_cross_entropy_with_probability_targets():
    x = logits()
    p = torch.softmax(logits(seed=1), dim=-1)
    expected = -(p * torch.log_softmax(x, dim=-1)).sum(-1).mean()
    torch.testing.assert_close(_losses.cross_entropy(x, p), expected)
    with pytest.raises(ValueError, match=r"probability targets need the output's shape \(3, 4\)"):
        _losses.cross_entropy(x, p[:, :3])


@pytest.mark.parametrize(
    ("target", "match"),
    [
        ([0, 4, 1], "class index out of range for 4 classes"),
        ([0, -1, 1], "class index out of range"),
        ([0, 1], "3 logit rows need 3 class indices"),
        (torch.tensor([True, False, True]), "integer class indices"),
        ([object()], "indices, label strings or probabilities"),
    ],
)
def test_cross_entropy_refuses_bad_index_targets(target, match):
    with pytest.raises(ValueError, match=match):
        _losses.cross_entropy(logits(), target)


def test_cross_entropy_refuses_logits_of_other_ranks():
    with pytest.raises(ValueError, match=r"\(classes,\) or \(batch, classes\)"):
        _losses.cross_entropy(torch.zeros(2, 3, 4), [0, 1])


def test_label_strings_follow_the_producing_operations_labels_attribute():
    head = LabelledHead(["refund", "outage", "billing"])
    expected = F.cross_entropy(head(features()), torch.tensor([2, 0, 2])).item()
    assert trained_loss(head, ["billing", "refund", "billing"]) == pytest.approx(expected, rel=1e-6)


def test_a_single_label_string_supervises_one_logit_vector():
    head = LabelledHead(["refund", "outage", "billing"])
    expected = F.cross_entropy(head(features(1)), torch.tensor([1])).item()
    assert trained_loss(head, "outage", single=True) == pytest.approx(expected, rel=1e-6)


def test_label_strings_follow_configuration_labels_when_there_is_no_attribute():
    head = ConfiguredHead(["b", "a", "c"])
    expected = F.cross_entropy(head(features()), torch.tensor([1, 0, 2])).item()
    assert trained_loss(head, ["a", "b", "c"]) == pytest.approx(expected, rel=1e-6)


def test_label_strings_without_a_label_order_are_refused():
    with pytest.raises(ValueError, match="need an operation with a label order"):
        trained_loss(nn.Linear(4, 3), ["a", "b", "c"])


def test_unknown_label_string_is_refused_naming_the_labels():
    with pytest.raises(ValueError, match=r"unknown label 'fraud'.*\['refund', 'outage'\]"):
        trained_loss(LabelledHead(["refund", "outage"]), ["refund", "fraud", "outage"])


# -- mse -------------------------------------------------------------------------------------------------------------
def test_mse_matches_torch_on_exactly_matching_shapes():
    x, y = logits(), logits(seed=2)
    torch.testing.assert_close(_losses.mse(x, y), F.mse_loss(x, y))
    torch.testing.assert_close(_losses.mse(x, y.tolist()), F.mse_loss(x, y))


@pytest.mark.parametrize("shape", [(3,), (3, 1), (1, 4), (3, 4, 1)])
def test_mse_refuses_broadcastable_but_different_shapes(shape):
    with pytest.raises(ValueError, match=r"mse needs matching shapes: output \(3, 4\)"):
        _losses.mse(logits(), torch.zeros(shape))


def test_mse_shape_mismatch_is_refused_by_step_before_any_update():
    head = nn.Linear(4, 1)
    before = [p.detach().clone() for p in head.parameters()]
    with pytest.raises(ValueError, match="mse needs matching shapes"):
        trained_loss(head, torch.zeros(3), loss="mse")
    assert all(torch.equal(p, b) for p, b in zip(head.parameters(), before, strict=True))


# -- custom losses ---------------------------------------------------------------------------------------------------
def hinge_loss_callback(output, target):
    hinge_loss_callback.calls += 1
    return F.multi_margin_loss(output, target)


def test_custom_loss_is_used_by_step():
    head = LabelledHead(["a", "b", "c"])
    x, y = features(), torch.tensor([0, 2, 1])
    expected = F.multi_margin_loss(head(x), y).item()
    with tensorcode.trace() as session:
        output = head(x)
    session.supervise(output, y, loss="hinge", source="human:1")
    hinge_loss_callback.calls = 0
    trainer = training.Trainer.from_ops({"head": head}, losses={"hinge": hinge_loss_callback})
    assert trainer.step(session) == pytest.approx(expected, rel=1e-6)
    assert hinge_loss_callback.calls == 1


def test_custom_loss_is_never_serialized_and_must_be_registered_again(tmp_path):
    head = LabelledHead(["a", "b", "c"])
    with tensorcode.trace() as session:
        output = head(features())
    session.supervise(output, torch.tensor([0, 2, 1]), loss="hinge", source="human:1")
    session.save(tmp_path / "experience.json", operations={"head": head}, release=True)

    text = (tmp_path / "experience.json").read_text()
    assert "hinge_loss_callback" not in text and "multi_margin" not in text
    [record] = json.loads(text)["supervisions"]
    assert record["loss"] == "hinge"

    loaded = training.load_experience(tmp_path / "experience.json", operations={"head": head})
    without = training.Trainer.from_ops({"head": head})
    before = [p.detach().clone() for p in head.parameters()]
    with pytest.raises(ValueError, match=r"unknown loss 'hinge'; registered losses: \['cross_entropy', 'mse'\]"):
        without.step(loaded)
    assert all(torch.equal(p, b) for p, b in zip(head.parameters(), before, strict=True))
    assert without.steps == 0

    hinge_loss_callback.calls = 0
    with_it = training.Trainer.from_ops({"head": head}, losses={"hinge": hinge_loss_callback})
    assert math.isfinite(with_it.step(loaded))
    assert hinge_loss_callback.calls == 1


@pytest.mark.parametrize("result", [torch.zeros(2, requires_grad=True), 0.5, "x"])
def test_custom_loss_must_return_a_scalar_tensor(result):
    head = LabelledHead(["a", "b", "c"])
    with tensorcode.trace() as session:
        output = head(features())
    session.supervise(output, [0, 1, 2], loss="odd", source="human:1")
    trainer = training.Trainer.from_ops({"head": head}, losses={"odd": lambda o, t: result})
    with pytest.raises(ValueError, match="loss 'odd' must return a scalar tensor"):
        trainer.step(session)
    assert trainer.steps == 0
