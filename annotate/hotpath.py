"""The review loop's reads, as fixed SQL: the item with everything its page shows, the viewer's answers, and the
signed-in user (with their settings) that every page reads.

Building and compiling these querysets cost the ORM 3-4 ms a request, several times what PostgreSQL takes to run
them (a prepared statement, `TC_DB_PREPARED`). Here the SQL text is built once per process from the models'
own columns, only values change between requests, and rows come back through the same field converters the ORM
applies, as ordinary model instances. The querysets they replace are kept in the docstrings; the tests of the
item page, the queue and the query budgets cover both.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model

from annotate.models import (
    FINAL_KINDS,
    AccountSettings,
    Answer,
    Claim,
    Item,
    Membership,
    ModelVersion,
    Prediction,
    Project,
)


@dataclass(frozen=True)
class _Part:
    """One model's columns in a SELECT under `alias`, and making its instance back from them."""

    model: type[Model]
    alias: str
    defer: tuple[str, ...] = ()

    @functools.cached_property
    def fields(self) -> list:
        return [f for f in self.model._meta.concrete_fields if f.attname not in self.defer]

    def columns(self, quote) -> list[str]:
        return [f"{self.alias}.{quote(f.column)}" for f in self.fields]

    def instance(self, values: list):
        """The instance (None for the NULLs of an outer join); deferred fields load on first use, as with defer()."""
        if values[0] is None:  # the primary key comes first
            return None
        return self.model.from_db(DEFAULT_DB_ALIAS, [f.attname for f in self.fields], values)


_ITEM = _Part(Item, "i")
_PROJECT = _Part(Project, "p")
_CURRENT = _Part(ModelVersion, "cv")
_PREDICTION = _Part(Prediction, "pr", defer=("trace",))  # the largest field; only the trace view reads it
_PREDICTED_BY = _Part(ModelVersion, "pv")
_VIEWER_ANSWER = _Part(Answer, "va")
_PAGE_PARTS = (_ITEM, _PROJECT, _CURRENT, _PREDICTION, _PREDICTED_BY, _VIEWER_ANSWER)
_ANSWER = _Part(Answer, "a")


class _Query:
    """SQL text made once per process (per database vendor and `shape`), and the converters for its columns.

    `build(connection, *shape)` returns the SQL and the column expressions (for their converters); `shape` is
    whatever changes the text itself (how many ids an IN list takes), never a value.
    """

    def __init__(self, build):
        self.build = build
        self.cache: dict[tuple, tuple] = {}

    def run(self, params: list, *shape) -> list[list]:
        connection = connections[DEFAULT_DB_ALIAS]
        key = (connection.vendor, *shape)
        if key not in self.cache:
            sql, expressions = self.build(connection, *shape)
            compiler = connection.ops.compiler("SQLCompiler")(Item.objects.none().query, connection, DEFAULT_DB_ALIAS)
            self.cache[key] = (sql, compiler, compiler.get_converters(expressions))
        sql, compiler, converters = self.cache[key]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        return list(compiler.apply_converters(rows, converters)) if converters else [list(r) for r in rows]


def _datetime(value):
    return connections[DEFAULT_DB_ALIAS].ops.adapt_datetimefield_value(value)


def _table(model: type[Model], quote) -> str:
    return quote(model._meta.db_table)


def _role(q) -> str:
    """SQL: the role of the user (a parameter) in project `p`, NULL for a non-member."""
    return (f"(SELECT m.{q('role')} FROM {_table(Membership, q)} m WHERE m.{q('project_id')} = p.{q('id')} "
            f"AND m.{q('user_id')} = %s)")


def _instances(parts, row: list) -> tuple[list, int]:
    """One instance per part from consecutive columns of `row`, and where the columns after them start."""
    made, start = [], 0
    for part in parts:
        made.append(part.instance(row[start : start + len(part.fields)]))
        start += len(part.fields)
    return made, start


def _latest_final(q, column: str, project_column: str) -> str:
    """SQL: `column` of the reviewer's (a parameter; the final kinds follow) latest final answer in the project."""
    kinds = ", ".join(["%s"] * len(FINAL_KINDS))
    return (f"SELECT b.{q(column)} FROM {_table(Answer, q)} b "
            f"WHERE b.{q('reviewer_id')} = %s AND b.{q('project_id')} = {project_column} "
            f"AND b.{q('kind')} IN ({kinds}) "
            f"ORDER BY b.{q('updated_at')} DESC, b.{q('id')} DESC LIMIT 1")


