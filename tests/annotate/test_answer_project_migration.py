"""Migration 0007_answer_project: answers given before it get their item's project."""

from __future__ import annotations

import pytest

from tests.annotate import migrating

BEFORE = [("annotate", "0006_model_upload")]
AFTER = [("annotate", "0007_answer_project")]


@pytest.mark.django_db(transaction=True)
def test_backfill_gives_every_answer_its_items_project(django_user_model) -> None:
    with migrating.back_to(BEFORE) as (old, forward):
        Project, Item, Answer = (old.get_model("annotate", name) for name in ("Project", "Item", "Answer"))
        rita = django_user_model.objects.create_user("rita")
        projects = [Project.objects.create(slug=slug, name=slug, tool="decision", mode="rank") for slug in "ab"]
        for project in projects:
            for kind in ("target", "draft"):
                item = Item.objects.create(project=project, inputs={}, status="ready")
                Answer.objects.create(item=item, reviewer_id=rita.pk, kind=kind, target="db", source="s")

        new = forward(AFTER).get_model("annotate", "Answer")

        assert {(a.item.project_id, a.project_id) for a in new.objects.select_related("item")} == {
            (p.pk, p.pk) for p in projects}
        assert new.objects.count() == 4
