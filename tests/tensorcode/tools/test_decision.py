from __future__ import annotations

import json
import math
import random

import pytest
import torch
from tool_testing import held_out_split, source_weights, state_copy

from tensorcode import training
from tensorcode.tools.decision import Decision

torch.set_num_threads(1)

SERVICES = ["database", "cache", "queue", "gateway", "scheduler", "storage", "billing", "search"]
# (question, evidence template): the question never repeats the evidence's wording, so the model has to learn
# which source answers which question, and then which hypothesis that source supports.
EVENTS = [
    ("Why did the outage happen?", "The root cause turned out to be the {x}."),
    ("Which component did operators reboot?", "Operators restarted the {x} at noon."),
    ("Where did the first alarm fire?", "The earliest alert came from the {x}."),
    ("What was scaled up afterwards?", "Capacity was added to the {x} later."),
]


def _incident(rng: random.Random) -> tuple[dict, str]:
    """Three sources each tie one service to one event; the question asks about one event."""
    services = rng.sample(SERVICES, 3)
    events = rng.sample(range(len(EVENTS)), 3)
    evidence = [
        {"source_id": f"log-{i}", "text": EVENTS[e][1].format(x=s)}
        for i, (e, s) in enumerate(zip(events, services, strict=True))
    ]
    rng.shuffle(evidence)
    asked = rng.randrange(3)
    hypotheses = [{"id": f"h{i}", "text": f"the {s}"} for i, s in enumerate(services)]
    rng.shuffle(hypotheses)
    return {"question": EVENTS[events[asked]][0], "evidence": evidence, "hypotheses": hypotheses}, f"h{asked}"


def _accuracy(tool: Decision, data: list) -> float:
    receipts = tool([x for x, _ in data])
    return sum(r["selected_id"] == y for r, (_, y) in zip(receipts, data, strict=True)) / len(data)


def _example() -> dict:
    return {
        "question": "Why did the outage happen?",
        "evidence": [
            {"source_id": "log-1", "text": "The root cause turned out to be the database."},
            {"source_id": "log-2", "text": "Operators restarted the cache at noon."},
        ],
        "hypotheses": [{"id": "db", "text": "the database"}, {"id": "cache", "text": "the cache"}],
    }


def test_constructs_with_no_arguments_and_seed_reproduces_initialisation():
    a, b, c = Decision(), Decision(seed=3), Decision(seed=3)
    assert a.configuration()["seed"] == 0
    assert all(
        torch.equal(x, y) for x, y in zip(b.state_dict().values(), c.state_dict().values(), strict=True)
    )
    assert not all(
        torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


def test_unknown_configuration_field_is_refused_naming_valid_fields():
    with pytest.raises(ValueError, match="'width'.*valid fields: buckets, dim, limits, lowercase, max_words, seed"):
        Decision(width=3)


@pytest.mark.parametrize(
    ("field", "value"), [("dim", 0), ("buckets", "many"), ("seed", 1.5), ("lowercase", 1)]
)
def test_bad_configuration_value_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"^{field}:"):
        Decision(**{field: value})


def test_receipt_is_json_safe_and_shows_scores_probabilities_and_attention():
    receipt = Decision()(_example())
    assert json.loads(json.dumps(receipt)) == receipt
    assert [c["id"] for c in receipt["candidates"]] == ["db", "cache"]
    assert math.isclose(sum(c["probability"] for c in receipt["candidates"]), 1.0, rel_tol=1e-6)
    best = max(receipt["candidates"], key=lambda c: c["score"])
    assert receipt["selected_id"] == best["id"] == receipt["candidates"][receipt["selected_index"]]["id"]
    for candidate in receipt["candidates"]:
        weights = source_weights(candidate["attention"])
        assert set(weights) == {"log-1", "log-2"}
        assert math.isclose(sum(weights.values()), 1.0, rel_tol=1e-5)
    assert receipt["attention"] == best["attention"]


def test_batch_of_inputs_gives_the_receipts_of_single_calls():
    tool = Decision()
    other = {**_example(), "question": "Which component did operators reboot?", "evidence": []}
    batch = tool([_example(), other])
    for single, batched in zip([tool(_example()), tool(other)], batch, strict=True):
        assert single["selected_id"] == batched["selected_id"]
        for a, b in zip(single["candidates"], batched["candidates"], strict=True):
            assert math.isclose(a["score"], b["score"], rel_tol=1e-5, abs_tol=1e-5)
    assert batch[1]["attention"] is None


def test_id_index_and_one_hot_distribution_are_the_same_target():
    tool = Decision()
    plans = [tool.prepare_capture(_example(), t) for t in ("cache", 1, [0.0, 1.0])]
    assert all(torch.equal(plans[0].target, p.target) for p in plans)
    assert plans[0].target.tolist() == [[0.0, 1.0]]
    assert tool.prepare_capture({"mode": "rank", "inputs": _example()}, "db").target.tolist() == [[1.0, 0.0]]


def _bad(**changes) -> dict:
    example = _example()
    example.update(changes)
    return example