def _page_sql(connection):
    q = connection.ops.quote_name
    columns = [c for part in _PAGE_PARTS for c in part.columns(q)]
    project_id = f"p.{q('id')}"
    sql = (
        f"SELECT {', '.join(columns)}, {_role(q)}, "
        f"({_latest_final(q, 'item_id', project_id)}), "
        f"c.{q('expires_at')}, c.{q('typed')}, c.{q('typed_at')} "
        f"FROM {_table(Item, q)} i "
        f"INNER JOIN {_table(Project, q)} p ON p.{q('id')} = i.{q('project_id')} "
        f"LEFT JOIN {_table(ModelVersion, q)} cv ON cv.{q('id')} = p.{q('current_version_id')} "
        f"LEFT JOIN {_table(Prediction, q)} pr ON pr.{q('id')} = i.{q('prediction_id')} "
        f"LEFT JOIN {_table(ModelVersion, q)} pv ON pv.{q('id')} = pr.{q('model_version_id')} "
        # One row at most: a reviewer has one claim on an item (claim_unique_reviewer).
        f"LEFT JOIN {_table(Claim, q)} c ON c.{q('item_id')} = i.{q('id')} AND c.{q('reviewer_id')} = %s "
        f"AND c.{q('expires_at')} > %s "
        f"LEFT JOIN {_table(Answer, q)} va ON va.{q('item_id')} = i.{q('id')} AND va.{q('reviewer_id')} = %s "
        f"WHERE i.{q('id')} = %s AND p.{q('slug')} = %s"
    )
    fields = [f for part in _PAGE_PARTS for f in part.fields]
    expressions = [f.get_col(f.model._meta.db_table) for f in fields]
    expressions += [Membership._meta.get_field("role").get_col("m"), Answer._meta.get_field("item").get_col("b")]
    expressions += [Claim._meta.get_field(name).get_col("c") for name in ("expires_at", "typed", "typed_at")]
    return sql, expressions


_PAGE = _Query(_page_sql)


def item_for_page(user, slug: str, pk: int, now) -> Item | None:
    """Item `pk` of project `slug` with its project (and current version), prediction (and its version, not the
    trace), and five attributes for `user`: `viewer_role`, `viewer_claim_expires` (None without an active claim),
    `viewer_typed` (what they typed and did not send, from that claim: `(typed, typed_at)`, or None),
    `viewer_answer` (their answer to the item, None without one) and `viewer_latest_item_id` (the item of their
    latest final answer in the project, None before the first).

    What these ORM queries give, in one fixed statement::

        Item.objects.select_related("project", "project__current_version", "prediction", "prediction__model_version")
            .defer("prediction__trace").filter(pk=pk, project__slug=slug)
            .annotate(viewer_role=<user's membership role>, viewer_claim_expires=<user's active claim's expiry>,
                      viewer_typed=<that claim's typed and typed_at>,
                      viewer_latest_item_id=<item of user's latest final answer in the project>)
        Answer.objects.filter(item=item, reviewer=user).first()
    """
    rows = _PAGE.run([user.pk, user.pk, *_final_kinds(), user.pk, _datetime(now), user.pk, pk, slug])
    if not rows:
        return None
    row = rows[0]
    (item, project, current, prediction, predicted_by, answer), start = _instances(_PAGE_PARTS, row)
    project.current_version = current
    if prediction is not None:
        prediction.model_version = predicted_by
    item.project = project
    item.prediction = prediction
    item.viewer_answer = answer
    item.viewer_role, item.viewer_latest_item_id, item.viewer_claim_expires, typed, typed_at = row[start : start + 5]
    item.viewer_typed = (typed, typed_at) if typed else None
    return item


def _answers_sql(connection):
    q = connection.ops.quote_name
    sql = (
        f"SELECT {', '.join(_ANSWER.columns(q))} FROM {_table(Answer, q)} a "
        f"WHERE a.{q('reviewer_id')} = %s AND (a.{q('item_id')} = %s OR a.{q('id')} = ({_latest_final(q, 'id', '%s')}))"
    )
    return sql, [f.get_col(Answer._meta.db_table) for f in _ANSWER.fields]


