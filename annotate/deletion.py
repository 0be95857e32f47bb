"""Deleting a project with everything in it, at any size: a few set-based statements in one transaction.

Django's own cascade (what the admin's Delete ran) loads every prediction of the project into memory, lists
every row on its confirmation page, and sends the SET NULL of a big project's items as one statement with
more parameters than PostgreSQL takes when values are bound on the server: a project of about 30,000 items or
more could not be deleted. Here each model's doomed rows are one subquery of their parents' rows, found by
walking the foreign keys as Django's collector does, so the same dozen statements delete 10 items or 100,000,
and the database ends as Django's cascade leaves it (`tests/annotate/test_deletion.py` checks both against
each other). The files of the project's model versions, exports, jobs and uploads go once the rows have
committed: a deletion that fails keeps them. `delete_rows` does the same for any set of rows (a project's
refused items), where the collector would load each row, inputs and all, and `run_deletion` deletes the items an
admin confirmed on the delete page, on a worker, a locked batch at a time with its progress.
"""

from __future__ import annotations

import graphlib
import json
import logging
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce
from operator import or_

from django.apps import apps
from django.db import connection, models, transaction
from django.db.models import Count, Q
from django.db.models.expressions import RawSQL
from django.template.defaultfilters import pluralize
from django.utils import timezone

from annotate import storage
from annotate.models import (
    Claim,
    DeletionState,
    ExperienceUpload,
    Export,
    ExportState,
    Item,
    ItemDeletion,
    ItemImport,
    ModelUpload,
    ModelVersion,
    Project,
)

logger = logging.getLogger(__name__)

# Each artifact kind and the model whose rows name its directories (`storage.relative_name(kind, pk)`).
_ARTIFACTS = {"models": ModelVersion, "exports": Export, "uploads": ExperienceUpload, "model-uploads": ModelUpload,
              "imports": ItemImport}


class ProjectBusy(Exception):
    """Work that reads or writes the project is still waiting or running (`reasons`); nothing was deleted (of
    items deleted in batches, none after it started)."""

    def __init__(self, project: Project, reasons: list[str], *, what: str = ""):
        super().__init__(f"{what or project.name} cannot be deleted yet: {'; '.join(reasons)}.")
        self.reasons = reasons


class CountChanged(Exception):
    """The filters no longer match the number of items the caller counted; nothing was deleted."""

    def __init__(self, found: int, expected: int):
        super().__init__(f"the filters now match {found:,} of the items counted before, not {expected:,}")
        self.found, self.expected = found, expected


class AlreadyOver(Exception):
    """The deletion asked to stop has already ended (`state`); nothing changed."""

    def __init__(self, row: ItemDeletion):
        super().__init__(f"this deletion has already ended ({row.get_state_display().lower()})")
        self.state = row.state


class _Stopped(Exception):
    """Raised inside a batch's transaction when its deletion was stopped meanwhile: the batch is rolled back."""


@dataclass(frozen=True)
class Deleted:
    """What a deletion removed: rows per model, most first, and how many artifact directories."""

    rows: dict[type[models.Model], int]
    directories: int

    def __str__(self) -> str:
        return counted(self.rows)


def blockers(project: Project) -> list[str]:
    """What must finish (or be cancelled) before `project` can go: a worker would otherwise write into it."""
    found = [f"training job {job.pk} is {'waiting' if job.state == 'PENDING' else 'running'} "
             "(cancel it on the training page)" for job in project.unfinished_training_jobs()]
    running = Export.objects.filter(project=project, state=ExportState.RUNNING,  # a stalled run writes nothing
                                    heartbeat_at__gt=timezone.now() - Export.LEASE)
    found += [f"export {pk} is being written" for pk in running.order_by("pk").values_list("pk", flat=True)]
    return found


def in_progress(project: Project, items: models.QuerySet | None = None) -> str:
    """Who is labelling in `project` (or `items` of it) right now, claims not yet expired, for the confirmation;
    "" if nobody."""
    active = Claim.objects.filter(item__project=project, expires_at__gt=timezone.now())
    if items is not None:
        active = active.filter(item__in=items.values("pk"))
    counts = active.aggregate(items=Count("item", distinct=True), reviewers=Count("reviewer", distinct=True))
    if not counts["items"]:
        return ""
    reviewers, items = counts["reviewers"], counts["items"]
    return (f"{reviewers:,} reviewer{pluralize(reviewers)} {'is' if reviewers == 1 else 'are'} labelling "
            f"{items:,} item{pluralize(items)} right now: what they have not submitted yet is lost.")


