from __future__ import annotations

import json
import math
import random

import pytest
import torch
from tool_testing import held_out_split, source_weights, state_copy

from tensorcode import training
from tensorcode.tools.planner import Planner

torch.set_num_threads(1)

SERVICES = ["database", "cache", "queue", "gateway", "scheduler", "storage", "billing", "search"]
ACTIONS = [
    ("Restart the {s}.", 1.0),
    ("Roll back the last deploy of the {s}.", 2.0),
    ("Add capacity to the {s}.", 0.5),
    ("Wait and watch the {s}.", -1.0),
]
SYMPTOMS = ["a memory leak", "a bad deploy", "a traffic spike", "a flaky disk"]
# BONUS[action][symptom]: how much better an action does under a symptom, so the outcome depends on both the
# plan and what the evidence says.
BONUS = [[3.0, 0.0, 0.0, 0.0], [0.0, 3.0, -1.0, 0.0], [-1.0, 0.0, 3.0, 0.0], [0.0, 0.0, 0.0, 1.0]]


def _incident(rng: random.Random) -> tuple[dict, list[float]]:
    service, symptom = rng.choice(SERVICES), rng.randrange(len(SYMPTOMS))
    actions = rng.sample(range(len(ACTIONS)), 3)
    evidence = [
        {"source_id": "monitor", "text": f"The {service} is suffering from {SYMPTOMS[symptom]}."},
        {"source_id": "chat", "text": f"Someone asked about lunch near the {rng.choice(SERVICES)} team."},
    ]
    rng.shuffle(evidence)
    plans = [{"id": f"p{i}", "text": ACTIONS[a][0].format(s=service)} for i, a in enumerate(actions)]
    outcomes = [ACTIONS[a][1] + BONUS[a][symptom] for a in actions]
    return {"goal": f"Recover the {service} quickly.", "evidence": evidence, "plans": plans}, outcomes


def _mse(tool: Planner, data: list) -> float:
    receipts = tool([x for x, _ in data])
    errors = [
        (candidate["outcome"] - y) ** 2
        for receipt, (_, ys) in zip(receipts, data, strict=True)
        for candidate, y in zip(receipt["candidates"], ys, strict=True)
    ]
    return sum(errors) / len(errors)


def _example() -> dict:
    return {
        "goal": "Recover the cache quickly.",
        "evidence": [
            {"source_id": "monitor", "text": "The cache is suffering from a memory leak."},
            {"source_id": "chat", "text": "Lunch is at noon."},
        ],
        "plans": [{"id": "restart", "text": "Restart the cache."}, {"id": "wait", "text": "Wait and watch."}],
    }


PROPOSALS = [
    (
        {"goal": "Recover the database.", "evidence": [{"source_id": "m", "text": "A memory leak."}]},
        "Restart it.",
    ),
    (
        {
            "goal": "Recover the cache quickly.",
            "evidence": [{"source_id": "m", "text": "The cache got a bad deploy."}],
        },
        "Roll back the cache deploy.",
    ),
    (
        {
            "goal": "Recover the queue quickly.",
            "evidence": [{"source_id": "m", "text": "A traffic spike hit."}],
        },
        "Add capacity to the queue.",
    ),
    (
        {
            "goal": "Recover the gateway.",
            "evidence": [{"source_id": "m", "text": "The gateway has a flaky disk."}],
        },
        "Replace the gateway disk.",
    ),
    ({"goal": "Keep billing running.", "evidence": []}, "Watch billing for an hour."),
]


def test_constructs_with_no_arguments_and_refuses_unknown_fields():
    assert Planner().configuration()["prefer"] == "max"
    with pytest.raises(ValueError, match="'plans'.*valid fields: buckets, dim, limits, lowercase, max_length"):
        Planner(plans=3)


@pytest.mark.parametrize(("field", "value"), [("prefer", "best"), ("max_length", 0), ("dim", True)])
def test_bad_configuration_value_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"^{field}:"):
        Planner(**{field: value})


def test_receipt_carries_outcomes_probabilities_and_attention():
    receipt = Planner()(_example())
    assert json.loads(json.dumps(receipt)) == receipt
    assert [c["id"] for c in receipt["candidates"]] == ["restart", "wait"]
    assert math.isclose(sum(c["probability"] for c in receipt["candidates"]), 1.0, rel_tol=1e-6)
    best = max(receipt["candidates"], key=lambda c: c["outcome"])
    assert receipt["selected_id"] == best["id"] and receipt["prefer"] == "max"
    assert all(c["score"] == c["outcome"] for c in receipt["candidates"])
    assert receipt["kind"] == "outcome"
    weights = source_weights(receipt["attention"])
    assert set(weights) == {"monitor", "chat"}
    assert math.isclose(sum(weights.values()), 1.0, rel_tol=1e-5)


def test_prefer_min_selects_the_lowest_predicted_outcome():
    receipt = Planner(prefer="min")(_example())
    best = min(receipt["candidates"], key=lambda c: c["outcome"])
    assert receipt["selected_id"] == best["id"]
    assert all(c["score"] == -c["outcome"] for c in receipt["candidates"])


def test_candidate_target_supervises_that_plan_only():
    tool = Planner()
    loss = tool.outcome_loss(_example(), {"candidate_id": "wait", "outcome": 2.5})
    predicted = tool(_example())["candidates"][1]["outcome"]
    assert math.isclose(loss.item(), (predicted - 2.5) ** 2, rel_tol=1e-5)
    loss.backward()
    plan = tool.prepare_capture(_example(), {"candidate_id": "wait", "outcome": 2.5})
    assert plan.target["observed"].tolist() == [[0.0, 1.0]]
    assert tool.prepare_capture(_example(), [1, -2.0]).target["observed"].tolist() == [[1.0, 1.0]]