_ANSWERS = _Query(_answers_sql)


def answer_and_latest(user, project_id: int, item_id: int) -> list[Answer]:
    """`user`'s answer to item `item_id` (if any) and their latest final answer in the project, in one statement::

        latest = Answer.objects.filter(reviewer=user, kind__in=FINAL_KINDS, project=project)
            .order_by("-updated_at", "-id").values("pk")[:1]
        Answer.objects.filter(reviewer=user).filter(Q(item=item) | Q(pk=Subquery(latest)))
    """
    rows = _ANSWERS.run([user.pk, item_id, user.pk, project_id, *[str(k) for k in FINAL_KINDS]])
    return [_ANSWER.instance(row) for row in rows]


# -- a project with the viewer's role ----------------------------------------------------------------------------
_PROJECT_PARTS = (_PROJECT, _CURRENT)


def _project_sql(connection):
    q = connection.ops.quote_name
    columns = [c for part in _PROJECT_PARTS for c in part.columns(q)]
    sql = (
        f"SELECT {', '.join(columns)}, {_role(q)} "
        f"FROM {_table(Project, q)} p "
        f"LEFT JOIN {_table(ModelVersion, q)} cv ON cv.{q('id')} = p.{q('current_version_id')} "
        f"WHERE p.{q('slug')} = %s"
    )
    fields = [f for part in _PROJECT_PARTS for f in part.fields]
    expressions = [f.get_col(f.model._meta.db_table) for f in fields]
    return sql, expressions + [Membership._meta.get_field("role").get_col("m")]


_PROJECT_QUERY = _Query(_project_sql)


def project_for_member(user, slug: str) -> Project | None:
    """Project `slug` with its current version and `viewer_role` (None for a non-member)::

        Project.objects.select_related("current_version").annotate(viewer_role=<user's membership role>)
            .filter(slug=slug)
    """
    rows = _PROJECT_QUERY.run([user.pk, slug])
    if not rows:
        return None
    (project, project.current_version), start = _instances(_PROJECT_PARTS, rows[0])
    project.viewer_role = rows[0][start]
    return project


# -- the signed-in user -----------------------------------------------------------------------------------------
@functools.cache
def _user_parts() -> tuple[_Part, _Part]:
    return _Part(get_user_model(), "u"), _Part(AccountSettings, "s")


def _user_sql(connection):
    q = connection.ops.quote_name
    parts = _user_parts()
    user_model = parts[0].model
    columns = [c for part in parts for c in part.columns(q)]
    sql = (
        f"SELECT {', '.join(columns)} FROM {_table(user_model, q)} u "
        f"LEFT JOIN {_table(AccountSettings, q)} s ON s.{q('user_id')} = u.{q(user_model._meta.pk.column)} "
        f"WHERE u.{q(user_model._meta.pk.column)} = %s"
    )
    return sql, [f.get_col(f.model._meta.db_table) for part in parts for f in part.fields]


_USER = _Query(_user_sql)


def user_with_settings(user_id):
    """The user `user_id` with their `AccountSettings` (None when they have none), which every page reads for its
    time zone; what the ORM gives, in one fixed statement and without building the queryset per request::

        get_user_model()._default_manager.select_related("account_settings").get(pk=user_id)
    """
    rows = _USER.run([user_id])
    if not rows:
        return None
    (user, account_settings), _ = _instances(_user_parts(), rows[0])
    AccountSettings._meta.get_field("user").remote_field.set_cached_value(user, account_settings)
    if account_settings is not None:
        account_settings.user = user
    return user


# -- claiming ----------------------------------------------------------------------------------------------------
def claims_in_database() -> bool:
    """Whether the claim runs as the database function `annotate_claim_next` (migration 0005): on PostgreSQL."""
    return connections[DEFAULT_DB_ALIAS].vendor == "postgresql"


def claim_next_in_database(project, user, status: str, now, expires, attempts: int) -> int | None:
    """`queue.claim_next_id` in one round trip: the function takes the steps of `queue._claim_next_in_python`
    (the reviewer still a member, the project's overlap read afresh, the held claim first, then the first free
    item in queue order, recounted once locked) and returns the claimed item's id, None when nothing is left."""
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute(
            "SELECT annotate_claim_next(%s, %s, %s, %s, %s, %s, %s)",
            [project.pk, user.pk, status, _final_kinds(), now, expires, attempts],
        )
        return cursor.fetchone()[0]


