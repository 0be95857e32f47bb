from __future__ import annotations

import json
import math
import random

import pytest
import torch

from tensorcode import training
from tensorcode.tools._retrieval import StaleIndexError
from tensorcode.tools.investigator import EpisodicIndex, Investigator

torch.set_num_threads(1)

ACTIONS = ["restarted the workers", "rolled back the release", "cleared the cache", "rotated the certificate",
           "added disk capacity", "failed over to the replica"]


def _names(rng: random.Random, count: int) -> list[str]:
    names: dict[str, None] = {}
    while len(names) < count:
        names["".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3))] = None
    return list(names)


def _group(rng: random.Random, names: list[str], queries: int = 4) -> tuple[dict, list[list[bool]]]:
    """Each query asks about one service; its positives are notes about that service (sometimes two).

    Hard negatives repeat the query's wording about another service, so word overlap alone ranks them first.
    """
    services = rng.sample(names, queries + 2)
    documents, owner = [], []
    for q, service in enumerate(services[:queries]):
        documents.append(f"{service}: the team {rng.choice(ACTIONS)} and traffic recovered.")
        owner.append(q)
        if rng.random() < 0.3:
            documents.append(f"Follow-up for {service}: engineers also {rng.choice(ACTIONS)}.")
            owner.append(q)
    for service in services[queries:]:
        documents.append(f"Open question: how was the {service} outage resolved?")
        owner.append(None)
    order = list(range(len(documents)))
    rng.shuffle(order)
    group = {"queries": [f"How was the {s} outage resolved?" for s in services[:queries]],
             "documents": [documents[i] for i in order]}
    return group, [[owner[i] == q for i in order] for q in range(queries)]


def _recall_at_1(model: Investigator, data: list) -> float:
    hits = total = 0
    for group, mask in data:
        receipt = model({"mode": "retrieval", "inputs": group})
        for query, row in zip(receipt["queries"], mask, strict=True):
            hits += row[int(query["selected_id"])]
            total += 1
    return hits / total


_GROUP = {"queries": ["How was billing restored?"],
          "documents": ["Restarting billing restored it.", "The maintenance window starts tomorrow.",
                        "Billing recovered after a rollback."]}
_RECORDS = [{"source_id": "a", "text": "billing recovered after a restart"},
            {"source_id": "b", "text": "the search cluster was scaled up"},
            {"source_id": "c", "text": "certificates were rotated on the gateway"}]


def _step(model: Investigator) -> None:
    trainer = training.Trainer.from_tool(model, lr=0.1)
    trainer.step(trainer.capture({"mode": "retrieval", "inputs": _GROUP}, [[True, False, False]], source="r:1"))


# -- learning --------------------------------------------------------------------------------------------------
def test_retrieval_learns_recall_at_1_on_held_out_services():
    rng = random.Random(0)
    names = _names(rng, 1200)
    train = [_group(rng, names[:600]) for _ in range(48)]
    held_out = [_group(rng, names[600:]) for _ in range(50)]
    model = Investigator(modes=["retrieval"])
    before = _recall_at_1(model, held_out)
    trainer = training.Trainer.from_tool(model, optimizer=lambda p: torch.optim.Adam(p, lr=1e-2))
    experience = trainer.capture({"mode": "retrieval", "inputs": [g for g, _ in train]}, [m for _, m in train],
                                 source=[f"review:{i}" for i in range(len(train))])
    losses = trainer.fit([experience], epochs=30)
    after = _recall_at_1(model, held_out)
    assert before < 0.5
    assert after >= 0.9, (before, after)
    # Queries with two positives keep a floor of ln 2 (the target's own entropy).
    assert losses[-1] < 0.2 * losses[0]


