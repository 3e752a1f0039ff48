# The history's and the payment records' links to their delivery lose their database
# constraints: PostgreSQL checked, for each delivery deleted, that no row of either
# table still pointed at it, three quarters of a prune's time at 10 million deliveries.
# Django's on_delete (CASCADE, SET_NULL) is unchanged, and the prune's own statement
# deletes and unlinks those rows with their delivery. Dropping a constraint rewrites
# nothing on PostgreSQL; SQLite copies the two tables.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_outbox", "0011_paid_in_parallel"),
    ]

    operations = [
        migrations.AlterField(
            model_name="attempt",
            name="delivery",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="history",
                to="django_outbox.delivery",
            ),
        ),
        migrations.AlterField(
            model_name="paymentattempt",
            name="delivery",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                help_text="The delivery that met the 402 (kept as a record after it is pruned).",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="payments",
                to="django_outbox.delivery",
            ),
        ),
    ]
