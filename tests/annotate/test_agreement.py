"""Agreement measures: percent agreement, Cohen's and Fleiss' kappa, masks, text, outcomes, distributions."""

from __future__ import annotations

import pytest

from annotate import agreement

RANK_INPUTS = {"hypotheses": [{"id": "a", "text": "A"}, {"id": "b", "text": "B"}, {"id": "c", "text": "C"}]}


def test_cohen_kappa_matches_the_textbook_example() -> None:
    # 50 items: both yes 20, both no 15, yes/no 5, no/yes 10 -> po 0.7, pe 0.5, kappa 0.4.
    pairs = [("y", "y")] * 20 + [("n", "n")] * 15 + [("y", "n")] * 5 + [("n", "y")] * 10

    assert agreement.cohen_kappa(pairs) == pytest.approx(0.4)


def test_cohen_kappa_is_none_without_items_and_one_for_constant_agreement() -> None:
    assert agreement.cohen_kappa([]) is None
    assert agreement.cohen_kappa([("a", "a")] * 3) == 1.0


def test_fleiss_kappa_matches_a_hand_computed_case() -> None:
    # Two items, three raters each: [a,a,a] and [a,b,b]. P1 = 1, P2 = 1/3, P = 2/3; p_a = 4/6, p_b = 2/6,
    # Pe = 16/36 + 4/36 = 5/9; kappa = (2/3 - 5/9) / (4/9) = 0.25.
    assert agreement.fleiss_kappa([["a", "a", "a"], ["a", "b", "b"]]) == pytest.approx(0.25)


def test_fleiss_kappa_ignores_items_with_one_rater() -> None:
    assert agreement.fleiss_kappa([["a"]]) is None


def test_category_reads_ids_indices_and_distributions() -> None:
    assert agreement.category("b", RANK_INPUTS) == "b"
    assert agreement.category(2, RANK_INPUTS) == "c"
    assert agreement.category([0.2, 0.7, 0.1], RANK_INPUTS) == "b"


def test_mask_score_is_jaccard_of_positive_cells() -> None:
    assert agreement.pair_score("mask", [[True, True, False]], [[True, False, False]]) == pytest.approx(0.5)
    assert agreement.agrees("mask", [[True, False]], [[True, False]])


def test_text_agreement_ignores_case_and_whitespace() -> None:
    assert agreement.agrees("text", "A red  circle", "a red circle")
    assert not agreement.agrees("text", "a red circle", "a blue circle")
    assert 0.5 < agreement.pair_score("text", "a red circle", "a blue circle") < 1.0


def test_outcomes_agree_within_tolerance() -> None:
    inputs = {"plans": [{"id": "p"}, {"id": "q"}]}

    assert agreement.agrees("numeric", [3.0, 5.0], [3.5, 5.0], inputs)
    assert agreement.pair_score("numeric", [3.0, 5.0], [3.0, 9.0], inputs) == pytest.approx(0.5)
    assert agreement.pair_score("numeric", {"candidate_id": "q", "outcome": 5}, [0.0, 5.5], inputs) == 1.0


def test_report_lists_disagreements_and_pairs() -> None:
    rows = [
        (1, "ann", "a", RANK_INPUTS), (1, "bob", "a", RANK_INPUTS),
        (2, "ann", "a", RANK_INPUTS), (2, "bob", "b", RANK_INPUTS),
        (3, "ann", "c", RANK_INPUTS),  # one rater: not counted
    ]

    result = agreement.report("categorical", rows)

    assert (result.items, result.agreed, result.disagreements) == (2, 1, [2])
    assert result.percent == 50.0
    [pair] = result.pairs
    assert pair.reviewers == ("ann", "bob") and pair.items == 2 and pair.percent == 50.0


def test_each_reviewer_against_the_others_puts_the_least_agreeing_first() -> None:
    """Ann, bob and cy answer three items together; cy picks differently on two of them."""
    rows = []
    for item, cy in ((1, "b"), (2, "b"), (3, "a")):
        rows += [(item, "ann", "a", RANK_INPUTS), (item, "bob", "a", RANK_INPUTS), (item, "cy", cy, RANK_INPUTS)]

    reviewers = agreement.by_reviewer(agreement.report("categorical", rows).pairs)

    assert [(r.reviewer, r.co_reviewers, r.items, r.agreed) for r in reviewers] == [
        ("cy", 2, 6, 2),  # 3 items with each of ann and bob, agreeing on item 3 alone
        ("ann", 2, 6, 4), ("bob", 2, 6, 4),  # with each other 3 of 3, with cy 1 of 3
    ]
    assert reviewers[0].percent == pytest.approx(100 / 3)
    assert agreement.by_reviewer([]) == []


def test_empirical_distribution_is_a_valid_ranking_target() -> None:
    from annotate import tooling

    inputs = {"question": "q?", "evidence": [{"source_id": "s", "text": "t"}], **RANK_INPUTS}
    distribution = agreement.empirical_distribution(["a", "b", "b", 1], inputs)

    assert distribution == [0.25, 0.75, 0.0]
    tooling.validate_target("decision", "rank", inputs, distribution)


def test_empirical_distribution_refuses_items_without_candidates() -> None:
    with pytest.raises(ValueError, match="no candidates"):
        agreement.empirical_distribution(["a"], {"premise": "p", "hypothesis": "h"})


def test_every_tool_mode_has_a_measure() -> None:
    from annotate import tooling

    for tool, modes in tooling.TOOL_MODES.items():
        for mode in modes:
            assert agreement.measure_of(tool, mode) in {"categorical", "mask", "text", "numeric"}