_CLAIMED_PARTS = (_ITEM, _PREDICTION, _PREDICTED_BY)


def _not_answered(q, item_column: str) -> str:
    """SQL: the reviewer (first parameter) has no final answer to the item in `item_column`."""
    kinds = ", ".join(["%s"] * len(FINAL_KINDS))
    return (f"NOT EXISTS (SELECT 1 FROM {_table(Answer, q)} a WHERE a.{q('item_id')} = {item_column} "
            f"AND a.{q('reviewer_id')} = %s AND a.{q('kind')} IN ({kinds}))")


def _final_kinds() -> list[str]:
    return [str(kind) for kind in FINAL_KINDS]


def _held_sql(connection):
    q = connection.ops.quote_name
    claimed = f"c.{q('item_id')}"
    sql = (
        f"SELECT {claimed} FROM {_table(Claim, q)} c "
        f"INNER JOIN {_table(Item, q)} i ON i.{q('id')} = c.{q('item_id')} "
        f"WHERE c.{q('reviewer_id')} = %s AND i.{q('project_id')} = %s AND i.{q('status')} = %s "
        f"AND c.{q('expires_at')} > %s AND {_not_answered(q, claimed)} "
        f"ORDER BY c.{q('created_at')} LIMIT 1"
    )
    return sql, []


_HELD = _Query(_held_sql)


def held_item_id(project_id: int, user, status: str, now) -> int | None:
    """The item of `user`'s oldest active claim in the project that is `status` and they have not answered."""
    rows = _HELD.run([user.pk, project_id, status, _datetime(now), user.pk, *_final_kinds()])
    return rows[0][0] if rows else None


def _lock_suffix(connection, skip_locked: bool) -> str:
    if not connection.features.has_select_for_update:
        return ""  # SQLite: a write transaction holds the whole database
    if skip_locked:
        return " FOR UPDATE OF i SKIP LOCKED"
    return " FOR UPDATE OF i"


def _claimed_columns(q) -> tuple[str, str]:
    columns = ", ".join(c for part in _CLAIMED_PARTS for c in part.columns(q))
    joins = (f"LEFT JOIN {_table(Prediction, q)} pr ON pr.{q('id')} = i.{q('prediction_id')} "
             f"LEFT JOIN {_table(ModelVersion, q)} pv ON pv.{q('id')} = pr.{q('model_version_id')} ")
    return columns, joins


def _claimed_expressions() -> list:
    return [f.get_col(f.model._meta.db_table) for part in _CLAIMED_PARTS for f in part.fields]


def _claimed_item(row: list) -> Item:
    (item, prediction, predicted_by), _ = _instances(_CLAIMED_PARTS, row)
    if prediction is not None:
        prediction.model_version = predicted_by
    item.prediction = prediction
    return item


def _locked_sql(connection):
    q = connection.ops.quote_name
    columns, joins = _claimed_columns(q)
    sql = (f"SELECT {columns} FROM {_table(Item, q)} i {joins}WHERE i.{q('id')} = %s"
           f"{_lock_suffix(connection, skip_locked=False)}")
    return sql, _claimed_expressions()


_LOCKED = _Query(_locked_sql)


def lock_reviewer(project_id: int, user_id: int) -> int | None:
    """The project's overlap as it is now if the user may still be given items in it (active, and a member or
    staff), else None; their account's row is held (KEY SHARE) until this transaction ends.

    The overlap is read here because the request read it with the project before it claims: an overlap lowered
    in between (on the settings page, in Django's admin) would still give a place it no longer has.

    A request checks membership before its claim; a removal or deactivation landing between the two would leave
    a claim made after it released the reviewer's claims. Both lock the account's row first
    (`accounts.deactivate`, `Membership.delete`), so the claim either waits for them and is refused, or is made
    first and released by them. KEY SHARE conflicts with their lock only: sign-ins and other claims go on. The
    claim function (migration 0018) takes the same two steps; SQLite runs one writer at a time and locks nothing.
    """
    connection = connections[DEFAULT_DB_ALIAS]
    q = connection.ops.quote_name
    lock = " FOR KEY SHARE" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {q('is_staff')} FROM {_table(get_user_model(), q)} WHERE {q('id')} = %s "
                       f"AND {q('is_active')}{lock}", [user_id])
        row = cursor.fetchone()
        if row is None:
            return None
        # A statement of its own: after waiting for the lock, it reads what the removal committed.
        cursor.execute(
            f"SELECT p.{q('overlap')} FROM {_table(Project, q)} p WHERE p.{q('id')} = %s AND (%s OR EXISTS ("
            f"SELECT 1 FROM {_table(Membership, q)} m WHERE m.{q('project_id')} = p.{q('id')} "
            f"AND m.{q('user_id')} = %s))", [project_id, bool(row[0]), user_id])
        row = cursor.fetchone()
        return row[0] if row is not None else None


