"""Migration 0015_demoseed: demo projects created before it count as created by the demo."""

from __future__ import annotations

import pytest

from tests.annotate import migrating

BEFORE = [("annotate", "0014_item_refusal")]
AFTER = [("annotate", "0015_demoseed")]


@pytest.mark.django_db(transaction=True)
def test_existing_demo_projects_are_marked_seeded_and_others_are_not() -> None:
    with migrating.back_to(BEFORE) as (old, forward):
        for slug in ("demo-decision-rank", "demo-agreement", "outages"):
            old.get_model("annotate", "Project").objects.create(slug=slug, name=slug, tool="decision", mode="rank")

        seeds = forward(AFTER).get_model("annotate", "DemoSeed")

        assert set(seeds.objects.values_list("slug", flat=True)) == {"demo-decision-rank", "demo-agreement"}
