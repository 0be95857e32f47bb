"""The item list service: each filter, each impossible value, and keyset pages without gaps or repeats."""

from __future__ import annotations

import pytest
from django.db import connection
from django.http import QueryDict
from django.test.utils import CaptureQueriesContext

from annotate import itemlist
from annotate.itemlist import InvalidFilters, ItemFilters
from annotate.models import Answer, AnswerKind, Item, ItemStatus, ModelVersion, Project
from tests.annotate.conftest import decision_input, make_ready_items

pytestmark = pytest.mark.django_db


def ids(project, params, *, user=None, size=100) -> list[int]:
    filters = ItemFilters.parse(project, params, user=user)
    return [row["id"] for row in itemlist.page(project, filters, size=size).rows]


def errors_of(project, params, *, user=None) -> dict[str, str]:
    with pytest.raises(InvalidFilters) as caught:
        ItemFilters.parse(project, params, user=user)
    return caught.value.errors


def answer(item, user, kind=AnswerKind.TARGET) -> Answer:
    return Answer.objects.create(item=item, reviewer=user, kind=kind, target="db" if kind != AnswerKind.SKIP else None,
                                 source=item.project.source_for(item.pk, user))


def test_no_filters_lists_every_item_oldest_first(project) -> None:
    items = make_ready_items(project, [0.5, 0.1, 0.9])

    assert ids(project, {}) == [item.pk for item in items]


def test_status_filter(project) -> None:
    first, second = make_ready_items(project, [0.5, 0.1])
    Item.objects.filter(pk=second.pk).update(status=ItemStatus.DONE)

    assert ids(project, {"status": "done"}) == [second.pk]
    assert ids(project, {"status": "ready"}) == [first.pk]


def test_unknown_status_is_an_error_naming_the_valid_ones(project) -> None:
    errors = errors_of(project, {"status": "finished"})

    assert "unknown status 'finished'" in errors["status"]
    assert "pending, refused, ready, done, skipped" in errors["status"]


def test_reviewer_filter_lists_items_with_any_answer_by_them(project, reviewer, second_reviewer) -> None:
    a, b, c = make_ready_items(project, [0.5, 0.1, 0.3])
    answer(a, reviewer)
    answer(b, reviewer, AnswerKind.DRAFT)
    answer(c, second_reviewer)

    assert ids(project, {"reviewer": "rita"}) == [a.pk, b.pk]
    assert ids(project, {"reviewer": "sam"}) == [c.pk]


def test_unknown_reviewer_is_an_error(project, outsider) -> None:
    assert errors_of(project, {"reviewer": "nobody"})["reviewer"] == "no reviewer 'nobody' in this project"
    assert errors_of(project, {"reviewer": "olga"})["reviewer"] == "no reviewer 'olga' in this project"


def test_reviewers_may_filter_only_by_their_own_answers(project, reviewer, project_admin) -> None:
    make_ready_items(project, [0.5])

    assert "your own answers only" in errors_of(project, {"reviewer": "sam"}, user=reviewer)["reviewer"]
    assert ids(project, {"reviewer": "rita"}, user=reviewer) == []
    assert ids(project, {"reviewer": "sam"}, user=project_admin) == []


def test_confidence_range_is_inclusive_and_leaves_out_items_without_prediction(project) -> None:
    low, mid, high, none = make_ready_items(project, [0.1, 0.4, 0.7, None])

    assert ids(project, {"confidence_min": "0.4", "confidence_max": "0.7"}) == [mid.pk, high.pk]
    assert ids(project, {"confidence_max": "0.4"}) == [low.pk, mid.pk]
    assert ids(project, {"confidence_min": "0"}) == [low.pk, mid.pk, high.pk]
    assert none.pk in ids(project, {})


@pytest.mark.parametrize(
    ("params", "field", "says"),
    [
        ({"confidence_min": "0.8", "confidence_max": "0.2"}, "confidence_min", "0.8, is above the highest, 0.2"),
        ({"confidence_min": "-0.1"}, "confidence_min", "the lowest confidence must be from 0 to 1, not -0.1"),
        ({"confidence_max": "1.5"}, "confidence_max", "the highest confidence must be from 0 to 1, not 1.5"),
        ({"confidence_max": "high"}, "confidence_max", "the highest confidence must be a number"),
        ({"confidence_min": "nan"}, "confidence_min", "from 0 to 1"),
        ({"confidence_min": "inf"}, "confidence_min", "from 0 to 1"),
    ],
)
def test_impossible_confidence_is_an_error(project, params, field, says) -> None:
    assert says in errors_of(project, params)[field]


