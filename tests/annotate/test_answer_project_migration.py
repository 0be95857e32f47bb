"""Migration 0007_answer_project: answers given before it get their item's project."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("annotate", "0006_model_upload")]
AFTER = [("annotate", "0007_answer_project")]


def _migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor


@pytest.mark.django_db(transaction=True)
def test_backfill_gives_every_answer_its_items_project(django_user_model) -> None:
    old = _migrate(BEFORE).loader.project_state(BEFORE).apps
    Project, Item, Answer = (old.get_model("annotate", name) for name in ("Project", "Item", "Answer"))
    rita = django_user_model.objects.create_user("rita")
    projects = [Project.objects.create(slug=slug, name=slug, tool="decision", mode="rank") for slug in "ab"]
    for project in projects:
        for kind in ("target", "draft"):
            item = Item.objects.create(project=project, inputs={}, status="ready")
            Answer.objects.create(item=item, reviewer_id=rita.pk, kind=kind, target="db", source="s")

    try:
        new = _migrate(AFTER).loader.project_state(AFTER).apps.get_model("annotate", "Answer")
        assert {(a.item.project_id, a.project_id) for a in new.objects.select_related("item")} == {
            (p.pk, p.pk) for p in projects}
        assert new.objects.count() == 4
    finally:
        # Leave the database as the other tests expect it: every later migration applied again.
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
