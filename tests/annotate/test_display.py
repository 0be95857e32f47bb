"""What the item page computes from stored JSON: highlights, images, diffs, editors, targets from a POST."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest
from django.core.exceptions import ValidationError
from django.http import QueryDict

from annotate.forms import parse_target
from annotate.views import display, images
from tests.annotate.ui_samples import sample


def test_highlight_splits_text_at_spans_with_relative_levels() -> None:
    segments = display.highlight("the db was down", [{"start": 4, "end": 6, "weight": 0.2},
                                                     {"start": 11, "end": 15, "weight": 0.4}])

    assert [(s["text"], s["level"]) for s in segments] == [
        ("the ", None), ("db", "0.500"), (" was ", None), ("down", "1.000")]


def test_highlighted_html_escapes_every_text() -> None:
    segments = display.highlight("<b>db</b> & 'x'", [{"start": 3, "end": 5, "weight": 0.5}])

    assert display.segments_html(segments) == (
        '&lt;b&gt;<mark class="attn" style="--w: 1.000" title="attention 0.500">db</mark>'
        "&lt;/b&gt; &amp; &#x27;x&#x27;")


def test_highlight_ignores_overlapping_and_out_of_range_spans() -> None:
    segments = display.highlight("abcdef", [{"start": 0, "end": 4, "weight": 1.0},
                                            {"start": 2, "end": 5, "weight": 1.0},
                                            {"start": 9, "end": 12, "weight": 1.0},
                                            {"start": 1, "end": 2, "weight": float("nan")}])

    assert "".join(s["text"] for s in segments) == "abcdef"
    assert [s["text"] for s in segments if s["level"]] == ["abcd", "e"]


def test_evidence_is_shaded_on_one_scale_across_sources() -> None:
    """A source the model hardly attended is pale, not as dark as the source it relied on."""
    inputs = {"question": "why?", "evidence": [{"source_id": "log", "text": "disk full"},
                                               {"source_id": "notes", "text": "all fine"}]}
    attention = {"type": "text", "sources": [
        {"source_id": "log", "weight": 0.9, "spans": [{"start": 0, "end": 4, "weight": 0.9}]},
        {"source_id": "notes", "weight": 0.1, "spans": [{"start": 0, "end": 3, "weight": 0.09}]}]}

    view = display.inputs_view(inputs, {"attention": attention})

    levels = {block["source_id"]: [s["level"] for s in block["segments"] if s["level"]] for block in view["evidence"]}
    assert levels == {"log": ["1.000"], "notes": ["0.100"]}


def test_png_of_channels_first_pixels_round_trips() -> None:
    url = images.data_url([[[1.0, 0.0]], [[0.0, 1.0]], [[0.0, 0.0]]])  # (3, 1, 2): red, green

    data = base64.b64decode(url.split(",", 1)[1])
    width, height = struct.unpack(">II", data[16:24])
    raw = zlib.decompress(data[data.index(b"IDAT") + 4:-16])
    assert (width, height) == (2, 1)
    assert raw == b"\x00" + bytes([255, 0, 0, 0, 255, 0])


@pytest.mark.parametrize("pixels", ["javascript:alert(1)", [[1, 2], [3]], [[[0.1, 0.2]]] * 2, None, [[[]]]])
def test_unreadable_pixels_give_no_image(pixels) -> None:
    assert images.data_url(pixels) is None


def test_word_diff_marks_insertions_and_deletions() -> None:
    parts = display.word_diff("the db was down", "the database was down again")

    assert [(p["op"], p["text"]) for p in parts if p["op"] != "equal"] == [
        ("delete", "db"), ("insert", "database"), ("insert", " again")]


def test_relevance_editor_starts_from_the_models_top_document() -> None:
    data = sample("investigator", "retrieval")

    rows = display.relevance_rows(data["inputs"], data["receipt"])

    assert [[d["checked"] for d in row["documents"]] for row in rows] == [[True, False, False],
                                                                         [False, False, True]]


def test_trace_summary_reads_the_stored_operations() -> None:
    from tests.annotate.ui_samples import TRACE

    view = display.trace_view(TRACE)

    assert view["summary"] == ["Model: decision · rank · version 1 · untrained",
                               "Predicted as item 1 of a batch of 1"]
    assert view["calls"][1]["inputs"] == "tensor[2×32] float32"


@pytest.mark.parametrize(("mode", "post", "target"), [
    ("rank", "choice=dns", "dns"),
    ("rank", "split=1&share-0=1&share-1=3", [0.25, 0.75]),
    ("verification", "label=neutral", "neutral"),
    ("retrieval", "relevant=0:1&relevant=1:0&relevant=1:2", [[False, True, False], [True, False, True]]),
    ("outcomes", "scope=one&plan=cdn&outcome=-1.5", {"candidate_id": "cdn", "outcome": -1.5}),
    ("outcomes", "scope=all&outcome-0=1&outcome-1=2e1", [1.0, 20.0]),
    ("reply", "text=line one%0D%0Aline two", "line one\nline two"),
])
def test_parse_target_builds_the_specs_target_forms(mode, post, target) -> None:
    tool = {"rank": "decision", "verification": "investigator", "retrieval": "investigator",
            "outcomes": "planner", "reply": "chatbot"}[mode]
    data = sample(tool, mode)

    assert parse_target(mode, QueryDict(post), data["inputs"], data["receipt"]) == target


@pytest.mark.parametrize(("mode", "post", "message"), [
    ("rank", "", "Choose a candidate"),
    ("rank", "choice=nope", "not one of this item's candidates"),
    ("rank", "split=1&share-0=0&share-1=0", "positive share"),
    ("verification", "label=maybe", "Choose entailment"),
    ("retrieval", "relevant=0:1", "query 2"),
    ("outcomes", "scope=one&plan=cdn&outcome=nan", "finite"),
    ("outcomes", "scope=all&outcome-0=1", "outcome of Use a CDN"),
])
def test_parse_target_says_what_is_missing(mode, post, message) -> None:
    tool = {"rank": "decision", "verification": "investigator", "retrieval": "investigator",
            "outcomes": "planner"}[mode]
    data = sample(tool, mode)

    with pytest.raises(ValidationError, match=message):
        parse_target(mode, QueryDict(post), data["inputs"], data["receipt"])


def test_a_plan_whose_text_ends_its_sentence_is_named_with_one_full_stop() -> None:
    data = sample("planner", "outcomes")
    data["inputs"]["plans"][1]["text"] = "Restart the workers."

    with pytest.raises(ValidationError) as refused:
        parse_target("outcomes", QueryDict("scope=all&outcome-0=1"), data["inputs"], data["receipt"])

    assert refused.value.messages == ["Enter the outcome of Restart the workers."]