def summary(project: Project) -> dict[type[models.Model], int]:
    """Rows that would go with `project`, per model, most first; the project itself left out (one count each)."""
    plan = _plan(_only(project))
    return _most_first({model: plan.doomed[model].count() for model in plan.order if model is not Project}, plan)


def name(model: type[models.Model], count: int = 2) -> str:
    """How `count` rows of `model` are named for people: "answer revisions", "1 export"."""
    return str(model._meta.verbose_name if count == 1 else model._meta.verbose_name_plural)


def counted(rows: dict[type[models.Model], int]) -> str:
    """"100,000 items, 1 model version": each model's count with its name, models with no rows left out."""
    return ", ".join(f"{count:,} {name(model, count)}" for model, count in rows.items() if count) or "nothing else"


def delete_project(project: Project) -> Deleted:
    """Delete `project`, every row that cascades from it, and (after commit) its artifact directories.

    Raises `ProjectBusy` (nothing deleted) while `blockers` names something. Deleting a project already gone
    deletes nothing, so a repeated request is harmless.
    """
    with transaction.atomic():
        # The items before the project: a submit in flight holds its item and, as it commits, checks its
        # answer's project key (FOR KEY SHARE); with the project locked first, each would wait for the other.
        _lock_items(project)
        # Then the project, which stops new rows pointing at it (a training job launched now) until this ends.
        if not Project.objects.lock(project.pk):
            return Deleted({}, 0)
        busy = blockers(project)  # read after the lock: a job launched before it is seen here
        if busy:
            raise ProjectBusy(project, busy)
        plan = _plan(_only(project))
        rows, directories = _execute(plan)
    rows.pop(Project)
    return Deleted(_most_first(rows, plan), directories)


def matching(project: Project, filters) -> tuple[int, models.QuerySet]:
    """The newest item of `project` that item-list `filters` match, and the matching items up to it: what a
    confirmation counts and `delete_matching` then deletes, so items imported in between stay."""
    found = filters.apply(project.items.all())
    if filters.terms:
        # A search is the one costly filter (0.25 s at 100,000 items): run it once and count among its matches.
        ids = list(found.values_list("pk", flat=True))
        return max(ids, default=0), by_pks(Item, ids)
    # Indexed filters: counting through them beats sending every id in each count (1.5 s at 100,000 items).
    through = found.aggregate(newest=models.Max("pk"))["newest"] or 0
    return through, found.filter(pk__lte=through)


def count_matching(project: Project, narrow: Callable[[models.QuerySet], models.QuerySet], *, through: int,
                   expected: int) -> list[int]:
    """The ids of the items of `project` up to id `through` that `narrow` keeps, if they are still `expected`
    many: what a deletion confirmed on a page that counted them may delete, and nothing else.

    Raises `CountChanged` when the count differs: nobody deletes more, or other, items than they were shown.
    Raises `ProjectBusy` while `blockers` names something: a training job freezes the ids of the answers it
    trains on, and an export reads them.
    """
    busy = blockers(project)
    if busy:
        raise ProjectBusy(project, busy, what=_items_of(project))
    ids = list(narrow(project.items.filter(pk__lte=through)).values_list("pk", flat=True))
    if len(ids) != expected:
        raise CountChanged(len(ids), expected)
    return ids


def delete_matching(project: Project, narrow: Callable[[models.QuerySet], models.QuerySet], *, through: int,
                    expected: int, batch: int = 5000) -> dict[type[models.Model], int]:
    """Delete the items that `count_matching` finds, here and now (the Django admin's deletion); the rows deleted per
    model, most first. `delete_among` says how; `queue_matching` has a worker do it instead."""
    ids = count_matching(project, narrow, through=through, expected=expected)
    totals = Counter({Item: 0})
    delete_among(project, ids, narrow, batch=batch, on_batch=totals.update)
    return _most_first(dict(totals), _plan(Item._base_manager.none()))


def delete_among(project: Project, ids: list[int], narrow: Callable[[models.QuerySet], models.QuerySet], *,
                 on_batch: Callable[[dict[type[models.Model], int]], None], batch: int = 5000) -> None:
    """Delete the items of `project` among `ids` that `narrow` keeps, in locked batches; `on_batch` gets each
    batch's rows per model inside the batch's transaction (so progress written there commits with the rows).

    Each batch is matched again under its lock, among its ids only: an item that stopped matching stays, and a
    search over the whole project again for each batch took 0.25 s a batch at 100,000 items. Each statement
    carries only its batch's ids: the whole list in each took 12.5 s for 90,000 items against 7.0 s, with their
    90,000 predictions and 36,000 answers (measured 2026-12-03). Before each batch the project is locked and
    `blockers` read again, so a training job launched midway stops the deletion there (`ProjectBusy`).
    """
    for start in range(0, len(ids), batch):
        _delete_batches(narrow(by_pks(Item, ids[start:start + batch])), batch, on_batch, project=project)


