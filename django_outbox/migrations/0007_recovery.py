# Worker heartbeats (claims of a process that stopped beating are taken back at once)
# and the durable flag of give-ups whose delivery_failed signal is not yet sent.

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_outbox", "0006_hardening")]

    operations = [
        migrations.CreateModel(
            name="Heartbeat",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "name",
                    models.CharField(help_text="host:pid:random token", max_length=80, unique=True),
                ),
                ("started_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "beat_at",
                    models.DateTimeField(help_text="The database's clock at the last beat."),
                ),
            ],
            options={"ordering": ("id",)},
        ),
        migrations.AddField(
            model_name="delivery",
            name="failed_signal_pending",
            field=models.BooleanField(
                default=False,
                help_text="Given up on, and its delivery_failed signal not yet known to be sent.",
            ),
        ),
        migrations.AddIndex(
            model_name="delivery",
            index=models.Index(
                condition=models.Q(("failed_signal_pending", True)),
                fields=["finished_at"],
                name="django_outbox_failed_signal",
            ),
        ),
    ]
