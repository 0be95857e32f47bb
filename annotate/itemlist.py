"""The item list: filters parsed from a query string, and keyset pages that stay fast at 100,000 items.

`ItemFilters.parse` turns GET parameters into filters or raises `InvalidFilters` naming every bad field (an
impossible value is an error, never silently ignored). `page` returns one page in a stable order by seeking
past the last row seen (`after`) or before the first (`before`): no OFFSET, so page 2,000 costs what page 1
costs, and no COUNT(*) over the whole match (the first page counts up to `COUNT_CAP`, later pages not at all).

Orders: `id`, `-id`, `confidence`, `-confidence` (the queue's confidence, `Item.confidence`; items without a
prediction come last either way). Each is one range scan of an index declared on `Item`. A search (`q`) on
PostgreSQL reads up to `COUNT_CAP + 1` matching ids through its own index before any page (`_indexed_matches`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from functools import partial
from urllib.parse import urlencode

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import BooleanField, Exists, Expression, F, Func, OuterRef, Q, QuerySet, TextField, Value
from django.db.models.fields.json import KT
from django.db.models.fields.tuple_lookups import Tuple, TupleGreaterThan, TupleLessThan
from django.db.models.functions import Cast, Coalesce, Left
from django.utils import timezone

from annotate.deletion import by_pks
from annotate.models import Answer, Claim, Item, ItemStatus, ModelVersion, Project

PAGE_SIZE = 50
WORDS = "search_words"  # on PostgreSQL, the column of each item's words (migration 0021; not a field of `Item`)
COUNT_CAP = 1000  # matching items are counted up to here ("more than 1,000")
MAX_QUERY_CHARS = 200
MAX_TERMS = 8
SORTS = {"id": "oldest first", "-id": "newest first", "confidence": "least confident first",
         "-confidence": "most confident first"}
PARAMS = ("status", "reviewer", "confidence_min", "confidence_max", "disagreement", "version", "q", "sort",
          "after", "before")
FILTER_PARAMS = PARAMS[:7]
_TERM = re.compile(r"\w+")


# What the item list's form calls each parameter, for its error summary (the API names the parameters).
LABELS = {"q": "Search inputs", "status": "Status", "reviewer": "Answered by", "confidence_min": "Confidence",
          "confidence_max": "Confidence", "version": "Model version", "disagreement": "Disagreement",
          "sort": "Order", "after": "Page", "before": "Page"}


def whole(text: str | None) -> int | None:
    """`text` as a whole number (a count or an item id given back by a form or a script); None if it is not one."""
    return int(text) if text and text.isdigit() and len(text) < 19 else None


class InvalidFilters(ValueError):
    """Some parameters are impossible; `errors` maps each parameter to what is wrong and how to fix it."""

    def __init__(self, errors: dict[str, str], values: dict[str, str]):
        self.errors = errors
        self.values = values  # the submitted values, to show the form as it was
        super().__init__("; ".join(f"{name}: {message}" for name, message in errors.items()))

    @property
    def labelled(self) -> list[tuple[str, str]]:
        """(the form's label, what is wrong) for each bad parameter."""
        return [(LABELS.get(name, name), message) for name, message in self.errors.items()]


@dataclass(frozen=True)
class ItemFilters:
    """Parsed, valid filters of the item list (all optional) and its order and position."""

    status: str = ""
    reviewer: str = ""  # a username
    reviewer_id: int | None = None
    confidence_min: float | None = None
    confidence_max: float | None = None
    disagreement: bool | None = None
    version: int | None = None
    q: str = ""
    sort: str = "id"
    after: tuple | None = None
    before: tuple | None = None
    terms: tuple[str, ...] = field(default=(), repr=False)

    @classmethod
    def parse(cls, project: Project, params, *, user=None) -> ItemFilters:
        """Filters from GET `params` (a QueryDict or a dict); `InvalidFilters` lists every bad parameter.

        `user`, when given and not the project's admin, may filter only by their own answers.
        """
        errors: dict[str, str] = {}
        values = _single_values(params, errors)
        parsed: dict = {}
        status = values.get("status", "")
        if status:
            if status not in ItemStatus.values:
                errors["status"] = f"unknown status {status!r}; choose one of {', '.join(ItemStatus.values)}"
            parsed["status"] = status
        reviewer = values.get("reviewer", "")
        if reviewer:
            parsed["reviewer"] = reviewer
            reviewer_id = _reviewer_id(project, reviewer)
            if reviewer_id is None:
                errors["reviewer"] = f"no reviewer {reviewer!r} in this project"
            elif user is not None and reviewer_id != user.pk and not project.is_admin(user):
                errors["reviewer"] = "you can filter by your own answers only; project admins can filter by anyone"
            parsed["reviewer_id"] = reviewer_id
        for name in ("confidence_min", "confidence_max"):
            if values.get(name, ""):
                parsed[name] = _unit_number(name, values[name], errors)
        low, high = parsed.get("confidence_min"), parsed.get("confidence_max")
        if low is not None and high is not None and low > high:
            errors["confidence_min"] = (
                f"the lowest confidence, {low:g}, is above the highest, {high:g}, so nothing can match; "
                "swap them or widen the range"
            )
        disagreement = values.get("disagreement", "")
        if disagreement:
            if disagreement not in ("yes", "no"):
                errors["disagreement"] = f"disagreement must be 'yes' or 'no', not {disagreement!r}"
            parsed["disagreement"] = disagreement == "yes"
        version = values.get("version", "")
        if version:
            parsed["version"] = _version(project, version, errors)
        q = values.get("q", "").strip()
        if q:
            terms = tuple(dict.fromkeys(term.casefold() for term in _TERM.findall(q)))
            if len(q) > MAX_QUERY_CHARS:
                errors["q"] = f"the search is {len(q)} characters long; at most {MAX_QUERY_CHARS} are allowed"
            elif not terms:
                errors["q"] = f"search for words: {q!r} has no letters or digits"
            elif len(terms) > MAX_TERMS:
                errors["q"] = f"the search has {len(terms)} words; at most {MAX_TERMS} are allowed"
            parsed["q"], parsed["terms"] = q, terms[:MAX_TERMS]
        sort = values.get("sort", "") or "id"
        if sort not in SORTS:
            errors["sort"] = f"unknown order {sort!r}; choose one of {', '.join(SORTS)}"
            sort = "id"
        parsed["sort"] = sort
        if values.get("after") and values.get("before"):
            errors["after"] = "give either after or before, not both"
        for name in ("after", "before"):
            if values.get(name):
                parsed[name] = _cursor(name, values[name], sort, errors)
        if errors:
            raise InvalidFilters(errors, values)
        return cls(**parsed)

    @property
    def active(self) -> bool:
        """Whether any filter (not order or position) is set."""
        return any(self.values()[name] for name in FILTER_PARAMS)

    def values(self) -> dict[str, str]:
        """The filters and order as GET parameters (empty strings for unset), without the position."""
        return {
            "status": self.status,
            "reviewer": self.reviewer,
            "confidence_min": "" if self.confidence_min is None else f"{self.confidence_min:g}",
            "confidence_max": "" if self.confidence_max is None else f"{self.confidence_max:g}",
            "disagreement": "" if self.disagreement is None else ("yes" if self.disagreement else "no"),
            "version": "" if self.version is None else str(self.version),
            "q": self.q,
            "sort": "" if self.sort == "id" else self.sort,
        }

    @property
    def given(self) -> dict[str, str]:
        """The filters that are set, as GET parameters (no order, no position): what a deletion records."""
        return {name: value for name, value in self.values().items() if value and name in FILTER_PARAMS}

    def query_string(self, **changes) -> str:
        """`?...` for these filters with `changes` applied (set a value to "" to drop it); no position."""
        values = {**self.values(), **changes}
        return "?" + urlencode({k: v for k, v in values.items() if v})

    def apply(self, items: QuerySet) -> QuerySet:
        """`items` narrowed by these filters (the position is applied by `page`)."""
        if self.status:
            items = items.filter(status=self.status)
        if self.reviewer_id is not None:
            items = items.filter(Exists(Answer.objects.filter(item=OuterRef("pk"), reviewer_id=self.reviewer_id)))
        if self.confidence_min is not None:
            items = items.filter(confidence__gte=self.confidence_min)
        if self.confidence_max is not None:
            items = items.filter(confidence__lte=self.confidence_max)
        if self.disagreement is not None:
            items = items.filter(disagreement=self.disagreement)
        if self.version is not None:
            items = items.filter(prediction__model_version_id=self.version)
        if self.terms:
            items = _search(items, self.terms)
        return items


@dataclass
class Page:
    """One page of rows, the cursors of its neighbours and, on the first page, the number of matching items
    (counted up to `COUNT_CAP`; `capped` when there are more)."""

    rows: list[dict]
    filters: ItemFilters
    next_after: str | None
    previous_before: str | None
    matching: int | None
    capped: bool

    @property
    def next_query(self) -> str | None:
        return None if self.next_after is None else self.filters.query_string(after=self.next_after)

    @property
    def previous_query(self) -> str | None:
        return None if self.previous_before is None else self.filters.query_string(before=self.previous_before)


def page(project: Project, filters: ItemFilters, *, size: int = PAGE_SIZE) -> Page:
    """The page of `project`'s items at `filters`' position (the first page without one)."""
    items = counted = filters.apply(Item.objects.filter(project=project))
    seek = _seek
    known = None  # the number of matching items, where the search alone already tells it
    if filters.terms and connection.vendor == "postgresql":
        # A search's matches are counted through its index first (`_indexed_matches`): PostgreSQL, left to plan
        # the page, may walk every item for a word that few or none hold.
        plain = replace(filters, q="", terms=())
        found = _indexed_matches(project, filters.terms, COUNT_CAP + 1)
        if len(found) <= COUNT_CAP:  # few: the page is read among them, by their ids
            items = counted = plain.apply(Item.objects.filter(project=project, pk__in=found))
        elif not plain.given:  # many, and nothing else narrows them: a walk in order soon fills a page
            items, known = Item.objects.filter(project=project), len(found)
            seek = partial(_seek_words, terms=filters.terms)
        # Many, and other filters too: PostgreSQL plans the page with them all (it may combine their indexes).
    if filters.before is not None:
        keys = seek(items, filters.sort, filters.before, size + 1, backward=True)
        if len(keys) <= size:  # the start of the list: show a full first page rather than a short one
            return page(project, replace(filters, before=None), size=size)
        keys = keys[:size][::-1]
        has_previous, has_next = True, True
    else:
        keys = seek(items, filters.sort, filters.after, size + 1, backward=False)
        has_next = len(keys) > size
        keys = keys[:size]
        has_previous = filters.after is not None and bool(keys)
    # Counted on the first page only: paging on must not pay for the count again (it costs more than the page
    # itself for a dense search, as it reads up to COUNT_CAP matches).
    positioned = filters.after is not None or filters.before is not None
    if positioned:
        matching = None
    elif not has_next:  # the whole match is on this page
        matching = len(keys)
    elif known is not None:
        matching = known
    else:
        matching = counted.order_by()[: COUNT_CAP + 1].count()
    return Page(
        rows=_rows([key[-1] for key in keys]),
        filters=filters,
        next_after=_encode(keys[-1], filters.sort) if has_next and keys else None,
        previous_before=_encode(keys[0], filters.sort) if has_previous else None,
        matching=None if matching is None else min(matching, COUNT_CAP),
        capped=matching is not None and matching > COUNT_CAP,
    )


def reviewer_choices(project: Project, user) -> list[str]:
    """Usernames the reviewer filter offers `user`: every member for admins, themselves for reviewers."""
    if not project.is_admin(user):
        return [user.get_username()]
    return list(project.memberships.order_by("user__username").values_list("user__username", flat=True))


# -- internals -------------------------------------------------------------------------------------------------
def _single_values(params, errors: dict[str, str]) -> dict[str, str]:
    getlist = params.getlist if hasattr(params, "getlist") else (lambda k: [params[k]])
    values = {}
    for name in params:
        got = [str(v) for v in getlist(name)]
        if name not in PARAMS:
            errors[name] = f"unknown filter {name!r}; the item list takes {', '.join(PARAMS)}"
            continue
        if len(got) > 1:
            errors[name] = f"{name} is given {len(got)} times; give it once"
        if any("\x00" in v for v in got):
            errors[name] = f"{name} contains a NUL character (\\u0000), which no filter value can hold"
            continue
        values[name] = got[-1].strip() if got else ""
    return values


def _reviewer_id(project: Project, username: str) -> int | None:
    users = get_user_model().objects.filter(username=username)
    members = users.filter(memberships__project=project)
    answered = project.answered_by().filter(username=username)
    return (members.values_list("pk", flat=True).first()
            or answered.values_list("pk", flat=True).first())


# The bounds in words: the page shows a message beside the field's label, the API under the parameter's name.
_BOUNDS = {"confidence_min": "the lowest confidence", "confidence_max": "the highest confidence"}


def _unit_number(name: str, text: str, errors: dict[str, str]) -> float | None:
    try:
        value = float(text)
    except ValueError:
        errors[name] = f"{_BOUNDS[name]} must be a number from 0 to 1, not {text!r}"
        return None
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        errors[name] = f"{_BOUNDS[name]} must be from 0 to 1, not {text}"
        return None
    return value


def _version(project: Project, text: str, errors: dict[str, str]) -> int | None:
    if not text.isdigit() or not ModelVersion.objects.filter(project=project, pk=int(text)).exists():
        errors["version"] = f"no model version {text!r} in this project"
        return None
    return int(text)


def _cursor(name: str, text: str, sort: str, errors: dict[str, str]) -> tuple | None:
    """`id` orders: "<id>"; confidence orders: "<confidence>~<id>" (confidence "none" for no prediction)."""
    try:
        if sort in ("id", "-id"):
            return (int(text),)
        confidence, _, pk = text.partition("~")
        value = None if confidence == "none" else float(confidence)
        if value is not None and not math.isfinite(value):
            raise ValueError(text)
        return (value, int(pk))
    except ValueError:
        errors[name] = f"{name}={text!r} is not a position in this list (order {sort}); start from the first page"
        return None


def _encode(key: tuple, sort: str) -> str:
    if sort in ("id", "-id"):
        return str(key[0])
    confidence, pk = key
    return f"{'none' if confidence is None else repr(confidence)}~{pk}"


def _seek(items: QuerySet, sort: str, cursor: tuple | None, limit: int, *, backward: bool) -> list[tuple]:
    """Up to `limit` keys after `cursor` in `sort` order (before it, nearest first, when `backward`)."""
    descending = sort.startswith("-") != backward
    if sort in ("id", "-id"):
        if cursor is not None:
            items = items.filter(id__lt=cursor[0]) if descending else items.filter(id__gt=cursor[0])
        ids = items.order_by("-id" if descending else "id").values_list("id", flat=True)[:limit]
        return [(pk,) for pk in ids]
    # Confidence orders put items without a prediction last in both directions: two segments, each one index
    # range, read in order (reversed when seeking backward).
    scored, unscored = items.filter(confidence__isnull=False), items.filter(confidence__isnull=True)
    id_order = "-id" if descending else "id"
    segments = [(scored, True), (unscored, False)]
    if backward:
        segments.reverse()
        id_order = "id" if sort.startswith("-") else "-id"
    keys: list[tuple] = []
    for segment, has_score in segments:
        if cursor is not None:
            at_score = cursor[0] is not None
            if has_score != at_score:
                # The cursor lies in the other segment, so this one is read whole or not at all: scored rows
                # come before unscored ones, so only unscored rows follow a scored cursor, and only scored rows
                # precede an unscored one.
                if has_score != backward:
                    continue
            elif has_score:
                key = Tuple(F("confidence"), F("id"))
                lookup = TupleLessThan if descending else TupleGreaterThan
                segment = segment.filter(lookup(key, (cursor[0], cursor[1])))
            else:
                segment = segment.filter(id__lt=cursor[1]) if id_order == "-id" else segment.filter(id__gt=cursor[1])
        scored_order = ("-confidence", "-id") if descending else ("confidence", "id")
        order = scored_order if has_score else (id_order,)
        keys.extend(segment.order_by(*order).values_list("confidence", "id")[: limit - len(keys)])
        if len(keys) >= limit:
            break
    return keys


def _seek_words(items: QuerySet, sort: str, cursor: tuple | None, limit: int, *, backward: bool,
                terms: tuple[str, ...]) -> list[tuple]:
    """`_seek` among the items whose words match `terms`, where many do: it reads the items in order a window
    at a time (each twice the last) and keeps those whose stored words match, so that PostgreSQL never plans
    the walk itself (it may read every match through the index and sort them all instead: 0.2 s at 100,000).
    """
    keys: list[tuple] = []
    window = 4 * limit
    while len(keys) < limit:
        batch = _seek(items, sort, cursor, window, backward=backward)
        hits = set(by_pks(Item, [key[-1] for key in batch]).filter(_words_match(terms)).values_list("pk", flat=True))
        keys.extend(key for key in batch if key[-1] in hits)
        if len(batch) < window:
            break
        cursor, window = batch[-1], 2 * window
    return keys[:limit]


def mark_own(rows: list[dict], user) -> None:
    """Set each row's `own` to the kind of `user`'s answer to that item (target, skip, draft) or None: one
    query by the (reviewer, item) index, for a page's rows. A reviewer finds their drafts and skips on sight."""
    kinds = dict(Answer.objects.filter(reviewer=user.pk, item_id__in=[row["id"] for row in rows])
                 .values_list("item_id", "kind"))
    for row in rows:
        row["own"] = kinds.get(row["id"])


def mark_held(rows: list[dict]) -> None:
    """Set each row's `held_by` to the names of the reviewers holding that item now (leases not ended), for the
    project's admins: one query by the claims' (item, reviewer) index, for a page's rows."""
    held: dict[int, list[str]] = {}
    claims = (Claim.objects.filter(item_id__in=[row["id"] for row in rows], expires_at__gt=timezone.now())
              .order_by("expires_at").values_list("item_id", "reviewer__username"))
    for item_id, name in claims:
        held.setdefault(item_id, []).append(name)
    for row in rows:
        row["held_by"] = held.get(row["id"], [])


def _rows(ids: list[int]) -> list[dict]:
    """The columns the table shows for `ids`, in that order (one small query by primary key)."""
    preview = Coalesce(
        KT("inputs__question"), KT("inputs__premise"), KT("inputs__goal"), KT("inputs__queries__0"),
        Left(Cast("inputs", TextField()), 160), output_field=TextField(),
    )
    rows = (
        Item.objects.filter(pk__in=ids)
        .annotate(preview=preview, calibrated=F("prediction__calibrated_confidence"),
                  version_id=F("prediction__model_version_id"), version_label=F("prediction__model_version__label"))
        .values("id", "status", "confidence", "final_answers", "preview", "calibrated", "version_id",
                "version_label", "created_at", "disagreement", "refusal")
    )
    by_id = {row["id"]: row for row in rows}
    return [by_id[pk] for pk in ids if pk in by_id]


class _SearchWords(Expression):
    """The words of the item's `inputs` (its string values, not its keys) that PostgreSQL keeps beside them:
    `search_words`, a generated column with its GIN index (migration 0021), read here and nowhere else.

    Stored, because a search the planner answers by walking the items in the page's order filters each one: on
    the stored words that costs a small read, where computing them from the JSON took 30 us an item.
    """

    output_field = TextField()  # a tsvector; only ever compared with a tsquery, never read into Python

    def as_sql(self, compiler, connection):
        return f"{compiler.quote_name_unless_alias(compiler.query.base_table)}.{WORDS}", []


class _Matches(Func):
    arg_joiner = " @@ "
    template = "(%(expressions)s)"
    output_field = BooleanField()


class _PrefixQuery(Func):
    function = "to_tsquery"
    template = "%(function)s('simple'::regconfig, %(expressions)s)"


def _words_match(terms: tuple[str, ...]) -> _Matches:
    return _Matches(_SearchWords(), _PrefixQuery(Value(_prefix_query(terms))))


def _indexed_matches(project: Project, terms: tuple[str, ...], limit: int) -> list[int]:
    """Up to `limit` ids of `project`'s items whose words match `terms`, read as a whole result (not in the
    page's order): through the search's index when PostgreSQL takes the words to be rare, else by reading
    items until it has `limit` of them.

    The page's own query cannot be trusted with a rare word: PostgreSQL guesses that any word prefix matches
    about 1% of items, and so walks the items in the page's order checking each one, for a word that no item
    holds as for one that half of them do (0.2 s at 100,000 items, for nothing). Asked for every match
    (a materialized CTE is planned for all its rows), it reads the index; `limit` stops the reading early.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH found AS MATERIALIZED (SELECT id FROM {Item._meta.db_table} WHERE project_id = %s AND "
            f"{WORDS} @@ to_tsquery('simple'::regconfig, %s)) SELECT id FROM found LIMIT %s",
            [project.pk, _prefix_query(terms), limit],
        )
        return [row[0] for row in cursor.fetchall()]


def _prefix_query(terms: tuple[str, ...]) -> str:
    """The tsquery text of `terms` as word prefixes, all required. Terms are runs of word characters, so no
    tsquery operator can reach it."""
    return " & ".join(f"{term}:*" for term in terms)


def _search(items: QuerySet, terms: tuple[str, ...]) -> QuerySet:
    """Items whose inputs hold every term: word prefixes on PostgreSQL (indexed), substrings elsewhere."""
    if connection.vendor == "postgresql":
        return items.filter(_words_match(terms))
    text = Cast("inputs", TextField())
    condition = Q()
    for term in terms:
        condition &= Q(_inputs_text__icontains=term)
    return items.alias(_inputs_text=text).filter(condition)