def queue_matching(project: Project, filters, *, through: int, expected: int, user) -> ItemDeletion | None:
    """Store the items that `count_matching` finds for item-list `filters` and queue their deletion
    by a worker (`run_deletion`); the row shows how it goes (None when no item matches: nothing to queue).
    Raises as `count_matching` does, and queues nothing."""
    from annotate import tasks

    ids = count_matching(project, filters.apply, through=through, expected=expected)
    if not ids:
        return None
    row = ItemDeletion.objects.create(project=project, requested_by=user, filters=filters.given, item_ids=ids,
                                      total=len(ids))
    tasks.delete_matching_items.delay_on_commit(row.pk)
    return row


def run_deletion(deletion_id: int, batch: int = 5000) -> str:
    """Delete the items of deletion `deletion_id` that still match its filters; its state afterwards.

    Safe to run twice, even at once: a finished deletion is left alone, the batches lock their items, and each
    adds its rows to the row's counts under the row's lock. A run cut short goes on where its last batch ended.
    """
    from annotate import itemlist

    with transaction.atomic():
        row = (ItemDeletion.objects.select_for_update(of=("self",)).select_related("project")
               .filter(pk=deletion_id).first())
        if row is None or row.is_final:
            return "skipped"
        ItemDeletion.objects.filter(pk=row.pk).update(state=DeletionState.RUNNING, heartbeat_at=timezone.now())
    try:
        filters = itemlist.ItemFilters.parse(row.project, row.filters)
    except itemlist.InvalidFilters as exc:
        return _finish(row, DeletionState.FAILED, f"Its filters no longer apply ({exc}); nothing was deleted.")

    def written(rows: dict[type[models.Model], int]) -> None:
        locked = ItemDeletion.objects.select_for_update().only("deleted", "state").filter(pk=row.pk).first()
        if locked is None:  # removed meanwhile (its project deleted): nothing to count into
            return
        if locked.is_final:  # stopped by someone (`stop`) while this batch ran: undo it, the counts stay true
            raise _Stopped
        merged = Counter(locked.deleted) + Counter({model._meta.label_lower: n for model, n in rows.items() if n})
        ItemDeletion.objects.filter(pk=row.pk).update(deleted=dict(merged), heartbeat_at=timezone.now(),
                                                      deleted_items=merged[Item._meta.label_lower])

    try:
        delete_among(row.project, row.item_ids, filters.apply, batch=batch, on_batch=written)
    except ProjectBusy as exc:
        return _finish(row, DeletionState.STOPPED, f"Stopped: {'; '.join(exc.reasons)}.")
    except _Stopped:
        return DeletionState.STOPPED
    return _finish(row, DeletionState.SUCCEEDED)


def stop(deletion_id: int, *, by) -> ItemDeletion:
    """Stop deletion `deletion_id` now: it is STOPPED at once, and a batch a worker is deleting is rolled back
    when it comes to write its progress, so what the row counts is what went. Items deleted stay deleted.

    Raises `AlreadyOver` when it has ended; `ItemDeletion.DoesNotExist` when it is gone.
    """
    with transaction.atomic():
        row = ItemDeletion.objects.select_for_update().defer("item_ids").get(pk=deletion_id)
        if row.is_final:
            raise AlreadyOver(row)
        row.state, row.finished_at = DeletionState.STOPPED, timezone.now()
        row.reason = f"Stopped by {by}" + ("." if row.deleted_items else " before any item was deleted.")
        row.save(update_fields=["state", "finished_at", "reason"])
    return row


def deleted_rows(row: ItemDeletion) -> dict[type[models.Model], int]:
    """The rows deletion `row` has deleted so far, per model, most first."""
    rows = {}
    for label, count in row.deleted.items():
        try:
            rows[apps.get_model(label)] = count
        except LookupError:  # a model removed since: its rows were deleted all the same
            continue
    return _most_first(rows, _plan(Item._base_manager.none()))


def _finish(row: ItemDeletion, state: str, reason: str = "") -> str:
    ItemDeletion.objects.filter(pk=row.pk, state=DeletionState.RUNNING).update(
        state=state, reason=reason, finished_at=timezone.now())
    return state


def _items_of(project: Project) -> str:
    return f"Items of {project.name}"