def test_multiple_positives_receive_equal_target_weight():
    model = Investigator()
    loss = model.retrieval_loss(_GROUP, [[True, False, True]])
    scores = [c["score"] for c in model({"mode": "retrieval", "inputs": _GROUP})["queries"][0]["documents"]]
    log_probs = torch.tensor(scores).log_softmax(-1)
    assert float(loss.detach()) == pytest.approx(float(-(log_probs[0] + log_probs[2]) / 2), rel=1e-5)
    assert loss.requires_grad


def test_retrieval_mask_may_be_a_boolean_tensor():
    model = Investigator()
    as_list = model.retrieval_loss(_GROUP, [[True, False, True]])
    as_tensor = model.retrieval_loss(_GROUP, torch.tensor([[True, False, True]]))
    assert torch.equal(as_list, as_tensor)


# -- frozen retrieval foundation -------------------------------------------------------------------------------
def test_frozen_retrieval_encoder_refuses_training_until_made_trainable():
    model = Investigator(retrieval_encoder={"frozen": True})
    trainer = training.Trainer.from_tool(model, lr=0.1)
    assert not model.episodic_encoder.training and model.ranker.training
    encoder_ids = {id(p) for p in model.episodic_encoder.parameters()}
    assert not encoder_ids & {id(p) for p in trainer.parameters}
    with pytest.raises(ValueError, match=r"unfreeze_retrieval\(\)"):
        trainer.capture({"mode": "retrieval", "inputs": _GROUP}, [[True, False, False]], source="r:1")
    with pytest.raises(ValueError, match="frozen"):
        model.retrieval_loss(_GROUP, [[True, False, False]])

    model.unfreeze_retrieval()
    assert model.configuration()["retrieval_encoder"]["frozen"] is False
    before = {k: v.clone() for k, v in model.episodic_encoder.state_dict().items()}
    _step(model)
    after = model.episodic_encoder.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_frozen_encoder_is_untouched_by_other_training_and_round_trips(tmp_path):
    model = Investigator(retrieval_encoder={"frozen": True})
    before = {k: v.clone() for k, v in model.episodic_encoder.state_dict().items()}
    trainer = training.Trainer.from_tool(model, lr=0.1)
    example = {"question": "Why?", "hypotheses": [{"id": "a", "text": "disk"}, {"id": "b", "text": "dns"}]}
    trainer.step(trainer.capture(example, "a", source="r:1"))
    assert all(torch.equal(before[k], v) for k, v in model.episodic_encoder.state_dict().items())
    model.save_pretrained(tmp_path / "frozen")
    restored = Investigator.from_pretrained(tmp_path / "frozen")
    assert restored.configuration()["retrieval_encoder"]["frozen"] is True
    assert not any(p.requires_grad for p in restored.episodic_encoder.parameters())


# -- episodic index --------------------------------------------------------------------------------------------
def test_index_returns_top_k_records_with_scores():
    model = Investigator()
    index = model.episodic_index(_RECORDS)
    assert isinstance(index, EpisodicIndex) and len(index) == 3
    results = index.query("billing restart", k=2)
    assert len(results) == 2 and set(results[0]) == {"source_id", "score"}
    assert results[0]["score"] >= results[1]["score"]
    assert {r["source_id"] for r in index.query("billing", k=10)} == {"a", "b", "c"}
    assert json.loads(json.dumps(results)) == results


@pytest.mark.parametrize(("records", "field"), [
    ([{"source_id": "a", "text": "again"}], "already indexed"),
    ([{"source_id": "d", "text": "x"}, {"source_id": "d", "text": "y"}], "duplicate"),
    ([{"source_id": "d", "text": " "}], r"records\[0\]\['text'\]"),
    ([{"source_id": "d"}], "text"),
    ([], "records"),
])
def test_index_refuses_bad_records_and_keeps_its_contents(records, field):
    index = Investigator().episodic_index(_RECORDS)
    with pytest.raises(ValueError, match=field):
        index.add(records)
    assert len(index) == 3