@pytest.mark.parametrize(
    ("inputs", "targets", "field"),
    [
        (_example(), [1.0], "targets: 1 outcomes for 2"),
        (_example(), [1.0, float("nan")], r"targets\[1\]"),
        (_example(), {"candidate_id": "deploy", "outcome": 1.0}, r"targets\['candidate_id'\]"),
        (_example(), {"candidate_id": "wait", "outcome": float("inf")}, r"targets\['outcome'\]"),
        (_example(), {"candidate_id": "wait"}, "targets: missing 'outcome'"),
        (_example(), "restart", "targets"),
        ([_example(), _example()], [[1.0, 2.0]], "targets"),
        ({**_example(), "plans": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}, [1, 2], r"\['id'\]"),
        ({**_example(), "goal": ""}, [1, 2], r"inputs\['goal'\]"),
        ({"mode": "simulate", "inputs": _example()}, [1, 2], "mode"),
        ({"mode": "proposal", "inputs": _example()}, "", "targets"),
        ({"mode": "proposal", "inputs": _example()}, "x" * 200, "targets: reviewed plan is 200 bytes"),
        ({"mode": "proposal", "inputs": [_example()]}, ["ok", "extra"], "targets"),
    ],
)
def test_bad_input_is_refused_naming_the_field_before_anything_changes(inputs, targets, field):
    tool = Planner()
    trainer = training.Trainer.from_tool(tool, optimizer=lambda p: torch.optim.Adam(p, lr=1e-2))
    before = state_copy(tool)
    with pytest.raises(ValueError, match=field):
        trainer.capture(inputs, targets, source="review:1")
    assert all(torch.equal(v, tool.state_dict()[k]) for k, v in before.items())


def test_learns_outcomes_of_held_out_incidents(tmp_path):
    """Held-out outcome MSE falls by more than half; targets mix single observed plans and full lists."""
    train, held_out = held_out_split(_incident, 64, 100, seed=3)
    tool = Planner()
    before = _mse(tool, held_out)
    trainer = training.Trainer.from_tool(tool, optimizer=lambda p: torch.optim.Adam(p, lr=1e-2))
    targets = [ys if i % 2 else {"candidate_id": "p1", "outcome": ys[1]} for i, (_, ys) in enumerate(train)]
    experience = trainer.capture([x for x, _ in train], targets, source=[f"run:{i}" for i in range(len(train))])
    experience.save(tmp_path / "outcomes.json", operations=trainer.operations, release=True)
    experience = training.load_experience(tmp_path / "outcomes.json", operations=trainer.operations)
    trainer.fit([experience], epochs=90)
    after = _mse(tool, held_out)
    assert after <= 0.5 * before, (before, after)
    # Better than always predicting the mean training outcome: it learned how plans and evidence matter.
    mean = sum(y for _, ys in train for y in ys) / sum(len(ys) for _, ys in train)
    assert after < sum((y - mean) ** 2 for _, ys in held_out for y in ys) / sum(len(ys) for _, ys in held_out)
    # Plans are judged by the monitoring source, not the chatter next to it.
    weights = [source_weights(c["attention"])["monitor"]
               for receipt in tool([x for x, _ in held_out]) for c in receipt["candidates"]]
    assert sum(weights) / len(weights) >= 0.6


def test_proposal_feedback_trains_the_generator_to_reproduce_reviewed_plans():
    tool = Planner()
    trainer = training.Trainer.from_tool(tool, optimizer=lambda p: torch.optim.Adam(p, lr=1e-2))
    experience = trainer.capture(
        {"mode": "proposal", "inputs": [x for x, _ in PROPOSALS]},
        [y for _, y in PROPOSALS],
        source=[f"review:{i}" for i in range(len(PROPOSALS))],
    )
    losses = trainer.fit([experience], epochs=120)
    assert losses[-1] <= 0.2 * losses[0]
    assert [p[0] for p in tool.propose([x for x, _ in PROPOSALS])] == [y for _, y in PROPOSALS]
    three = tool.propose(PROPOSALS[1][0], count=3)
    assert three[0] == PROPOSALS[1][1] and len(set(three)) == 3
    receipt = tool({"mode": "proposal", "inputs": PROPOSALS[1][0]})
    assert receipt["kind"] == "generation" and receipt["text"] == PROPOSALS[1][1]
    assert source_weights(receipt["attention"]) == {"m": 1.0}


def test_proposal_loss_matches_the_captured_objective():
    tool = Planner()
    direct = tool.proposal_loss(PROPOSALS[0][0], PROPOSALS[0][1])
    plan = tool.prepare_capture({"mode": "proposal", "inputs": PROPOSALS[0][0]}, PROPOSALS[0][1])
    assert plan.inputs["examples"][0] == {
        "goal": "Recover the database.",
        "evidence": PROPOSALS[0][0]["evidence"],
    }
    replayed = tool.training_losses()[plan.loss](tool.training_operations()["planner"](plan.inputs), plan.target)
    assert math.isclose(direct.item(), replayed.item(), rel_tol=1e-6)


def test_save_pretrained_round_trips_with_identical_outputs(tmp_path):
    tool = Planner(seed=4, prefer="min")
    tool.save_pretrained(tmp_path / "planner")
    restored = Planner.from_pretrained(tmp_path / "planner")
    assert restored.configuration() == tool.configuration()
    assert restored(_example()) == tool(_example())
    assert restored.propose(PROPOSALS[0][0], count=2) == tool.propose(PROPOSALS[0][0], count=2)
