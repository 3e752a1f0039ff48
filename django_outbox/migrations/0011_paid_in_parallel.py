# Paid push in parallel: a host's payments under way are unique per host and slot (one
# slot on a host that sells tokens, MAX_PARALLEL_PER_HOST on one that charges per
# message), one per delivery, and how each host charges is learnt (PaymentHost).
# Attempts pending before take slot 0, where the old constraint kept them one per host.

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_outbox", "0010_host_pauses"),
    ]

    operations = [
        migrations.CreateModel(
            name="PaymentHost",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("host", models.CharField(max_length=255, unique=True)),
                ("per_message", models.BooleanField(default=False)),
                ("learnt_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
        ),
        migrations.RemoveConstraint(
            model_name="paymentattempt",
            name="django_outbox_one_pending_payment_per_host",
        ),
        migrations.AddField(
            model_name="paymentattempt",
            name="slot",
            field=models.PositiveSmallIntegerField(
                default=0,
                help_text="Which of its host's payments under way this is: always 0 on a host that sells tokens, below MAX_PARALLEL_PER_HOST on one that charges per message.",
            ),
        ),
        migrations.AddConstraint(
            model_name="paymentattempt",
            constraint=models.UniqueConstraint(
                condition=models.Q(("state", "pending")),
                fields=("host", "slot"),
                name="django_outbox_pending_payment_slot",
            ),
        ),
        migrations.AddConstraint(
            model_name="paymentattempt",
            constraint=models.UniqueConstraint(
                condition=models.Q(("state", "pending")),
                fields=("delivery",),
                name="django_outbox_one_pending_payment_per_delivery",
            ),
        ),
    ]
