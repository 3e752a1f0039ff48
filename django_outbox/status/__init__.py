"""How the outbox is doing: computed in one place, shown in three.

:func:`~django_outbox.status.snapshot.take_snapshot` reads the database with a
handful of aggregate queries that indexes answer (see ``docs/operations.md``
for their cost on a million rows), and the workers' shared metrics store for
recent attempt times.  The ``outbox status`` command prints it, the admin
overview draws it, and the metrics collector exposes it as gauges.
"""