def test_version_filter_uses_the_latest_prediction(project) -> None:
    old_items = make_ready_items(project, [0.2, 0.3])
    newer = ModelVersion.objects.allocate(project, label="newer", trained=True)
    project.current_version = newer
    project.save(update_fields=["current_version"])
    new_items = make_ready_items(project, [0.4])

    assert ids(project, {"version": str(newer.pk)}) == [new_items[0].pk]
    assert ids(project, {"version": str(old_items[0].prediction.model_version_id)}) == [i.pk for i in old_items]


def test_unknown_version_is_an_error(project) -> None:
    other = Project.objects.create(slug="other", name="Other", tool="decision", mode="rank")
    foreign = ModelVersion.objects.allocate(other, label="theirs")

    message = errors_of(project, {"version": str(foreign.pk)})["version"]
    assert message == f"no model version '{foreign.pk}' in this project"
    assert "no model version 'latest'" in errors_of(project, {"version": "latest"})["version"]


def test_search_finds_items_holding_every_word(project) -> None:
    items = make_ready_items(project, [0.1, 0.2, 0.3])
    texts = ["The printer jammed on floor three", "Printer toner ran out", "Network switch rebooted"]
    for item, text in zip(items, texts, strict=True):
        Item.objects.filter(pk=item.pk).update(inputs={**decision_input(), "question": text})

    assert ids(project, {"q": "printer"}) == [items[0].pk, items[1].pk]
    assert ids(project, {"q": "PRINTER toner"}) == [items[1].pk]
    assert ids(project, {"q": "rebooted"}) == [items[2].pk]
    assert ids(project, {"q": "printer rebooted"}) == []


@pytest.mark.postgres
def test_search_on_postgres_matches_word_prefixes_of_values_not_keys(project) -> None:
    (item,) = make_ready_items(project, [0.1])
    Item.objects.filter(pk=item.pk).update(inputs={**decision_input(), "question": "Replication lagged"})

    assert ids(project, {"q": "replic"}) == [item.pk]
    assert ids(project, {"q": "hypotheses"}) == []  # a key of every Decision input, not a value


@pytest.mark.postgres
def test_search_on_postgres_reads_the_gin_index(project) -> None:
    make_ready_items(project, [0.1])
    filters = ItemFilters.parse(project, {"q": "database"})
    query = filters.apply(Item.objects.all()).values("id")  # no other indexable condition to prefer
    with connection.cursor() as cursor:
        # Only a bitmap scan is left, and only the GIN index can give one for this condition. With plain index
        # scans allowed, a small table's planner may walk the primary key and filter every row instead (seen on a
        # fresh machine), which says nothing about whether the search can read its index.
        for method in ("seqscan", "indexscan", "indexonlyscan"):
            cursor.execute(f"SET LOCAL enable_{method} = off")
        sql, params = query.query.sql_with_params()
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "item_search_words" in plan