def delete_items(items: models.QuerySet, batch: int = 5000) -> dict[type[models.Model], int]:
    """Delete `items` (a filtered queryset of items) and what cascades from them, in locked batches; the rows
    deleted per model, most first.

    Each batch is locked and matched again first, so an item that stops matching meanwhile (a worker made it
    ready, a reviewer finished it) stays, and a submit in flight holds its item until it commits: its answer
    then goes with the item, and a later one finds the item gone.
    """
    totals = Counter({Item: 0})
    _delete_batches(items, batch, totals.update)
    return _most_first(dict(totals), _plan(items))


def _delete_batches(items: models.QuerySet, batch: int, on_batch: Callable[[dict[type[models.Model], int]], None],
                    *, project: Project | None = None) -> None:
    """`delete_items`, giving each batch's rows to `on_batch` in its transaction; with `project`, each batch
    first locks it and checks `blockers`."""
    while True:
        with transaction.atomic():
            ids = list(items.select_for_update(of=("self",)).order_by("id").values_list("id", flat=True)[:batch])
            if not ids:
                return
            if project is not None:
                # Items first, then the project (as `delete_project` does): a job's launch waits for this batch.
                Project.objects.lock(project.pk)
                busy = blockers(project)
                if busy:
                    raise ProjectBusy(project, busy, what=_items_of(project))
            on_batch(delete_rows(by_pks(Item, ids)))


def delete_rows(rows: models.QuerySet) -> dict[type[models.Model], int]:
    """Delete `rows` and whatever cascades from them, set-based, as Django's cascade would; returns rows per model.

    Run it in a transaction that has locked `rows` (and keep `rows` to a fixed set, such as primary keys): each
    statement evaluates them again. Artifact directories of deleted rows go once the transaction commits.
    """
    with transaction.atomic():
        plan = _plan(rows)
        deleted, _ = _execute(plan)
    return _most_first(deleted, plan)


class InUse(Exception):
    """Work still reads or writes the row (`in_use` on its model); nothing was deleted."""


def delete_record(row: models.Model) -> Deleted:
    """Delete one export, model version, training job, items import or item deletion (the Django admin's Delete),
    with the rows that cascade from it and, once committed, its files, as a project's deletion does.

    Raises `InUse` (nothing deleted) while the row's `in_use` names work that still reads or writes it; the row
    is locked first, as the worker locks it to take it. A row already gone deletes nothing.
    """
    model = type(row)
    with transaction.atomic():
        locked = model._base_manager.select_for_update().filter(pk=row.pk).first()
        if locked is None:
            return Deleted({}, 0)
        busy = locked.in_use()
        if busy:
            name = str(locked)
            raise InUse(f"{name[:1].upper()}{name[1:]} cannot be deleted yet: {'; '.join(busy)}.")
        plan = _plan(by_pks(model, [row.pk]))
        rows, directories = _execute(plan)
    return Deleted(_most_first(rows, plan), directories)


def rows_summary(rows: models.QuerySet) -> dict[type[models.Model], int]:
    """Rows that would go with `rows`, per model, most first (`rows` among them; one count each)."""
    plan = _plan(rows)
    return _most_first({model: plan.doomed[model].count() for model in plan.order}, plan)


def by_pks(model: type[models.Model], pks: list[int]) -> models.QuerySet:
    """`model`'s rows with these primary keys, as a fixed set `delete_rows` can take.

    On PostgreSQL the keys travel as one array: an IN list of 5,000 parameters, repeated in each statement of a
    deletion, costs more to build and plan than deleting the rows (removing 50,000 refused items took 7.7 s so,
    2.2 s with the array; measured 2026-12-03).
    """
    if connection.vendor == "postgresql":
        return model._base_manager.filter(pk__in=RawSQL("SELECT unnest(%s::bigint[])", [list(pks)]))
    if connection.vendor == "sqlite":  # one JSON text: SQLite takes 32,766 parameters a statement (Debian 250,000)
        return model._base_manager.filter(pk__in=RawSQL("SELECT value FROM json_each(%s)", [json.dumps(list(pks))]))
    return model._base_manager.filter(pk__in=pks)


def _only(project: Project) -> models.QuerySet:
    return Project._base_manager.filter(pk=project.pk)


def _execute(plan: _Plan) -> tuple[dict[type[models.Model], int], int]:
    """Run `plan`: pointers from rows that stay set to NULL, then the rows, children first; files after commit."""
    directories = [storage.relative_name(kind, pk) for kind, model in _artifact_models().items()
                   if model in plan.doomed for pk in plan.doomed[model].values_list("pk", flat=True)]
    for field, pointing in plan.set_null:
        pointing.update(**{field.name: None})
    rows = {}
    for model in reversed(plan.order):  # children first: their subqueries still find their parents
        rows[model] = plan.doomed[model]._raw_delete(plan.doomed[model].db)
    if directories:
        transaction.on_commit(lambda: _remove(directories))
    return rows, len(directories)


