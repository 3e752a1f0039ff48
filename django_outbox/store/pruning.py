"""Deleting finished deliveries past the retention period, and then their messages.

The sweeper's prune step.  It deletes in batches of :data:`~django_outbox.store.queries.STEP`
rows, the longest finished first (a range of the ``(finished_at, state)`` index), each
batch in a transaction of its own with the rows that depend on them (their history;
payment records stay, unlinked) and followed by a pause three times as long
(:data:`BUSY`), until none is left or the pass has lasted :data:`SHARE` of
``OUTBOX_SWEEP_INTERVAL``: a long backlog is worked off pass by pass, a pass ends long
before the next one starts (and before the sweep's supervisor would call it stuck), no
transaction holds many locks for long, and the database is left to the workers between
batches.  Only finished rows are
deleted, which no claim, outcome or recovery pass changes, so workers do not wait on a
prune's locks.

On PostgreSQL a batch is one statement (:func:`one_statement`), its dependents deleted
or unlinked in the same statement as Django would, without reading the rows into
Python first: several times faster than Django's collector, which stays the way on
other databases and whenever a delete signal has receivers.  The history and the
payment records link to their delivery without a database constraint, whose check of
each deleted delivery took three quarters of a batch's time (migration 0012).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from django.db import connection, models, transaction
from django.db.models.signals import post_delete, pre_delete
from django.utils import timezone

from django_outbox.conf import conf
from django_outbox.models import FINAL_STATES, Delivery, Message
from django_outbox.store.queries import STEP

#: The share of ``OUTBOX_SWEEP_INTERVAL`` one prune pass may last.
SHARE = 1 / 3
#: The share of a pass spent deleting: after each batch it pauses for ``1 / BUSY - 1``
#: times as long as the batch took, leaving the database and the workers sharing its
#: cores the rest (chosen with the large-table benchmark: see docs/benchmarks.md).
BUSY = 0.25


def prune() -> int:
    """Delete finished deliveries, and then messages, older than the retention period,
    a batch at a time, pausing between batches (:data:`BUSY`), for at most
    :data:`SHARE` of the sweep interval (one batch of each at least); how many rows were
    deleted (history rows included)."""
    cutoff = timezone.now() - timedelta(seconds=conf.RETENTION_SECONDS)
    ends = time.monotonic() + SHARE * conf.SWEEP_INTERVAL
    deleted = 0
    while True:
        began = time.monotonic()
        found, removed = _delete_deliveries(cutoff)
        deleted += removed
        if found < STEP or time.monotonic() >= ends:
            break
        time.sleep((time.monotonic() - began) * (1 / BUSY - 1))
    while _delete_messages(cutoff) == STEP and time.monotonic() < ends:
        pass
    return deleted


def _delete_deliveries(cutoff: datetime) -> tuple[int, int]:
    """One batch: (deliveries found, rows deleted with their dependents)."""
    old = Delivery.objects.filter(state__in=FINAL_STATES, finished_at__lt=cutoff)
    ids = list(old.order_by("finished_at").values_list("id", flat=True)[:STEP])
    statement = one_statement() if connection.vendor == "postgresql" else None
    with transaction.atomic():
        if statement is None:
            removed, _ = Delivery.objects.filter(id__in=ids).only("id").delete()
            return len(ids), removed
        with connection.cursor() as cursor:
            cursor.execute(statement, [ids])
            return len(ids), int(cursor.fetchone()[0])


def one_statement() -> str | None:
    """PostgreSQL's statement deleting the deliveries of an array of ids with their
    dependents, as Django's ``on_delete`` would (each ``CASCADE`` relation's rows
    deleted, each ``SET_NULL`` one's unlinked); it returns the rows deleted.  ``None``
    when Django must do it: a delete signal has receivers, or a dependent has
    dependents of its own or another ``on_delete``."""
    relations = Delivery._meta.related_objects
    models_involved = [Delivery, *(relation.related_model for relation in relations)]
    if any(
        signal.has_listeners(model)
        for signal in (pre_delete, post_delete)
        for model in models_involved
    ):
        return None
    quote = connection.ops.quote_name
    parts, counted = ["doomed AS (SELECT unnest(%s::bigint[]) AS id)"], []
    for n, relation in enumerate(relations):
        table = quote(relation.related_model._meta.db_table)
        column = quote(str(relation.field.column))
        where = f"WHERE {column} IN (SELECT id FROM doomed)"
        if (
            relation.on_delete is models.CASCADE
            and not relation.related_model._meta.related_objects
        ):
            parts.append(f"dependent{n} AS (DELETE FROM {table} {where} RETURNING 1)")
            counted.append(f"dependent{n}")
        elif relation.on_delete is models.SET_NULL:
            parts.append(
                f"dependent{n} AS (UPDATE {table} SET {column} = NULL {where} RETURNING 1)"
            )
        else:
            return None
    table = quote(Delivery._meta.db_table)
    parts.append(f"gone AS (DELETE FROM {table} WHERE id IN (SELECT id FROM doomed) RETURNING 1)")
    total = " + ".join(f"(SELECT count(*) FROM {name})" for name in ["gone", *counted])
    return f"WITH {', '.join(parts)} SELECT {total}"


def _delete_messages(cutoff: datetime) -> int:
    """One batch of messages older than ``cutoff`` with no delivery and nothing pending
    left; how many were found."""
    empty = Message.objects.filter(created_at__lt=cutoff, pending=None, deliveries=None)
    ids = list(empty.values_list("id", flat=True)[:STEP])
    Message.objects.filter(id__in=ids).delete()
    return len(ids)
