"""Migration 0021_item_search_words: items imported before it are found by their stored words, and it undoes."""

from __future__ import annotations

import pytest
from django.db import connection

from tests.annotate import migrating

BEFORE = [("annotate", "0020_admin_typing")]
AFTER = [("annotate", "0021_item_search_words")]


def _indexes() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'annotate_item'")
        return {row[0] for row in cursor.fetchall()}


def _found(word: str) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM annotate_item WHERE search_words @@ to_tsquery('simple', %s) ORDER BY id",
                       [f"{word}:*"])
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_items_from_before_get_their_words_and_going_back_restores_the_old_index() -> None:
    with migrating.back_to(BEFORE) as (old, forward):
        Project, Item = (old.get_model("annotate", name) for name in ("Project", "Item"))
        assert "item_inputs_search" in _indexes()
        project = Project.objects.create(slug="p", name="p", tool="decision", mode="rank")
        lagged, expired = (Item.objects.create(project=project, inputs={"question": text}, status="ready")
                           for text in ("Replication lagged", "Certificates expired"))

        forward(AFTER)

        assert _found("replic") == [lagged.pk]
        assert _found("certificates") == [expired.pk]
        assert "item_search_words" in _indexes() and "item_inputs_search" not in _indexes()

        forward(BEFORE)

        assert "item_inputs_search" in _indexes() and "item_search_words" not in _indexes()
        with connection.cursor() as cursor:
            cursor.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'annotate_item'")
            assert "search_words" not in {row[0] for row in cursor.fetchall()}