@dataclass
class _Plan:
    order: list[type[models.Model]]  # parents before children
    doomed: dict[type[models.Model], models.QuerySet]  # each model's rows that go, as one subquery
    set_null: list[tuple[models.ForeignKey, models.QuerySet]]  # pointers into doomed rows from rows that stay


def _plan(roots: models.QuerySet) -> _Plan:
    """What deleting `roots` takes: each model whose rows cascade from them, with those rows as one subquery."""
    root = roots.model
    cascades: dict[type[models.Model], list[models.ForeignKey]] = {}  # child -> its CASCADE keys into doomed
    reached, frontier = {root: None}, [root]  # a dict, not a set: the same order on every run
    while frontier:
        parent = frontier.pop()
        for field in _keys_to(parent):
            if field.remote_field.on_delete is models.CASCADE:
                cascades.setdefault(field.model, []).append(field)
                if field.model not in reached:
                    reached[field.model] = None
                    frontier.append(field.model)
    graph = {model: {field.remote_field.model for field in cascades.get(model, [])} for model in reached}
    order = list(graphlib.TopologicalSorter(graph).static_order())  # a CASCADE cycle raises CycleError
    doomed = {root: roots}
    for model in order[1:]:
        keys = [Q(**{f"{field.attname}__in": doomed[field.remote_field.model].values(field.target_field.attname)})
                for field in cascades[model]]
        doomed[model] = model._base_manager.filter(reduce(or_, keys))
    set_null = []
    for target in order:
        for field in _keys_to(target):
            on_delete = field.remote_field.on_delete
            if on_delete in (models.CASCADE, models.DO_NOTHING):
                continue
            if on_delete is not models.SET_NULL:  # PROTECT, RESTRICT, SET_DEFAULT, SET(): not used by any model
                raise NotImplementedError(f"{field} uses {on_delete.__name__}; a set-based deletion handles "
                                          "CASCADE, SET_NULL and DO_NOTHING only")
            rows = field.model._base_manager.filter(
                **{f"{field.attname}__in": doomed[target].values(field.target_field.attname)})
            if field.model in doomed:
                rows = rows.exclude(pk__in=doomed[field.model].values("pk"))
            set_null.append((field, rows))
    return _Plan(order, doomed, set_null)


def _keys_to(model: type[models.Model]) -> list[models.ForeignKey]:
    """Every foreign key (and one-to-one key) of any installed model, many-to-many tables included, to `model`."""
    return [field for other in apps.get_models(include_auto_created=True) if not other._meta.proxy
            for field in other._meta.local_concrete_fields
            if field.is_relation and (field.many_to_one or field.one_to_one) and field.remote_field.model is model]


def _lock_items(project: Project) -> None:
    """Lock the project's items before reading anything: a reviewer's submit holds its item's lock while it
    writes, so the deletion waits for submits in flight and then deletes their answers too, and a later submit
    or claim waits for the deletion and finds its item gone. Deleting the items under a submit instead would
    leave its answer pointing at nothing, and the deletion would fail when it commits.

    SQLite writes one transaction at a time, so there is nothing to lock there.
    """
    if not connection.features.has_select_for_update:
        return
    table, column = Item._meta.db_table, Item._meta.get_field("project").column
    name = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM (SELECT 1 FROM {name(table)} WHERE {name(column)} = %s FOR UPDATE) "
                       "AS locked", [project.pk])


def _most_first(rows: dict[type[models.Model], int], plan: _Plan) -> dict[type[models.Model], int]:
    """Most rows first; of equal counts, parents before children ("12 items, 12 predictions")."""
    return dict(sorted(rows.items(), key=lambda row: (-row[1], plan.order.index(row[0]))))


def _artifact_models() -> dict[str, type[models.Model]]:
    found = dict(_ARTIFACTS)
    if apps.is_installed("trainingjobs"):
        found["jobs"] = apps.get_model("trainingjobs", "TrainingJob")
    return found


def _remove(directories: list[str]) -> None:
    for name in directories:
        try:
            shutil.rmtree(storage.resolve(name))
        except FileNotFoundError:
            pass
        except OSError:  # the rows are gone already: a directory left behind is logged, not fatal
            logger.exception("could not remove artifact directory %s", name)
