"""The words of an item's inputs, stored beside them on PostgreSQL, so that a search never recomputes them.

Migration 0004 indexed the expression `jsonb_to_tsvector('simple', inputs, '["string"]')`. The index answers a
search when the planner reads it, but PostgreSQL guesses that a word-prefix query matches a small share of items
(1-2% here) whatever the word, so for a rare word it walked the items in the page's order and filtered each
one, computing its words afresh: 30 us an item, 3 s for a search with no match at 100,000 items. `search_words`
is a generated column holding those words (PostgreSQL computes it when `inputs` is written), with the GIN index
on it: a search that filters every item reads 0.4 KB a row instead of parsing its JSON (0.14 s for 200,000 items
on the development machine). The item list also reads a search's matches through the index first now
(`annotate.itemlist.page`).

The column exists on PostgreSQL only and is not a field of `Item`: the ORM never reads or writes it (the item
pages and the claim do not carry its 0.4 KB a row), and `annotate.itemlist` names it in the search alone.
Adding it rewrites the table (about 20 s for 300,000 items here). SQLite has neither column nor index; the item
list matches substrings there.
"""

from django.db import migrations

COLUMN = "search_words"
INDEX = "item_search_words"
OLD_INDEX = "item_inputs_search"
WORDS = "jsonb_to_tsvector('simple'::regconfig, inputs, '[\"string\"]'::jsonb)"


def add_search_words(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        f"ALTER TABLE annotate_item ADD COLUMN IF NOT EXISTS {COLUMN} tsvector GENERATED ALWAYS AS ({WORDS}) STORED"
    )
    schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {INDEX} ON annotate_item USING gin ({COLUMN})")
    schema_editor.execute(f"DROP INDEX IF EXISTS {OLD_INDEX}")


def drop_search_words(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {OLD_INDEX} ON annotate_item USING gin ({WORDS})")
    schema_editor.execute(f"ALTER TABLE annotate_item DROP COLUMN IF EXISTS {COLUMN}")  # and its index


class Migration(migrations.Migration):

    dependencies = [
        ("annotate", "0020_admin_typing"),
    ]

    operations = [
        migrations.RunPython(add_search_words, drop_search_words),
    ]
