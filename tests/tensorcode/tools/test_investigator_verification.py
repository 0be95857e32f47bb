from __future__ import annotations

import random

import pytest
import torch
from torch.nn import functional as F

from tensorcode import training
from tensorcode.tools.investigator import Investigator
from tensorcode.training.calibration import TemperatureCalibration, evaluate_calibration

torch.set_num_threads(1)

LABELS = ["entailment", "neutral", "contradiction"]
# (premise, an entailed paraphrase, a contradiction) about one service {s}.
FACTS = [
    ("The {s} service was restarted at noon.", "{s} was restarted.", "{s} was never restarted."),
    ("The connection to {s} was refused.", "The connection to {s} failed.", "The connection to {s} succeeded."),
    ("The disk on {s} is full.", "{s} has no free disk space.", "{s} has plenty of free disk space."),
    ("{s} was upgraded to version two.", "{s} runs version two.", "{s} still runs version one."),
    ("The certificate of {s} expired yesterday.", "The certificate of {s} is expired.",
     "The certificate of {s} is valid."),
    ("{s} latency doubled after the release.", "{s} became slower after the release.",
     "{s} became faster after the release."),
]


def _names(rng: random.Random, count: int) -> list[str]:
    names: dict[str, None] = {}
    while len(names) < count:
        names["".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3))] = None
    return list(names)


def _pair(rng: random.Random, names: list[str]) -> tuple[dict, str]:
    """Neutral pairs talk about another fact of the same service, or the same fact of another service."""
    service, other = rng.sample(names, 2)
    fact = rng.randrange(len(FACTS))
    label = rng.choice(LABELS)
    if label == "entailment":
        hypothesis = FACTS[fact][1].format(s=service)
    elif label == "contradiction":
        hypothesis = FACTS[fact][2].format(s=service)
    elif rng.random() < 0.5:
        unrelated = rng.choice([k for k in range(len(FACTS)) if k != fact])
        hypothesis = FACTS[unrelated][rng.choice([1, 2])].format(s=service)
    else:
        hypothesis = FACTS[fact][rng.choice([1, 2])].format(s=other)
    return {"premise": FACTS[fact][0].format(s=service), "hypothesis": hypothesis}, label


def _split(seed: int, sizes: list[int]) -> list[list[tuple[dict, str]]]:
    """Splits whose pairs name disjoint sets of made-up services."""
    rng = random.Random(seed)
    names = _names(rng, 400 * len(sizes))
    return [[_pair(rng, names[400 * i: 400 * (i + 1)]) for _ in range(size)] for i, size in enumerate(sizes)]


def _train(model: Investigator, pairs: list, epochs: int) -> list[float]:
    trainer = training.Trainer.from_tool(model, optimizer=lambda p: torch.optim.Adam(p, lr=1e-2))
    experience = trainer.capture({"mode": "verification", "inputs": [x for x, _ in pairs]}, [y for _, y in pairs],
                                 source="review:verification")
    return trainer.fit([experience], epochs=epochs)


def _accuracy(model: Investigator, pairs: list) -> float:
    receipts = model({"mode": "verification", "inputs": [x for x, _ in pairs]})
    return sum(r["selected_id"] == y for r, (_, y) in zip(receipts, pairs, strict=True)) / len(pairs)


_PAIR = {"premise": "The connection was refused.", "hypothesis": "The connection succeeded."}


def test_verification_learns_held_out_pairs_about_unseen_services():
    train, held_out = _split(0, [384, 200])
    model = Investigator(modes=["verification"], retrieval_encoder=None, dim=64, limits={"max_batch": 512})
    before = _accuracy(model, held_out)
    losses = _train(model, train, epochs=15)
    after = _accuracy(model, held_out)
    assert before < 0.5
    assert after >= 0.9, (before, after)
    assert losses[-1] < 0.2 * losses[0]


def test_calibration_fitted_on_held_out_pairs_lowers_ece_on_another_split():
    """An overfit verifier is overconfident; a temperature fitted on one split improves ECE on another."""
    train, calibration_split, test_split = _split(1, [96, 300, 300])
    model = Investigator(modes=["verification"], retrieval_encoder=None, limits={"max_batch": 512})
    _train(model, train, epochs=40)
    logits = model.verification_logits([x for x, _ in test_split])
    labels = [LABELS.index(y) for _, y in test_split]
    before = evaluate_calibration(logits, labels)["ece"]
    report = model.calibrate_verifier([x for x, _ in calibration_split], [y for _, y in calibration_split])
    after = evaluate_calibration(model.verifier.calibration.calibrated(logits), labels)["ece"]
    assert report["temperature"] > 1.0
    assert after < 0.75 * before, (before, after)


def test_verifier_calibration_is_a_temperature_calibration():
    assert isinstance(Investigator().verifier.calibration, TemperatureCalibration)


