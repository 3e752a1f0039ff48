# Webhook endpoints' failure days (Endpoint, disabled after OUTBOX_WEBHOOK_DISABLE_AFTER_DAYS),
# and a caller-given webhook id made unique per sender.  Messages stored twice with one
# id before this migration keep it on the first; each later one gets "<id>_dup<pk>".

from typing import Any

import django.utils.timezone
from django.db import migrations, models
from django.db.models import Count


def rename_duplicate_webhook_ids(apps: Any, schema_editor: Any) -> None:
    """Keep each sender's webhook id on its first message; suffix it on the later ones."""
    Message = apps.get_model("django_outbox", "Message")
    twice = (
        Message.objects.exclude(webhook_id="")
        .values("sender", "webhook_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    )
    for group in twice:
        later = Message.objects.filter(
            sender=group["sender"], webhook_id=group["webhook_id"]
        ).order_by("id")[1:]
        for pk, webhook_id in later.values_list("id", "webhook_id"):
            suffix = f"_dup{pk}"
            Message.objects.filter(pk=pk).update(
                webhook_id=webhook_id[: 255 - len(suffix)] + suffix
            )


class Migration(migrations.Migration):
    dependencies = [
        ("django_outbox", "0008_supervision"),
    ]

    operations = [
        migrations.CreateModel(
            name="Endpoint",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("url", models.CharField(max_length=2048, unique=True)),
                ("failure_days", models.PositiveSmallIntegerField(default=1)),
                ("first_failure_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("last_failure_day", models.DateField()),
                (
                    "last_status",
                    models.PositiveSmallIntegerField(
                        blank=True,
                        help_text="The status of its latest failure; empty: no answer.",
                        null=True,
                    ),
                ),
                ("last_error", models.TextField(blank=True, help_text="Its latest failure.")),
                ("disabled_since", models.DateTimeField(blank=True, db_index=True, null=True)),
            ],
            options={
                "ordering": ("url",),
            },
        ),
        migrations.RunPython(rename_duplicate_webhook_ids, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="message",
            constraint=models.UniqueConstraint(
                condition=models.Q(("webhook_id", ""), _negated=True),
                fields=("sender", "webhook_id"),
                name="django_outbox_webhook_once_per_sender",
            ),
        ),
    ]
