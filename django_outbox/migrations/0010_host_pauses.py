# Why a host fails (its latest failure's status and error, for the admin, `outbox status
# --host` and the host_unavailable signal), and hosts an operator paused.

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_outbox", "0009_webhook_endpoints"),
    ]

    operations = [
        migrations.CreateModel(
            name="HostPause",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=255, unique=True)),
                ("reason", models.CharField(blank=True, default="", max_length=500)),
                ("paused_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "until",
                    models.DateTimeField(
                        blank=True,
                        help_text="When it resumes by itself; empty: when resumed.",
                        null=True,
                    ),
                ),
            ],
            options={
                "ordering": ("name",),
            },
        ),
        migrations.AddField(
            model_name="host",
            name="last_error",
            field=models.TextField(blank=True, default="", help_text="Its latest failure."),
        ),
        migrations.AddField(
            model_name="host",
            name="last_status",
            field=models.PositiveSmallIntegerField(
                blank=True,
                help_text="The status of its latest failure; empty: no answer.",
                null=True,
            ),
        ),
    ]
