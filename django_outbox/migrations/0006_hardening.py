# Pending inboxes of large fan-outs in slices (PendingInboxes) instead of one
# Message.pending_inboxes text: lists not yet expanded are moved over, in slices.

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

FIRST_SLICE = 500
SLICE = 5000


def move_pending_inboxes(apps: Any, schema_editor: Any) -> None:
    """Cut each message's pending list into slices, as send() now stores them."""
    Message = apps.get_model("django_outbox", "Message")
    PendingInboxes = apps.get_model("django_outbox", "PendingInboxes")
    waiting = Message.objects.exclude(pending_inboxes="").values_list("id", flat=True)
    for message_id in waiting.iterator():
        text = Message.objects.filter(pk=message_id).values_list("pending_inboxes", flat=True)[0]
        inboxes = [inbox for inbox in text.split("\n") if inbox]
        slices, start, size = [], 0, FIRST_SLICE
        while start < len(inboxes):
            slices.append("\n".join(inboxes[start : start + size]))
            start, size = start + size, SLICE
        PendingInboxes.objects.bulk_create(
            PendingInboxes(message_id=message_id, seq=seq, inboxes=part)
            for seq, part in enumerate(slices)
        )


def move_back(apps: Any, schema_editor: Any) -> None:
    """Join the slices of each message back into its pending list."""
    Message = apps.get_model("django_outbox", "Message")
    PendingInboxes = apps.get_model("django_outbox", "PendingInboxes")
    ids = PendingInboxes.objects.values_list("message_id", flat=True).distinct().order_by()
    for message_id in list(ids):
        parts = PendingInboxes.objects.filter(message_id=message_id).order_by("seq")
        text = "\n".join(parts.values_list("inboxes", flat=True))
        Message.objects.filter(pk=message_id).update(pending_inboxes=text)


class Migration(migrations.Migration):
    dependencies = [
        ("django_outbox", "0005_webhooks"),
    ]

    operations = [
        migrations.CreateModel(
            name="PendingInboxes",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "seq",
                    models.PositiveIntegerField(help_text="Slices are expanded in this order."),
                ),
                ("inboxes", models.TextField(help_text="Inbox URLs, one per line.")),
                (
                    "message",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="pending",
                        to="django_outbox.message",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "pending inboxes",
                "ordering": ("message", "seq"),
                "constraints": [
                    models.UniqueConstraint(
                        fields=("message", "seq"), name="django_outbox_pending_slice"
                    )
                ],
            },
        ),
        migrations.RunPython(move_pending_inboxes, move_back),
        migrations.RemoveField(
            model_name="message",
            name="pending_inboxes",
        ),
    ]
