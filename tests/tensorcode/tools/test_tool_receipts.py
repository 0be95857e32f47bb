"""Every tool's every mode returns one receipt kind of ``tensorcode.receipts``, valid against the shipped schema."""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import pytest
import torch

import tensorcode.tools as tools
from tensorcode import receipts
from tensorcode.tools.chatbot import Chatbot
from tensorcode.tools.decision import Decision
from tensorcode.tools.investigator import Investigator
from tensorcode.tools.planner import Planner
from tensorcode.tools.scene import Scene

torch.set_num_threads(1)

SCHEMA = json.loads(resources.files("tensorcode").joinpath("schemas/receipt.schema.json").read_text())
EVIDENCE = [{"source_id": "log-1", "text": "Disk full on db-7, writes failing."},
            {"source_id": "log-2", "text": "Deploy 41 finished."}]
RANK = {"question": "Why did billing fail?", "evidence": EVIDENCE,
        "hypotheses": [{"id": "disk", "text": "the disk filled up"}, {"id": "deploy", "text": "a bad deploy"}]}
PLAN = {"goal": "Restore billing", "evidence": EVIDENCE,
        "plans": [{"id": "clean", "text": "free disk space"}, {"id": "rollback", "text": "roll back deploy 41"}]}
PIXELS = torch.rand(3, 24, 40, generator=torch.Generator().manual_seed(0))
IMAGE = {"pixels": PIXELS, "source_id": "camera:7", "question": "what is in the picture?"}
CANDIDATES = [{"id": "rc", "text": "a red circle"}, {"id": "bs", "text": "a blue square"}]


CASES = [
    # (tool, mode, tiny model, receipt-producing call)
    ("investigator", "rank", lambda: Investigator(), lambda t: t(RANK)),
    ("investigator", "verification", lambda: Investigator(modes=["verification"], retrieval_encoder=None),
     lambda t: t({"mode": "verification", "inputs": {"premise": "Disk full.", "hypothesis": "No space."}})),
    ("investigator", "proposal",
     lambda: Investigator(modes=["proposal"], retrieval_encoder=None, max_length=8, proposals=2, beam_width=2),
     lambda t: t({"mode": "proposal", "inputs": {"question": "Why?"}})),
    ("investigator", "retrieval", lambda: Investigator(modes=["retrieval"]),
     lambda t: t({"mode": "retrieval", "inputs": {"queries": ["disk"], "documents": ["a", "b c"]}})),
    ("decision", "rank", lambda: Decision(), lambda t: t(RANK)),
    ("planner", "outcomes", lambda: Planner(max_length=8), lambda t: t(PLAN)),
    ("planner", "proposal", lambda: Planner(max_length=8), lambda t: t({"mode": "proposal", "inputs": PLAN})),
    ("scene", "rank", lambda: Scene(), lambda t: t({**IMAGE, "candidates": CANDIDATES})),
    ("scene", "language", lambda: Scene(mode="language", max_length=8), lambda t: t(IMAGE)),
    ("chatbot", "reply", lambda: Chatbot(max_length=8, dim=16), lambda t: t.respond("When does the pool open?")),
]
IDS = [f"{tool}/{mode}" for tool, mode, _, _ in CASES]


@pytest.mark.parametrize(("tool", "mode", "make", "call"), CASES, ids=IDS)
def test_every_mode_returns_its_kind_as_strict_json_valid_against_the_schema(tool, mode, make, call):
    receipt = call(make())
    document = json.loads(json.dumps(receipt, allow_nan=False))
    assert document == receipt
    jsonschema.validate(document, SCHEMA)
    receipts.check(receipt)
    assert (receipt["tool"], receipt["mode"]) == (tool, mode)
    assert receipt["kind"] == receipts.kind_of(tool, mode)
    assert tuple(receipt) == receipts.KEYS[receipt["kind"]]
    assert 0.0 <= receipt["confidence"] <= 1.0


def test_batched_receipts_are_valid_too():
    batch = Decision()([RANK, {**RANK, "evidence": []}])
    for receipt in batch:
        jsonschema.validate(receipt, SCHEMA)
    assert batch[1]["attention"] is None