def lock_account(user_id: int) -> None:
    """Lock the account's row (FOR UPDATE) before taking the user off a project or the site, and so before
    releasing their claims: see `lock_reviewer`. An UPDATE of a plain column alone would not wait for a claim."""
    list(get_user_model()._default_manager.select_for_update().filter(pk=user_id).values_list("pk", flat=True))


_OVERLAP_LOCK = 0x6F766C  # the class of PostgreSQL advisory locks that `hold_overlap` takes ("ovl")


def hold_overlap(project_id: int, *, changing: bool = False) -> None:
    """Keep the project's overlap from being applied while this transaction decides from it; `changing`: the
    one applying it (`queue.apply_overlap`), which waits for those deciding and keeps new ones waiting.

    A submit finishes its item when the item has the answers the overlap asks for, and `apply_overlap` finishes
    or reopens items after the overlap changed: without a lock in common, each decided from what the other had
    not committed, and a submit that read the old overlap while the new one was applied left its item ready with
    every answer it needs (no reviewer could claim it, nothing finished it). A PostgreSQL advisory lock on the
    project, until this transaction ends: shared, so that submits never wait for each other, only for an
    overlap being applied. SQLite runs one writer at a time.
    """
    connection = connections[DEFAULT_DB_ALIAS]
    if connection.vendor != "postgresql":
        return
    how = "" if changing else "_shared"
    with connection.cursor() as cursor:  # the second key is an int4: ids 2**31 apart share a lock, harmlessly
        cursor.execute(f"SELECT pg_advisory_xact_lock{how}(%s::integer, %s::integer)",
                       [_OVERLAP_LOCK, project_id & 0x7FFFFFFF])


def lock_item(item_id: int) -> Item | None:
    """Item `item_id` locked for this transaction, with its prediction (not the trace) and that one's version;
    None when it is gone."""
    rows = _LOCKED.run([item_id])
    return _claimed_item(rows[0]) if rows else None


def _candidate_sql(connection, overlap_one: bool, rejected: int):
    q = connection.ops.quote_name
    columns, joins = _claimed_columns(q)
    claims = f"SELECT {{}} FROM {_table(Claim, q)} c WHERE c.{q('item_id')} = i.{q('id')} AND c.{q('expires_at')} > %s"
    if overlap_one:
        # A probe per item the scan passes over costs what the active claims ahead in the queue cost. A hashed
        # set of every active claim (NOT IN) was faster with 300 abandoned ones, but it reads the whole claim
        # table, which keeps every expired claim: it would slow down as a project ages.
        free = f"NOT EXISTS ({claims.format('1')})"
    else:
        free = f"({claims.format('COUNT(*)')}) < %s - i.{q('final_answers')}"
    excluded = f" AND i.{q('id')} NOT IN ({', '.join(['%s'] * rejected)})" if rejected else ""
    if connection.features.supports_order_by_nulls_modifier:
        confidence = f"i.{q('confidence')} ASC NULLS LAST"
    else:
        confidence = f"i.{q('confidence')} IS NULL, i.{q('confidence')} ASC"
    item_id = f"i.{q('id')}"
    sql = (
        f"SELECT {columns} FROM {_table(Item, q)} i {joins}"
        f"WHERE i.{q('project_id')} = %s AND i.{q('status')} = %s AND {_not_answered(q, item_id)} "
        f"AND {free}{excluded} "
        f"ORDER BY {confidence}, i.{q('created_at')} ASC, i.{q('id')} ASC LIMIT 1"
        f"{_lock_suffix(connection, skip_locked=True)}"
    )
    return sql, _claimed_expressions()


