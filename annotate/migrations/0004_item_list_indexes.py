"""Indexes of the item list (keyset pages, reviewer filter, full-text search) and the calibrated confidence.

The full-text index exists on PostgreSQL only: a GIN index over the string values of `inputs`
(`jsonb_to_tsvector('simple', inputs, '["string"]')`), the exact expression `annotate.itemlist` searches with.
SQLite has no such index; the item list falls back to a substring match there.
"""

from django.db import migrations, models

SEARCH_INDEX = "item_inputs_search"
SEARCH_SQL = (
    f"CREATE INDEX IF NOT EXISTS {SEARCH_INDEX} ON annotate_item USING gin "
    "(jsonb_to_tsvector('simple'::regconfig, inputs, '[\"string\"]'::jsonb))"
)


def create_search_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(SEARCH_SQL)


def drop_search_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {SEARCH_INDEX}")


def split_calibrated(apps, schema_editor):
    """Predictions stored before this migration kept a calibrated receipt's confidence as `confidence`."""
    Prediction = apps.get_model("annotate", "Prediction")
    for prediction in Prediction.objects.filter(receipt__calibration__fitted=True).only("receipt", "confidence"):
        receipt = prediction.receipt
        chosen = next((c for c in receipt.get("candidates", []) if isinstance(c, dict)
                       and c.get("id") == receipt.get("selected_id")), {})
        raw = chosen.get("probability")
        prediction.calibrated_confidence = prediction.confidence
        prediction.confidence = float(raw) if isinstance(raw, (int, float)) else prediction.confidence
        prediction.save(update_fields=["confidence", "calibrated_confidence"])


class Migration(migrations.Migration):

    dependencies = [
        ("annotate", "0002_adjudication"),
    ]

    operations = [
        migrations.AddField(
            model_name="prediction",
            name="calibrated_confidence",
            field=models.FloatField(
                blank=True, null=True,
                help_text="The calibrated confidence, when the model had a fitted (and fresh) calibration; else empty.",
            ),
        ),
        migrations.AlterField(
            model_name="prediction",
            name="confidence",
            field=models.FloatField(blank=True, null=True, help_text="The model's raw (uncalibrated) confidence."),
        ),
        migrations.RunPython(split_calibrated, migrations.RunPython.noop, elidable=True),
        migrations.AddIndex(
            model_name="item",
            index=models.Index(fields=["project", "id"], name="item_list_id"),
        ),
        migrations.AddIndex(
            model_name="item",
            index=models.Index(fields=["project", "status", "id"], name="item_list_status"),
        ),
        migrations.AddIndex(
            model_name="item",
            index=models.Index(fields=["project", "confidence", "id"], name="item_list_confidence"),
        ),
        migrations.AddIndex(
            model_name="answer",
            index=models.Index(fields=["reviewer", "item"], name="answer_reviewer_item"),
        ),
        migrations.RunPython(create_search_index, drop_search_index),
    ]