def test_model_fingerprint_is_computed_once_and_follows_the_configuration():
    tool = Decision(seed=1)
    first = tool(RANK)["model"]
    assert first == receipts.fingerprint("decision", tool.configuration()) == tool(RANK)["model"]
    assert first != Decision(seed=2)(RANK)["model"]
    investigator = Investigator(modes=["retrieval"])
    before = investigator({"mode": "retrieval", "inputs": {"queries": ["q"], "documents": ["d"]}})["model"]
    investigator.freeze_retrieval()
    after = investigator({"mode": "retrieval", "inputs": {"queries": ["q"], "documents": ["d"]}})["model"]
    assert before != after == receipts.fingerprint("investigator", investigator.configuration())


def test_text_attention_spans_are_the_words_of_each_source_and_sum_to_its_weight():
    receipt = Decision()(RANK)
    for candidate in receipt["candidates"]:
        sources = candidate["attention"]["sources"]
        assert [s["source_id"] for s in sources] == ["log-1", "log-2"]
        assert sum(s["weight"] for s in sources) == pytest.approx(1.0, rel=1e-5)
        for source, evidence in zip(sources, EVIDENCE, strict=True):
            words = [evidence["text"][span["start"]: span["end"]] for span in source["spans"]]
            assert words == ["Disk", "full", "on", "db", "-", "7", ",", "writes", "failing", "."][: len(words)] \
                if source["source_id"] == "log-1" else words == ["Deploy", "41", "finished", "."]
            assert sum(span["weight"] for span in source["spans"]) == pytest.approx(source["weight"], rel=1e-5)
    assert receipt["attention"] == receipt["candidates"][receipt["selected_index"]]["attention"]


def test_image_attention_is_a_grid_over_the_original_image():
    receipt = Scene()({**IMAGE, "candidates": CANDIDATES})
    attention = receipt["attention"]
    assert attention["type"] == "image" and attention["source_id"] == "camera:7"
    assert attention["grid"] == [8, 8] and attention["image_size"] == [24, 40]
    assert sum(map(sum, attention["weights"])) == pytest.approx(1.0, rel=1e-5)
    assert all(c["attention"]["type"] == "image" for c in receipt["candidates"])


def test_chatbot_keeps_bot_text_to_reply_and_respond_gives_the_same_reply_as_a_receipt():
    bot = Chatbot(max_length=8, dim=16)
    receipt = bot.respond("When does the pool open?")
    assert receipt["text"] == bot("When does the pool open?")
    assert isinstance(bot("When does the pool open?"), str)


@pytest.mark.parametrize(("tool", "mode", "make", "call"), CASES, ids=IDS)
def test_non_finite_weights_give_a_clear_error_not_a_receipt_with_nan(tool, mode, make, call):
    model = make()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(float("nan"))
    with pytest.raises(ValueError, match="non-finite"):
        call(model)


def test_every_registered_tool_and_mode_has_a_receipt_kind_and_a_case_here():
    registered = {(name, mode) for name in tools.names() for mode in tools.MODES[name]}
    assert registered == set(receipts.KIND_OF_MODE) == {(tool, mode) for tool, mode, _, _ in CASES}


@pytest.mark.parametrize(("tool", "mode", "make", "call"), CASES, ids=IDS)
def test_predict_by_name_returns_valid_receipts(tool, mode, make, call):
    model = make()
    inputs = {
        "investigator": {"rank": RANK, "verification": {"premise": "Disk full.", "hypothesis": "No space."},
                         "proposal": {"question": "Why?"}, "retrieval": {"queries": ["q"], "documents": ["d"]}},
        "decision": {"rank": RANK},
        "planner": {"outcomes": PLAN, "proposal": PLAN},
        "scene": {"rank": {**IMAGE, "candidates": CANDIDATES}, "language": IMAGE},
        "chatbot": {"reply": "When does the pool open?"},
    }[tool][mode]
    for receipt in tools.predict(model, mode, [inputs, inputs]):
        jsonschema.validate(json.loads(json.dumps(receipt, allow_nan=False)), SCHEMA)
        assert (receipt["tool"], receipt["mode"], receipt["kind"]) == (tool, mode, receipts.kind_of(tool, mode))


def test_receipts_built_anywhere_in_the_tool_tests_are_checked_against_the_schema():
    """The conftest wraps every builder, so a receipt the schema refuses fails the test that built it."""
    with pytest.raises(AssertionError, match="does not match receipt.schema.json"):
        receipts.ranking("decision", "rank", "m", [{"id": "", "text": "x"}], [0.0], [None])