def _walk_plan(query) -> str:
    """The plan of `query` with bitmap scans off: the items walked one by one and the search checked on each,
    as PostgreSQL does for a rare word it guesses common (its guess for any word prefix is about 1%)."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        sql, params = query.query.sql_with_params()
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.postgres
def test_search_on_postgres_checks_each_walked_item_against_its_stored_words(project) -> None:
    # Computing the words of every walked item from its JSON took 3 s for a search matching nothing at 100,000
    # items; the stored words make the same walk 20x cheaper.
    make_ready_items(project, [0.1])
    filters = ItemFilters.parse(project, {"q": "database", "sort": "id"})
    plan = _walk_plan(filters.apply(Item.objects.filter(project=project)).order_by("id").values("id")[:51])

    assert "search_words @@" in plan
    assert "jsonb_to_tsvector" not in plan


@pytest.mark.postgres
def test_search_on_postgres_follows_inputs_as_they_change(project) -> None:
    (item,) = make_ready_items(project, [0.1])
    Item.objects.filter(pk=item.pk).update(inputs={**decision_input(), "question": "Replication lagged"})
    assert ids(project, {"q": "replication"}) == [item.pk]

    item.refresh_from_db()
    item.inputs = {**decision_input(), "question": "Certificates expired"}
    item.save()

    assert ids(project, {"q": "replication"}) == []
    assert ids(project, {"q": "certif"}) == [item.pk]


@pytest.mark.parametrize(
    ("q", "says"),
    [("!!! ???", "has no letters or digits"), ("x" * 201, "at most 200"), (" ".join(f"w{n}" for n in range(9)),
                                                                             "at most 8")],
)
def test_impossible_search_is_an_error(project, q, says) -> None:
    assert says in errors_of(project, {"q": q})["q"]


def test_unknown_and_repeated_parameters_are_errors(project) -> None:
    errors = errors_of(project, QueryDict("stauts=done&status=done&status=ready"))

    assert "unknown filter 'stauts'" in errors["stauts"]
    assert errors["status"] == "status is given 2 times; give it once"


def test_unknown_order_and_bad_positions_are_errors(project) -> None:
    assert "unknown order 'random'" in errors_of(project, {"sort": "random"})["sort"]
    assert "not a position" in errors_of(project, {"after": "abc"})["after"]
    assert "not a position" in errors_of(project, {"sort": "confidence", "after": "0.5"})["after"]
    assert "either after or before" in errors_of(project, {"after": "3", "before": "9"})["after"]


def test_every_bad_parameter_is_reported_at_once(project) -> None:
    errors = errors_of(project, {"status": "x", "confidence_max": "2", "reviewer": "nobody"})

    assert set(errors) == {"status", "confidence_max", "reviewer"}


def test_filters_combine(project, reviewer) -> None:
    a, b, c = make_ready_items(project, [0.2, 0.3, 0.9])
    answer(a, reviewer)
    answer(c, reviewer)

    assert ids(project, {"reviewer": "rita", "confidence_max": "0.5", "status": "ready"}) == [a.pk]


def test_filters_survive_a_round_trip_through_the_query_string(project) -> None:
    params = {"status": "ready", "confidence_min": "0.25", "q": "disk full", "sort": "-confidence"}
    filters = ItemFilters.parse(project, params)

    again = ItemFilters.parse(project, QueryDict(filters.query_string()[1:]))

    assert again == filters and again.active


# Confidences with ties and missing ones, so pages break inside runs of equal keys and across the unscored tail.
CONFIDENCES = [0.5, 0.1, None, 0.5, 0.9, 0.1, None, 0.5, 0.3, 0.5, None, 0.0, 1.0]


def expected_order(items, sort: str) -> list[int]:
    scored = [i for i in items if i.confidence is not None]
    unscored = [i for i in items if i.confidence is None]
    if sort == "id":
        return [i.pk for i in items]
    if sort == "-id":
        return [i.pk for i in reversed(items)]
    if sort == "confidence":
        return [i.pk for i in sorted(scored, key=lambda i: (i.confidence, i.pk))] + [i.pk for i in unscored]
    return ([i.pk for i in sorted(scored, key=lambda i: (i.confidence, i.pk), reverse=True)]
            + [i.pk for i in reversed(unscored)])


@pytest.mark.parametrize("sort", ["id", "-id", "confidence", "-confidence"])
@pytest.mark.parametrize("size", [1, 3, 4])
def test_pages_forward_and_back_cover_every_item_once_in_order(project, sort, size) -> None:
    items = make_ready_items(project, CONFIDENCES)
    Item.objects.filter(confidence__isnull=True).update(status=ItemStatus.PENDING)

    pages, filters = [], ItemFilters.parse(project, {"sort": sort})
    while True:
        current = itemlist.page(project, filters, size=size)
        pages.append([row["id"] for row in current.rows])
        if current.next_after is None:
            break
        filters = ItemFilters.parse(project, {"sort": sort, "after": current.next_after})
    assert [pk for p in pages for pk in p] == expected_order(items, sort)
    assert all(len(p) == size for p in pages[:-1])

    backward = [pages[-1]]
    while current.previous_before is not None:
        current = itemlist.page(project, ItemFilters.parse(project, {"sort": sort, "before": current.previous_before}),
                                size=size)
        backward.append([row["id"] for row in current.rows])
    assert backward[-1] == pages[0]
    assert [pk for p in reversed(backward) for pk in p][: len(items)] == expected_order(items, sort)[: len(items)]


def walk(project, params: dict, size: int) -> tuple[list[int], list[int], itemlist.Page]:
    """Every page forward from the first, then back from the last: (ids forward, ids backward in list order,
    the first page)."""
    first = current = itemlist.page(project, ItemFilters.parse(project, params), size=size)
    forward = [row["id"] for row in current.rows]
    while current.next_after is not None:
        current = itemlist.page(project, ItemFilters.parse(project, {**params, "after": current.next_after}),
                                size=size)
        forward += [row["id"] for row in current.rows]
    backward = [row["id"] for row in current.rows]
    while current.previous_before is not None:
        current = itemlist.page(project, ItemFilters.parse(project, {**params, "before": current.previous_before}),
                                size=size)
        backward = [row["id"] for row in current.rows] + backward
    return forward, backward, first


@pytest.mark.parametrize("cap", [1000, 2], ids=["few matches", "more than the count cap"])
@pytest.mark.parametrize("status", ["", "ready"])
@pytest.mark.parametrize("sort", ["id", "-id", "confidence", "-confidence"])
def test_searched_pages_forward_and_back_cover_every_match_once_in_order(project, monkeypatch, cap, status,
                                                                         sort) -> None:
    # On PostgreSQL a search finds up to COUNT_CAP matches through its index and reads its pages among them;
    # past that it walks the items in order, a window at a time, checking their words. Both must page alike.
    monkeypatch.setattr(itemlist, "COUNT_CAP", cap)
    items = make_ready_items(project, CONFIDENCES)
    Item.objects.filter(confidence__isnull=True).update(status=ItemStatus.PENDING)
    for n, item in enumerate(items):
        Item.objects.filter(pk=item.pk).update(
            inputs={**decision_input(n), "question": "Disk full" if n % 3 else "Printer jammed"})
    items = list(Item.objects.filter(project=project).order_by("pk"))
    wanted = [item for n, item in enumerate(items) if n % 3 and (not status or item.status == status)]
    params = {"q": "disk", "sort": sort, **({"status": status} if status else {})}

    forward, backward, first = walk(project, params, size=1)

    assert forward == backward == expected_order(wanted, sort)
    assert (first.matching, first.capped) == (min(len(wanted), cap), len(wanted) > cap)


@pytest.mark.postgres
def test_search_on_postgres_reads_few_matches_through_its_index_and_never_walks_the_items(project) -> None:
    # PostgreSQL guesses any word prefix matches about 1% of items, so, left to plan the page, it walked every
    # item of the project checking its words for a word no item holds: 0.2-3 s at 100,000 items.
    make_ready_items(project, [0.1, 0.2, 0.3])
    filters = ItemFilters.parse(project, {"q": "database", "sort": "-confidence"})
    with CaptureQueriesContext(connection) as queries:
        itemlist.page(project, filters, size=2)

    searching = [query["sql"] for query in queries.captured_queries if "search_words" in query["sql"]]
    assert len(searching) == 1 and searching[0].startswith("WITH found AS MATERIALIZED")


def test_pages_with_a_filter_have_no_gaps(project) -> None:
    items = make_ready_items(project, [k / 20 for k in range(20)])
    wanted = [i.pk for i in items if 0.2 <= i.confidence <= 0.8]
    seen, after = [], None
    while True:
        params = {"confidence_min": "0.2", "confidence_max": "0.8", "sort": "-confidence"}
        current = itemlist.page(project, ItemFilters.parse(project, {**params, **({"after": after} if after else {})}),
                                size=4)
        seen += [row["id"] for row in current.rows]
        if not (after := current.next_after):
            break

    assert sorted(seen) == sorted(wanted) and len(seen) == len(set(seen))


def test_count_is_capped(project, monkeypatch) -> None:
    make_ready_items(project, [0.1] * 5)
    monkeypatch.setattr(itemlist, "COUNT_CAP", 3)

    result = itemlist.page(project, ItemFilters(), size=2)

    assert (result.matching, result.capped) == (3, True)
    assert itemlist.page(project, ItemFilters.parse(project, {"confidence_max": "0.5"}), size=10).matching == 3


def test_rows_carry_preview_version_and_calibration(project) -> None:
    (item,) = make_ready_items(project, [0.4])
    item.prediction.calibrated_confidence = 0.4
    item.prediction.save(update_fields=["calibrated_confidence"])

    (row,) = itemlist.page(project, ItemFilters()).rows

    assert row["preview"] == "Why did service 0 stop?"
    assert row["version_id"] == project.current_version_id and row["calibrated"] == 0.4


def test_disagreement_filter(project) -> None:
    agreed, disputed = make_ready_items(project, [0.2, 0.3])
    Item.objects.filter(pk=disputed.pk).update(disagreement=True)

    assert ids(project, {"disagreement": "yes"}) == [disputed.pk]
    assert ids(project, {"disagreement": "no"}) == [agreed.pk]
    assert errors_of(project, {"disagreement": "maybe"})["disagreement"] == (
        "disagreement must be 'yes' or 'no', not 'maybe'"
    )
