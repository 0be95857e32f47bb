from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('trainingjobs', '0002_frozen_records'),
    ]

    operations = [
        migrations.AddField(
            model_name='trainingjob',
            name='held_out_adjudications',
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name='trainingjob',
            name='train_adjudications',
            field=models.JSONField(blank=True, default=list),
        ),
    ]
