from __future__ import annotations

import json
import math
import random

import pytest
import torch
from tool_testing import source_weights, state_copy

from tensorcode import training
from tensorcode.tools.investigator import Investigator

torch.set_num_threads(1)

# Each hypothesis names a cause; each cause has its own evidence wording. The question names the service, and a
# distractor source reports another cause for another service, so ranking needs attention to the right source.
CAUSES = [
    ("the disk was full", "{s} logs say the disk was full and writes stopped."),
    ("an expired certificate", "{s} handshakes failed because a certificate had expired."),
    ("a memory leak", "{s} memory grew until the process was killed by a leak."),
    ("a bad deploy", "{s} broke right after a bad deploy went out."),
    ("a network partition", "{s} lost contact with its peers during a network partition."),
    ("a dns failure", "{s} could not resolve names after a dns failure."),
]


def _names(rng: random.Random, count: int) -> list[str]:
    """Made-up service names, so held-out examples name services the model never saw."""
    names: dict[str, None] = {}
    while len(names) < count:
        names["".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3))] = None
    return list(names)


def _incident(rng: random.Random, names: list[str]) -> tuple[dict, str]:
    service, other = rng.sample(names, 2)
    causes = rng.sample(range(len(CAUSES)), 3)
    texts = [CAUSES[causes[0]][1].format(s=service), CAUSES[causes[1]][1].format(s=other),
             f"{service} owners were paged at night."]
    rng.shuffle(texts)
    hypotheses = [{"id": f"h{i}", "text": CAUSES[c][0]} for i, c in enumerate(causes)]
    rng.shuffle(hypotheses)
    return {"question": f"Why did {service} go down?",
            "evidence": [{"source_id": f"src-{i}", "text": t} for i, t in enumerate(texts)],
            "hypotheses": hypotheses}, "h0"


def _example() -> dict:
    return {
        "question": "Why did billing go down?",
        "evidence": [
            {"source_id": "log-1", "text": "billing logs say the disk was full and writes stopped."},
            {"source_id": "log-2", "text": "search broke right after a bad deploy went out."},
        ],
        "hypotheses": [{"id": "disk", "text": "the disk was full"}, {"id": "deploy", "text": "a bad deploy"}],
    }