def test_index_refuses_bad_queries():
    index = Investigator().episodic_index(_RECORDS)
    with pytest.raises(ValueError, match="query"):
        index.query("")
    with pytest.raises(ValueError, match="k"):
        index.query("billing", k=0)


def test_live_index_refuses_queries_after_encoder_weights_change_until_rebuilt():
    model = Investigator()
    index = model.episodic_index(_RECORDS)
    index.query("billing")
    _step(model)
    assert index.stale
    with pytest.raises(StaleIndexError, match=r"rebuild\(\)"):
        index.query("billing")
    with pytest.raises(StaleIndexError, match=r"rebuild\(\)"):
        index.add([{"source_id": "d", "text": "new"}])
    index.rebuild()
    assert not index.stale
    assert index.query("billing", k=3) == EpisodicIndex.restore(index.snapshot(), model).query("billing", k=3)


def test_training_other_modes_leaves_the_index_fresh():
    model = Investigator()
    index = model.episodic_index(_RECORDS)
    trainer = training.Trainer.from_tool(model, lr=0.1)
    example = {"question": "Why?", "hypotheses": [{"id": "a", "text": "disk"}, {"id": "b", "text": "dns"}]}
    trainer.step(trainer.capture(example, "a", source="r:1"))
    assert not index.stale and index.query("billing")


def test_snapshot_holds_raw_records_only_and_restore_rebuilds_embeddings(tmp_path):
    model = Investigator()
    index = model.episodic_index(_RECORDS)
    snapshot = json.loads(json.dumps(index.snapshot()))
    assert snapshot["records"] == _RECORDS
    assert set(snapshot) == {"format", "version", "records"}
    restored = EpisodicIndex.restore(snapshot, model)
    assert restored.query("billing", k=3) == index.query("billing", k=3)

    _step(model)  # the snapshot restores into the updated encoder with fresh embeddings
    updated = EpisodicIndex.restore(snapshot, model)
    assert not updated.stale
    model.save_pretrained(tmp_path / "m")
    reloaded = Investigator.from_pretrained(tmp_path / "m")
    assert EpisodicIndex.restore(snapshot, reloaded).query("billing", k=3) == updated.query("billing", k=3)


def test_restore_refuses_a_foreign_snapshot():
    with pytest.raises(ValueError, match="snapshot"):
        EpisodicIndex.restore({"records": _RECORDS}, Investigator())


# -- the spec's example ----------------------------------------------------------------------------------------
def test_train_owned_retrieval_example_runs_as_written(tmp_path, monkeypatch):
    """The spec's retrieval snippet, after saving a fresh Investigator where it loads from."""
    monkeypatch.chdir(tmp_path)
    Investigator(retrieval_encoder={"dim": 32}).save_pretrained("./investigator-with-retrieval")

    from tensorcode import training
    from tensorcode.tools.investigator import Investigator as Loaded

    model = Loaded.from_pretrained("./investigator-with-retrieval")
    trainer = training.Trainer.from_tool(model, lr=0.0001)
    experience = trainer.capture({
        "mode": "retrieval",
        "inputs": {
            "queries": ["How was the service restored?"],
            "documents": ["Restoring the database connection recovered the service.",
                          "The maintenance window starts tomorrow."],
        },
    }, [[True, False]], source="authored-example:retrieval-review-17")
    experience.save("retrieval.json", operations=trainer.operations, release=True)
    loaded = training.load_experience("retrieval.json", operations=trainer.operations)
    trainer.fit([loaded], epochs=1)
    model.save_pretrained("./updated-retrieval-model")
    trainer.save_checkpoint("./retrieval-training", progress={"next_review": 18})
    restored = Loaded.from_pretrained("./updated-retrieval-model")

    assert trainer.steps == 1 and math.isfinite(float(model.retrieval_loss(_GROUP, [[True, False, False]]).detach()))
    assert restored({"mode": "retrieval", "inputs": _GROUP}) == model({"mode": "retrieval", "inputs": _GROUP})