_CANDIDATE = _Query(_candidate_sql)


def next_candidate(project, user, status: str, now, rejected: list[int]) -> Item | None:
    """The first item in queue order (`ItemQuerySet.in_queue_order`) that is `status`, unanswered by `user`, has
    fewer active claims than the project's overlap leaves room for, and is not in `rejected`; locked, skipping
    items another transaction holds. The free-slot test ran before the lock: count again (`free_slots`)::

        items = Item.objects.filter(project=project, status=status).exclude(Exists(<user's final answers>))
        active = Claim.objects.filter(item=OuterRef("pk"), expires_at__gt=now)
        items = items.exclude(Exists(active))  # overlap 1; else: Count(active) < overlap - F("final_answers")
        items.exclude(pk__in=rejected).in_queue_order().select_for_update(skip_locked=True, of=("self",))
            .select_related("prediction", "prediction__model_version").defer("prediction__trace").first()
    """
    overlap_one = project.overlap == 1
    params = [project.pk, status, user.pk, *_final_kinds(), _datetime(now)]
    if not overlap_one:
        params.append(project.overlap)
    rows = _CANDIDATE.run([*params, *rejected], overlap_one, len(rejected))
    return _claimed_item(rows[0]) if rows else None


def _free_sql(connection):
    q = connection.ops.quote_name
    sql = (
        f"SELECT CASE WHEN {_not_answered(q, '%s')} THEN 0 ELSE 1 END, "
        f"(SELECT COUNT(*) FROM {_table(Claim, q)} c WHERE c.{q('item_id')} = %s AND c.{q('expires_at')} > %s "
        f"AND c.{q('reviewer_id')} <> %s), "
        f"(SELECT p.{q('overlap')} FROM {_table(Project, q)} p WHERE p.{q('id')} = %s)"
    )
    return sql, []


_FREE = _Query(_free_sql)


def free_slots(item: Item, user, now) -> int:
    """Claims `item` can still take for `user` (0 once they answered it), read afresh with the item locked.

    The overlap is read here too, after the lock, not taken from the request's project: an overlap raised and
    the place it opened claimed after the caller read it (the claim held the item's lock meanwhile) would count
    the new claim against the old overlap, and tell a reviewer whose lease had not ended that it had."""
    answered, taken, overlap = _FREE.run([item.pk, user.pk, *_final_kinds(), item.pk, _datetime(now), user.pk,
                                          item.project_id])[0]
    return 0 if answered else overlap - item.final_answers - taken


def _claim_sql(connection) -> tuple[str, str]:
    q = connection.ops.quote_name
    claim, item = _table(Claim, q), _table(Item, q)
    upsert = (
        f"INSERT INTO {claim} ({q('item_id')}, {q('reviewer_id')}, {q('expires_at')}, {q('created_at')}) "
        f"VALUES (%s, %s, %s, %s) ON CONFLICT ({q('item_id')}, {q('reviewer_id')}) "
        f"DO UPDATE SET {q('expires_at')} = EXCLUDED.{q('expires_at')}"
    )
    mirror = f"UPDATE {item} SET {q('claimed_by_id')} = %s, {q('claim_expires_at')} = %s WHERE {q('id')} = %s"
    return upsert, mirror


_CLAIM_SQL: dict[str, tuple[str, str]] = {}


def claim(item: Item, user, expires, now) -> None:
    """Give `user` a claim on `item` until `expires` (renewing one they hold), and mirror it on the item::

        Claim.objects.bulk_create([Claim(item=item, reviewer=user, expires_at=expires)], update_conflicts=True,
                                  unique_fields=["item", "reviewer"], update_fields=["expires_at"])
        Item.objects.filter(pk=item.pk).update(claimed_by=user, claim_expires_at=expires)
    """
    connection = connections[DEFAULT_DB_ALIAS]
    if connection.vendor not in _CLAIM_SQL:
        _CLAIM_SQL[connection.vendor] = _claim_sql(connection)
    upsert, mirror = _CLAIM_SQL[connection.vendor]
    with connection.cursor() as cursor:
        cursor.execute(upsert, [item.pk, user.pk, _datetime(expires), _datetime(now)])
        cursor.execute(mirror, [user.pk, _datetime(expires), item.pk])
