# What each worker process reports of itself at every beat: whether it leads, whether it
# may (not while its recovery pass is stuck), its supervised parts and its recorder backlog.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_outbox", "0007_recovery"),
    ]

    operations = [
        migrations.AddField(
            model_name="heartbeat",
            name="backlog",
            field=models.PositiveIntegerField(
                default=0, help_text="Outcomes its recorder had not saved yet at the last beat."
            ),
        ),
        migrations.AddField(
            model_name="heartbeat",
            name="can_lead",
            field=models.BooleanField(
                default=True, help_text="False while its recovery pass is stuck: another leads."
            ),
        ),
        migrations.AddField(
            model_name="heartbeat",
            name="leader",
            field=models.BooleanField(
                default=False, help_text="Whether it ran the recovery passes at its last beat."
            ),
        ),
        migrations.AddField(
            model_name="heartbeat",
            name="parts",
            field=models.JSONField(
                blank=True, default=dict, help_text="Its supervised parts at the last beat."
            ),
        ),
    ]
