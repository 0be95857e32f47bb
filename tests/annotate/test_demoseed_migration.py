"""Migration 0015_demoseed: demo projects created before it count as created by the demo."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("annotate", "0014_item_refusal")]
AFTER = [("annotate", "0015_demoseed")]


def _migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor


@pytest.mark.django_db(transaction=True)
def test_existing_demo_projects_are_marked_seeded_and_others_are_not() -> None:
    old = _migrate(BEFORE).loader.project_state(BEFORE).apps.get_model("annotate", "Project")
    for slug in ("demo-decision-rank", "demo-agreement", "outages"):
        old.objects.create(slug=slug, name=slug, tool="decision", mode="rank")

    try:
        seeds = _migrate(AFTER).loader.project_state(AFTER).apps.get_model("annotate", "DemoSeed")
        assert set(seeds.objects.values_list("slug", flat=True)) == {"demo-decision-rank", "demo-agreement"}
    finally:
        # Leave the database as the other tests expect it: every later migration applied again.
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