@pytest.mark.parametrize(
    ("inputs", "targets", "field"),
    [
        ([_example(), _example()], ["db"], "targets"),
        (_example(), [0.5, 0.6], "targets"),
        (_example(), [1.5, -0.5], r"targets\[1\]"),
        (_example(), [float("nan"), 1.0], r"targets\[0\]"),
        (_example(), [1.0], "targets"),
        (_example(), "network", "targets"),
        (_example(), 2, "targets"),
        (_example(), True, "targets"),
        ([_example(), _example()], ["db", "nope"], r"targets\[1\]"),
        (
            _bad(hypotheses=[{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]),
            "a",
            r"\['hypotheses'\]\[1\]\['id'\]",
        ),
        (
            _bad(evidence=[{"source_id": "s", "text": "x"}, {"source_id": "s", "text": "y"}]),
            0,
            r"\['evidence'\]\[1\]\['source_id'\]",
        ),
        (_bad(question="  "), 0, r"inputs\['question'\]"),
        (_bad(hypotheses=[{"id": "a", "text": ""}]), 0, r"\['hypotheses'\]\[0\]\['text'\]"),
        (_bad(hypotheses=[]), 0, r"inputs\['hypotheses'\]"),
        (_bad(extra=1), 0, "inputs: unknown key 'extra'"),
        ({"mode": "verify", "inputs": _example()}, 0, "mode"),
        ([], [], "inputs"),
    ],
)
def test_bad_input_is_refused_naming_the_field_before_anything_changes(inputs, targets, field):
    tool = Decision()
    trainer = training.Trainer.from_tool(tool, optimizer=lambda p: torch.optim.Adam(p, lr=1e-2))
    before = state_copy(tool)
    with pytest.raises(ValueError, match=field):
        trainer.capture(inputs, targets, source="review:1")
    assert trainer.steps == 0
    assert all(torch.equal(v, tool.state_dict()[k]) for k, v in before.items())


def test_batch_capture_keeps_one_source_per_example_through_save_and_load(tmp_path):
    tool = Decision()
    trainer = training.Trainer.from_tool(tool)
    experience = trainer.capture(
        [_example(), _example()], ["db", [0.25, 0.75]], source=["review:1", "review:2"]
    )
    assert len(experience.calls) == 1
    experience.save(tmp_path / "experience.json", operations=trainer.operations, release=True)
    loaded = training.load_experience(tmp_path / "experience.json", operations=trainer.operations)
    assert tuple(loaded.supervisions[0].source) == ("review:1", "review:2")
    loss = trainer.step(loaded)
    assert math.isfinite(loss) and trainer.steps == 1


def test_learns_to_rank_held_out_incidents():
    """Top-1 on held-out incidents (new service/event/order combinations) goes from chance to >= 0.9."""
    train, held_out = held_out_split(_incident, 64, 100, seed=7)
    tool = Decision()
    before = _accuracy(tool, held_out)
    trainer = training.Trainer.from_tool(tool, optimizer=lambda p: torch.optim.Adam(p, lr=1e-2))
    experience = trainer.capture(
        [x for x, _ in train], [y for _, y in train], source=[f"review:{i}" for i in range(len(train))]
    )
    losses = trainer.fit([experience], epochs=40)
    after = _accuracy(tool, held_out)
    assert before < 0.6
    assert after >= 0.9, (before, after)
    assert losses[-1] < 0.1 * losses[0]
    # The receipt's attention points at the source that answers the question.
    looked = 0
    for example, answer in held_out:
        service = next(h["text"] for h in example["hypotheses"] if h["id"] == answer).removeprefix("the ")
        answering = next(s["source_id"] for s in example["evidence"] if service in s["text"])
        attention = source_weights(tool(example)["attention"])
        looked += max(attention, key=attention.get) == answering
    assert looked / len(held_out) >= 0.9


def test_save_pretrained_round_trips_with_identical_receipts(tmp_path):
    tool = Decision(dim=16, seed=5)
    with torch.no_grad():
        tool.ranker.relevance_scale.add_(0.5)
    tool.save_pretrained(tmp_path / "decision")
    restored = Decision.from_pretrained(tmp_path / "decision")
    assert restored.configuration() == tool.configuration()
    assert restored(_example()) == tool(_example())


def test_train_an_owned_tool_example_runs_as_written(tmp_path, monkeypatch):
    """The spec's "Train an owned tool" lifecycle with a Decision model."""
    monkeypatch.chdir(tmp_path)
    model = Decision()
    inputs, targets = _example(), "db"
    trainer = training.Trainer.from_tool(model, lr=0.001)
    experience = trainer.capture(inputs, targets, source="review:42")
    experience.save("experience.json", operations=trainer.operations, release=True)

    experience = training.load_experience("experience.json", operations=trainer.operations)
    losses = trainer.fit([experience], epochs=10)
    model.save_pretrained("./model")
    trainer.save_checkpoint("./training", progress={"next_example": 43})

    assert len(losses) == 10 and losses[-1] < losses[0]
    model = Decision.from_pretrained("./model")
    trainer = training.Trainer.from_tool(model, lr=0.001)
    progress = trainer.load_checkpoint("./training")
    experience = training.load_experience("experience.json", operations=trainer.operations)
    trainer.fit([experience], epochs=1)
    assert progress == {"next_example": 43}
