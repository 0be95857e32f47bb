"""Migration 0002_adjudication: `Item.disagreement` is backfilled for items answered before it existed."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("annotate", "0003_experience_upload")]
AFTER = [("annotate", "0002_adjudication")]


@pytest.mark.django_db(transaction=True)
def test_backfill_flags_items_whose_reviewers_disagree(django_user_model) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    Project, Item, Answer = (old.get_model("annotate", name) for name in ("Project", "Item", "Answer"))
    users = [django_user_model.objects.create_user(name) for name in ("rita", "sam")]
    project = Project.objects.create(slug="p", name="p", tool="decision", mode="rank", overlap=2)
    inputs = {"hypotheses": [{"id": "db", "text": "a"}, {"id": "dns", "text": "b"}]}
    split, agreed = (Item.objects.create(project=project, inputs=inputs, status="done") for _ in range(2))
    for item, targets in ((split, ("db", "dns")), (agreed, ("db", 0))):
        for user, target in zip(users, targets, strict=True):
            Answer.objects.create(item=item, reviewer_id=user.pk, kind="target", target=target, source="s")

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    try:
        executor.migrate(AFTER)
        new = executor.loader.project_state(AFTER).apps.get_model("annotate", "Item")
        assert dict(new.objects.values_list("pk", "disagreement")) == {split.pk: True, agreed.pk: False}
    finally:
        # Leave the database as the other tests expect it: every later migration applied again.
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