def test_calibrated_scores_are_reported_only_while_the_fit_is_fresh():
    model = Investigator()
    inputs = {"mode": "verification", "inputs": [_PAIR]}
    assert model(inputs)[0]["candidates"][0]["calibrated_probability"] is None
    logits = model.verification_logits([_PAIR, _PAIR])
    model.verifier.calibration.fit(logits * 3, [2, 0])
    receipt = model(inputs)[0]
    assert all(c["calibrated_probability"] is not None for c in receipt["candidates"])
    assert receipt["calibration"]["temperature"] == pytest.approx(float(model.verifier.calibration.temperature))

    trainer = training.Trainer.from_tool(model, lr=0.01)
    trainer.step(trainer.capture(inputs, ["contradiction"], source="review:17"))
    assert not model.verifier.calibration.is_fitted
    receipt = model(inputs)[0]
    assert all(c["calibrated_probability"] is None for c in receipt["candidates"])
    assert receipt["calibration"] == {"fitted": False, "temperature": None}

    model.calibrate_verifier([_PAIR, _PAIR], ["contradiction", "entailment"])
    assert all(c["calibrated_probability"] is not None for c in model(inputs)[0]["candidates"])


def test_editing_verifier_weights_directly_also_marks_the_calibration_stale():
    model = Investigator()
    model.calibrate_verifier([_PAIR, _PAIR], ["contradiction", "entailment"])
    with torch.no_grad():
        model.verifier.head[0].bias.add_(0.1)
    receipt = model({"mode": "verification", "inputs": [_PAIR]})[0]
    assert all(c["calibrated_probability"] is None for c in receipt["candidates"])
    assert not model.verifier.calibration.is_fitted


def test_training_other_modes_keeps_the_verifier_calibration():
    model = Investigator()
    model.calibrate_verifier([_PAIR, _PAIR], ["contradiction", "entailment"])
    trainer = training.Trainer.from_tool(model, lr=0.01)
    example = {"question": "Why?", "hypotheses": [{"id": "a", "text": "refused"}, {"id": "b", "text": "fine"}]}
    trainer.step(trainer.capture(example, "a", source="review:1"))
    assert model.verifier.calibration.is_fitted
    receipt = model({"mode": "verification", "inputs": [_PAIR]})[0]
    assert all(c["calibrated_probability"] is not None for c in receipt["candidates"])


def test_calibration_buffers_persist_with_save_pretrained(tmp_path):
    model = Investigator()
    model.calibrate_verifier([_PAIR, _PAIR, _PAIR], ["contradiction", "contradiction", "neutral"])
    model.save_pretrained(tmp_path / "investigator")
    restored = Investigator.from_pretrained(tmp_path / "investigator")
    assert restored.verifier.calibration.is_fitted
    assert torch.equal(restored.verifier.calibration.temperature, model.verifier.calibration.temperature)
    inputs = {"mode": "verification", "inputs": [_PAIR]}
    assert restored(inputs) == model(inputs)


def test_verification_loss_is_cross_entropy_against_named_labels():
    model = Investigator()
    pairs = [_PAIR, {"premise": "The disk is full.", "hypothesis": "The disk is full."}]
    loss = model.verification_loss(pairs, ["contradiction", "entailment"])
    expected = F.cross_entropy(model.verification_logits(pairs), torch.tensor([2, 0]))
    assert loss.requires_grad and float(loss.detach()) == pytest.approx(float(expected), rel=1e-5)
    with pytest.raises(ValueError, match="named NLI labels"):
        model.verification_loss(pairs, [2, 0])


def test_calibrate_verifier_example_runs_as_written(tmp_path, monkeypatch):
    """The spec's verification snippet, after saving a fresh Investigator where it loads from."""
    monkeypatch.chdir(tmp_path)
    Investigator().save_pretrained("./investigator-with-verifier")

    from tensorcode import training
    from tensorcode.tools.investigator import Investigator as Loaded

    model = Loaded.from_pretrained("./investigator-with-verifier")
    trainer = training.Trainer.from_tool(model, lr=0.0001)
    experience = trainer.capture({
        "mode": "verification",
        "inputs": [{"premise": "The connection was refused.",
                    "hypothesis": "The connection succeeded."}],
    }, ["contradiction"], source="authored-example:review-17")
    experience.save("verification.json", operations=trainer.operations, release=True)
    experience = training.load_experience("verification.json", operations=trainer.operations)
    trainer.fit([experience], epochs=1)
    model.save_pretrained("./updated-investigator")
    trainer.save_checkpoint("./verification-training", progress={"next_review": 18})
    restored = Loaded.from_pretrained("./updated-investigator")

    assert trainer.steps == 1
    assert restored({"mode": "verification", "inputs": [_PAIR]}) == model({"mode": "verification", "inputs": [_PAIR]})
