"""The receipt builders, torch-free: fixed keys per kind, strict JSON, the schema that ships with them."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from importlib import resources

import jsonschema
import pytest

from tensorcode import receipts

SCHEMA = json.loads(resources.files("tensorcode").joinpath("schemas/receipt.schema.json").read_text())
TEXT = receipts.text_attention([("log-1", 0.75, [(0, 4, 0.5), (5, 9, 0.25)]), ("log-2", 0.25, [(0, 2, 0.25)])])
IMAGE = receipts.image_attention("camera:7", [2, 2], [48, 64], [[0.1, 0.2], [0.3, 0.4]])
CANDIDATES = [{"id": "a", "text": "first"}, {"id": "b", "text": "second"}]


def _validate(receipt: dict) -> None:
    jsonschema.validate(json.loads(json.dumps(receipt, allow_nan=False)), SCHEMA)
    receipts.check(receipt)


def _examples() -> dict[str, dict]:
    return {
        "ranking": receipts.ranking("decision", "rank", "decision:0", CANDIDATES, [1.0, 2.0], [TEXT, None]),
        "outcome": receipts.outcome("planner", "outcomes", "planner:0", CANDIDATES, [3.0, 1.0], "min", [TEXT, TEXT]),
        "classification": receipts.classification(
            "investigator", "verification", "investigator:0", ["entailment", "neutral", "contradiction"],
            [2.0, 0.0, -1.0], [0.6, 0.3, 0.1], 1.5,
        ),
        "retrieval": receipts.retrieval(
            "investigator", "retrieval", "investigator:0", ["q1", "q2"], ["0", "1"], [[2.0, 0.0], [0.0, 0.1]]
        ),
        "generation": receipts.generation("scene", "language", "scene:0", ["a red circle"], [-3.0], IMAGE),
    }


def test_importing_the_receipts_module_does_not_import_torch():
    code = "import sys, tensorcode.receipts; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("kind", receipts.KINDS)
def test_every_kind_has_exactly_its_keys_and_validates_against_the_schema(kind):
    receipt = _examples()[kind]
    assert receipt["kind"] == kind
    assert tuple(receipt) == receipts.KEYS[kind]
    _validate(receipt)


def test_schema_has_one_definition_per_kind_and_refuses_extra_keys():
    assert set(receipts.KINDS) <= set(SCHEMA["$defs"])
    for kind in receipts.KINDS:
        assert SCHEMA["$defs"][kind]["additionalProperties"] is False
    receipt = {**_examples()["ranking"], "verification": {}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(receipt, SCHEMA)
    with pytest.raises(ValueError, match="unexpected keys \\['verification'\\]"):
        receipts.check(receipt)


def test_a_kind_that_its_tool_and_mode_do_not_return_is_refused():
    receipt = {**_examples()["ranking"], "kind": "outcome"}
    with pytest.raises(ValueError, match="decision/rank returns 'ranking' receipts, not 'outcome'"):
        receipts.check(receipt)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(receipt, SCHEMA)


def test_ranking_selects_the_highest_score_and_reports_its_probability_as_confidence():
    receipt = _examples()["ranking"]
    assert receipt["selected_id"] == "b" and receipt["selected_index"] == 1
    assert math.isclose(sum(c["probability"] for c in receipt["candidates"]), 1.0)
    assert receipt["confidence"] == receipt["candidates"][1]["probability"]
    assert receipt["attention"] is None  # the selected candidate's


def test_outcome_prefers_the_lowest_outcome_when_asked():
    receipt = _examples()["outcome"]
    assert receipt["selected_id"] == "b" and receipt["prefer"] == "min"
    assert [c["outcome"] for c in receipt["candidates"]] == [3.0, 1.0]
    assert [c["score"] for c in receipt["candidates"]] == [-3.0, -1.0]


def test_classification_without_a_fresh_fit_has_null_calibration():
    receipt = receipts.classification("investigator", "verification", "m", ["entailment", "neutral"], [0.0, 1.0],
                                      None, None)
    assert receipt["calibration"] == {"fitted": False, "temperature": None}
    assert all(c["calibrated_probability"] is None for c in receipt["candidates"])
    assert receipt["confidence"] == receipt["candidates"][1]["probability"]
    fitted = _examples()["classification"]
    assert fitted["calibration"] == {"fitted": True, "temperature": 1.5} and fitted["confidence"] == 0.6


def test_retrieval_confidence_is_the_least_sure_query():
    receipt = _examples()["retrieval"]
    assert [q["selected_id"] for q in receipt["queries"]] == ["0", "1"]
    assert receipt["confidence"] == min(q["documents"][int(q["selected_id"])]["probability"]
                                        for q in receipt["queries"])


def test_generation_confidence_is_the_geometric_mean_probability_per_byte():
    receipt = _examples()["generation"]
    assert receipt["text"] == "a red circle"
    assert math.isclose(receipt["confidence"], math.exp(-3.0 / 13))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_model_output_is_refused_rather_than_reported(bad):
    with pytest.raises(ValueError, match="non-finite score"):
        receipts.ranking("decision", "rank", "m", CANDIDATES, [bad, 1.0], [None, None])
    with pytest.raises(ValueError, match="non-finite"):
        receipts.generation("chatbot", "reply", "m", ["hi"], [bad], None)
    with pytest.raises(ValueError, match="non-finite"):
        receipts.image_attention("x", [1, 2], [4, 4], [[bad, 0.5]])
    with pytest.raises(ValueError, match="non-finite"):
        receipts.retrieval("investigator", "retrieval", "m", ["q"], ["0"], [[bad]])


def test_fingerprint_names_the_tool_and_changes_with_the_configuration():
    first = receipts.fingerprint("scene", {"dim": 32, "mode": "rank"})
    assert first.startswith("scene:")
    assert first == receipts.fingerprint("scene", {"mode": "rank", "dim": 32})
    assert first != receipts.fingerprint("scene", {"dim": 16, "mode": "rank"})
    assert first != receipts.fingerprint("decision", {"dim": 32, "mode": "rank"})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r["queries"][0]["documents"][0].update(index=0), r"documents\[0\]: .*unexpected keys \['index'\]"),
        (lambda r: r["queries"][0].pop("selected_id"), r"queries\[0\]: missing keys \['selected_id'\]"),
    ],
)
def test_check_names_the_nested_field_of_a_bad_retrieval_receipt(change, message):
    receipt = json.loads(json.dumps(_examples()["retrieval"]))
    change(receipt)
    with pytest.raises(ValueError, match=message):
        receipts.check(receipt)


def test_check_refuses_attention_of_an_unknown_structure_or_grid():
    receipt = json.loads(json.dumps(_examples()["generation"]))
    receipt["attention"]["weights"] = [[1.0]]
    with pytest.raises(ValueError, match=r"attention.weights: expected 2 rows of 2 weights"):
        receipts.check(receipt)
    receipt["attention"] = {"log-1": 1.0}
    with pytest.raises(ValueError, match="receipt.attention: expected a text or image attention"):
        receipts.check(receipt)
    ranking = json.loads(json.dumps(_examples()["ranking"]))
    ranking["candidates"][0]["attention"]["sources"][0]["spans"][0]["text"] = "Disk"
    with pytest.raises(ValueError, match=r"candidates\[0\].attention.sources\[0\].spans\[0\]"):
        receipts.check(ranking)


def test_the_receipt_schema_is_a_valid_2020_12_schema():
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
