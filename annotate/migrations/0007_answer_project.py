"""`Answer.project`: the item's project on each answer, so the reviewer's latest answer in a project is one probe.

Added nullable, filled from the items in one statement, then made required and indexed.
"""

import django.db.models.deletion
from django.db import migrations, models


def fill(apps, schema_editor):
    Answer = apps.get_model("annotate", "Answer")
    Item = apps.get_model("annotate", "Item")
    Answer.objects.update(project_id=models.Subquery(Item.objects.filter(pk=models.OuterRef("item_id"))
                                                     .values("project_id")[:1]))


class Migration(migrations.Migration):

    dependencies = [
        ("annotate", "0006_model_upload"),
    ]

    operations = [
        migrations.AddField(
            model_name="answer",
            name="project",
            field=models.ForeignKey(null=True, editable=False, db_index=False,
                                    on_delete=django.db.models.deletion.CASCADE, related_name="+",
                                    to="annotate.project"),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop, elidable=True),
        migrations.AlterField(
            model_name="answer",
            name="project",
            field=models.ForeignKey(editable=False, db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                    related_name="+", to="annotate.project"),
        ),
        migrations.AddIndex(
            model_name="answer",
            index=models.Index(fields=["project", "reviewer", "-updated_at", "-id"], name="answer_latest_final"),
        ),
    ]