def _same_state(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# -- configuration ---------------------------------------------------------------------------------------------
def test_default_investigator_has_all_four_modes():
    model = Investigator()
    assert model.configuration()["modes"] == ["rank", "verification", "proposal", "retrieval"]
    assert model.ranker is not None and model.verifier is not None and model.proposer is not None
    assert model.episodic_encoder is not None
    assert sorted(model.training_losses()) == [
        "investigator.proposal", "investigator.rank", "investigator.retrieval", "investigator.verification"]


def test_seed_reproduces_initialisation():
    a, b, c = Investigator(seed=3), Investigator(seed=3), Investigator(seed=4)
    assert _same_state(state_copy(a), state_copy(b))
    assert not _same_state(state_copy(a), state_copy(c))


def test_configuration_can_leave_capabilities_out():
    model = Investigator(modes=["verification"], retrieval_encoder=None)
    assert model.ranker is None and model.proposer is None and model.episodic_encoder is None
    assert model.verifier is not None
    with pytest.raises(ValueError, match="'rank'"):
        model(_example())
    with pytest.raises(ValueError, match="mode"):
        model.propose({"question": "why?"})
    with pytest.raises(ValueError, match="retrieval_encoder"):
        model.episodic_index()


def test_unknown_configuration_field_is_refused_listing_valid_fields():
    with pytest.raises(ValueError, match="'colour'.*valid fields: .*modes.*retrieval_encoder"):
        Investigator(colour="red")


@pytest.mark.parametrize(("configuration", "field"), [
    ({"modes": []}, "modes"),
    ({"modes": ["rank", "guessing"]}, "modes"),
    ({"modes": ["rank", "rank"]}, "modes"),
    ({"dim": 0}, "dim"),
    ({"max_length": "long"}, "max_length"),
    ({"seed": 1.5}, "seed"),
    ({"retrieval_encoder": {"width": 3}}, "retrieval_encoder"),
    ({"retrieval_encoder": {"frozen": "yes"}}, "retrieval_encoder.frozen"),
    ({"retrieval_encoder": None}, "retrieval_encoder"),
])
def test_bad_configuration_value_names_the_field(configuration, field):
    with pytest.raises(ValueError, match=field):
        Investigator(**configuration)


def test_partial_retrieval_encoder_section_is_completed_with_defaults():
    model = Investigator(retrieval_encoder={"frozen": True})
    assert model.configuration()["retrieval_encoder"] == {"dim": 32, "frozen": True}


# -- receipts --------------------------------------------------------------------------------------------------
def test_rank_receipt_is_json_safe_with_scores_probabilities_and_attention():
    receipt = Investigator()(_example())
    assert json.loads(json.dumps(receipt, allow_nan=False)) == receipt
    assert receipt["kind"] == "ranking" and receipt["mode"] == "rank"
    assert receipt["selected_id"] in {"disk", "deploy"}
    assert [c["id"] for c in receipt["candidates"]] == ["disk", "deploy"]
    assert math.isclose(sum(c["probability"] for c in receipt["candidates"]), 1.0, rel_tol=1e-6)
    weights = source_weights(receipt["attention"])
    assert set(weights) == {"log-1", "log-2"}
    assert math.isclose(sum(weights.values()), 1.0, rel_tol=1e-5)


def test_envelope_and_plain_rank_inputs_give_the_same_receipt():
    model = Investigator()
    assert model({"mode": "rank", "inputs": _example()}) == model(_example())


def test_batch_forward_gives_the_receipts_of_single_calls():
    model = Investigator()
    other = {**_example(), "question": "What broke search?"}
    batched = model([_example(), other])
    for single, receipt in zip([model(_example()), model(other)], batched, strict=True):
        assert single["selected_id"] == receipt["selected_id"]
        for a, b in zip(single["candidates"], receipt["candidates"], strict=True):
            assert math.isclose(a["score"], b["score"], rel_tol=1e-5, abs_tol=1e-5)


def test_every_mode_returns_json_safe_receipts():
    model = Investigator()
    receipts = [
        model({"mode": "verification", "inputs": [{"premise": "The disk is full.", "hypothesis": "Disk full."}]}),
        model({"mode": "proposal", "inputs": {"question": "Why did billing fail?"}}),
        model({"mode": "retrieval", "inputs": {"queries": ["billing"], "documents": ["billing notes", "other"]}}),
    ]
    for receipt in receipts:
        assert json.loads(json.dumps(receipt, allow_nan=False)) == receipt
    verification, proposal, retrieval = receipts
    assert [c["id"] for c in verification[0]["candidates"]] == ["entailment", "neutral", "contradiction"]
    assert len({c["text"] for c in proposal["candidates"]}) == 3
    assert proposal["text"] == proposal["candidates"][0]["text"]
    assert [d["id"] for d in retrieval["queries"][0]["documents"]] == ["0", "1"]


def test_propose_returns_distinct_texts_deterministically():
    model = Investigator(max_length=12)
    inputs = {"question": "Why did billing fail?", "evidence": [{"source_id": "a", "text": "disk full"}]}
    first = model.propose(inputs, count=3)
    assert len(first) == 3 and len(set(first)) == 3
    assert model.propose(inputs, count=3) == first
    assert all(len(text) <= 12 for text in first)  # at most one character per generated byte
    assert first[0] == model({"mode": "proposal", "inputs": inputs})["text"]
    assert model.propose([inputs, inputs], count=2) == [first[:2], first[:2]]


# -- bad input -------------------------------------------------------------------------------------------------
_PAIR = {"premise": "The disk is full.", "hypothesis": "The disk has space."}
_GROUP = {"queries": ["q one", "q two"], "documents": ["d one", "d two", "d three"]}


@pytest.mark.parametrize(("inputs", "targets", "field"), [
    ({"mode": "guess", "inputs": _example()}, "disk", "mode"),
    ({"mode": "rank", "inputs": _example(), "extra": 1}, "disk", "extra"),
    (_example(), "cache", "unknown hypothesis id 'cache'"),
    (_example(), 2, "targets"),
    (_example(), True, "targets"),
    (_example(), [0.5, 0.6], "sum to one"),
    (_example(), [1.5, -0.5], r"targets\[1\]"),
    (_example(), [float("nan"), 1.0], r"targets\[0\]"),
    (_example(), [1.0], "targets"),
    ([_example(), _example()], ["disk"], "targets"),
    ({**_example(), "question": "  "}, "disk", "question"),
    ({**_example(), "hypotheses": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}, "a", "duplicate"),
    ({**_example(), "evidence": [{"source_id": "s", "text": ""}]}, "disk", "evidence"),
    ({**_example(), "reviewer_note": "disk"}, "disk", "reviewer_note"),
    ({"mode": "verification", "inputs": [_PAIR]}, ["refuted"], "targets"),
    ({"mode": "verification", "inputs": [_PAIR]}, [2], "targets"),
    ({"mode": "verification", "inputs": [_PAIR, _PAIR]}, ["neutral"], "targets"),
    ({"mode": "verification", "inputs": [{"premise": "x", "hypothesis": ""}]}, ["neutral"], "hypothesis"),
    ({"mode": "proposal", "inputs": {"question": "why?"}}, "", "targets"),
    ({"mode": "proposal", "inputs": {"question": "why?"}}, ["a"], "targets"),
    ({"mode": "retrieval", "inputs": _GROUP}, [[True, False, False], [False, False, False]], r"targets\[1\]"),
    ({"mode": "retrieval", "inputs": _GROUP}, [[True, False], [False, True]], "targets"),
    ({"mode": "retrieval", "inputs": _GROUP}, [[1, 0, 0], [0, 1, 0]], "targets"),
    ({"mode": "retrieval", "inputs": _GROUP}, torch.ones(3, 3, dtype=torch.bool), "targets"),
    ({"mode": "retrieval", "inputs": {"queries": [], "documents": ["d"]}}, [], "queries"),
])
def test_bad_input_is_refused_naming_the_field_before_anything_changes(inputs, targets, field):
    model = Investigator()
    before = state_copy(model)
    trainer = training.Trainer.from_tool(model)
    with pytest.raises(ValueError, match=field):
        trainer.capture(inputs, targets, source="review:1")
    assert trainer.steps == 0 and _same_state(before, state_copy(model))


# -- training protocol -----------------------------------------------------------------------------------------
def test_capture_records_one_call_and_keeps_one_source_per_example(tmp_path):
    model = Investigator()
    trainer = training.Trainer.from_tool(model)
    other = {**_example(), "question": "What broke search?"}
    experience = trainer.capture([_example(), other], ["disk", [0.25, 0.75]], source=["review:1", "review:2"])
    assert len(experience.calls) == 1
    experience.save(tmp_path / "experience.json", operations=trainer.operations, release=True)
    loaded = training.load_experience(tmp_path / "experience.json", operations=trainer.operations)
    assert tuple(loaded.supervisions[0].source) == ("review:1", "review:2")
    assert math.isfinite(trainer.step(loaded)) and trainer.steps == 1


def test_a_list_of_one_example_envelopes_is_one_batch_of_their_mode():
    model = Investigator()
    pairs = [_PAIR, {"premise": "The cache was cleared.", "hypothesis": "The cache is empty."}]
    envelopes = [{"mode": "verification", "inputs": p} for p in pairs]
    assert model(envelopes) == model({"mode": "verification", "inputs": pairs})
    trainer = training.Trainer.from_tool(model)
    experience = trainer.capture(envelopes, ["contradiction", "entailment"], source=["review:1", "review:2"])
    assert len(experience.calls) == 1
    with pytest.raises(ValueError, match="one mode"):
        trainer.capture([envelopes[0], {"mode": "rank", "inputs": _example()}], ["neutral", 0], source="r")
    with pytest.raises(ValueError, match=r"inputs\[1\]"):
        trainer.capture([envelopes[0], _example()], ["neutral", 0], source="r")


def test_every_mode_trains_from_a_saved_experience(tmp_path):
    model = Investigator()
    trainer = training.Trainer.from_tool(model, lr=0.01)
    captures = [
        (_example(), 0),
        ({"mode": "verification", "inputs": [_PAIR]}, ["contradiction"]),
        ({"mode": "proposal", "inputs": [{"question": "Why did billing fail?"}]}, ["the disk was full"]),
        ({"mode": "retrieval", "inputs": _GROUP}, [[True, False, True], [False, True, False]]),
    ]
    for i, (inputs, targets) in enumerate(captures):
        before = state_copy(model)
        experience = trainer.capture(inputs, targets, source=f"review:{i}")
        experience.save(tmp_path / f"{i}.json", operations=trainer.operations, release=True)
        loaded = training.load_experience(tmp_path / f"{i}.json", operations=trainer.operations)
        assert math.isfinite(trainer.step(loaded))
        assert not _same_state(before, state_copy(model))


def test_train_an_owned_tool_example_runs_as_written(tmp_path, monkeypatch):
    """The spec's "Train an owned tool" and "Resume training" lifecycle with an Investigator."""
    monkeypatch.chdir(tmp_path)
    model = Investigator()
    inputs, targets = _example(), "disk"
    trainer = training.Trainer.from_tool(model, lr=0.001)
    experience = trainer.capture(inputs, targets, source="review:42")
    experience.save("experience.json", operations=trainer.operations, release=True)

    experience = training.load_experience("experience.json", operations=trainer.operations)
    losses = trainer.fit([experience], epochs=10)
    model.save_pretrained("./model")
    trainer.save_checkpoint("./training", progress={"next_example": 43})

    model = Investigator.from_pretrained("./model")
    trainer = training.Trainer.from_tool(model, lr=0.001)
    progress = trainer.load_checkpoint("./training")
    experience = training.load_experience("experience.json", operations=trainer.operations)
    trainer.fit([experience], epochs=1)
    assert len(losses) == 10 and losses[-1] < losses[0]
    assert progress == {"next_example": 43}


def test_save_pretrained_round_trips_with_identical_outputs(tmp_path):
    model = Investigator(seed=5, max_length=16)
    with torch.no_grad():
        model.ranker.relevance_scale.add_(0.5)
    model.save_pretrained(tmp_path / "investigator")
    restored = Investigator.from_pretrained(tmp_path / "investigator")
    assert restored.configuration() == model.configuration()
    assert _same_state(state_copy(restored), state_copy(model))
    calls = [
        _example(),
        {"mode": "verification", "inputs": [_PAIR]},
        {"mode": "proposal", "inputs": {"question": "Why did billing fail?"}},
        {"mode": "retrieval", "inputs": _GROUP},
    ]
    for inputs in calls:
        assert restored(inputs) == model(inputs)


def test_from_pretrained_refuses_unknown_fields_and_other_artifacts(tmp_path):
    Investigator(modes=["rank"]).save_pretrained(tmp_path / "a")
    manifest = json.loads((tmp_path / "a" / "tool.json").read_text())
    manifest["configuration"]["colour"] = "red"
    (tmp_path / "a" / "tool.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="'colour'"):
        Investigator.from_pretrained(tmp_path / "a")


# -- learning --------------------------------------------------------------------------------------------------
def test_learns_to_rank_held_out_incidents():
    """Top-1 on held-out incidents (service/cause/distractor combinations never trained on) reaches >= 0.9."""
    rng = random.Random(0)
    names = _names(rng, 8)
    train = [_incident(rng, names) for _ in range(128)]
    seen = {json.dumps(x, sort_keys=True) for x, _ in train}
    held_out = []
    while len(held_out) < 100:
        example = _incident(rng, names)
        if json.dumps(example[0], sort_keys=True) not in seen:
            held_out.append(example)
    model = Investigator(modes=["rank"], retrieval_encoder=None)

    def accuracy() -> float:
        receipts = model([x for x, _ in held_out])
        return sum(r["selected_id"] == y for r, (_, y) in zip(receipts, held_out, strict=True)) / len(held_out)

    before = accuracy()
    trainer = training.Trainer.from_tool(model, optimizer=lambda p: torch.optim.Adam(p, lr=1e-2))
    experience = trainer.capture([x for x, _ in train], [y for _, y in train],
                                 source=[f"review:{i}" for i in range(len(train))])
    losses = trainer.fit([experience], epochs=30)
    after = accuracy()
    assert before < 0.7
    assert after >= 0.9, (before, after)
    assert losses[-1] < 0.1 * losses[0]


def test_proposal_generation_reproduces_reviewed_hypotheses():
    """Greedy proposals reproduce every trained target exactly; the loss drops by more than 80%."""
    services = ["billing", "search", "gateway", "queue"]
    causes = [c for c, _ in CAUSES]
    pairs = []
    for i, service in enumerate(services):
        for j in range(2):
            cause = causes[(i + 2 * j) % len(causes)]
            pairs.append(({"question": f"What broke {service}?",
                           "evidence": [{"source_id": "log", "text": f"{service} alarms mention {cause}"}]},
                          f"{cause} on {service}"))
    model = Investigator(modes=["proposal"], retrieval_encoder=None)
    trainer = training.Trainer.from_tool(model, optimizer=lambda p: torch.optim.Adam(p, lr=2e-2))
    experience = trainer.capture({"mode": "proposal", "inputs": [x for x, _ in pairs]}, [y for _, y in pairs],
                                 source="review:proposals")
    losses = trainer.fit([experience], epochs=120)
    proposals = model.propose([x for x, _ in pairs], count=3)
    assert [p[0] for p in proposals] == [y for _, y in pairs]
    assert all(len(set(p)) == 3 for p in proposals)
    assert losses[-1] <= 0.2 * losses[0]
    direct = model.proposal_loss([x for x, _ in pairs], [y for _, y in pairs])
    assert float(direct.detach()) < 0.2 * losses[0]
