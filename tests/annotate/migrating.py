"""Testing a data migration: the database taken back to before it, then forward, then left as the others expect."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.apps.registry import Apps
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

Targets = list[tuple[str, str]]


def _migrate(targets: Targets) -> Apps:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@contextmanager
def back_to(before: Targets) -> Iterator[tuple[Apps, Callable[[Targets], Apps]]]:
    """Migrate back to `before`; yields its models' apps and `forward(targets)`, which migrates there and returns
    their apps. Every migration is applied again on the way out. Needs `django_db(transaction=True)`."""
    try:
        yield _migrate(before), _migrate
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
