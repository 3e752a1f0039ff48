"""Writing many delivery rows at once.

On PostgreSQL, ``bulk_create`` builds a model instance and prepares every
field of every row in Python: about 4,000 rows a second here.  One ``INSERT
... SELECT ... FROM unnest(...)`` sends the columns that differ between rows as
arrays and the others once, and writes several times as many.  SQLite keeps
``bulk_create``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import CharField, Field

from django_outbox.models import Delivery, DeliveryState, Message

#: The columns that differ from row to row, in the order of the arrays.
_VARYING = ("inbox", "host", "via", "state", "dispatched_at")


def bulk_insert(
    message: Message,
    inboxes: Sequence[str],
    hosts: Sequence[str],
    vias: Sequence[list[str]],
    waiting: set[str],
    now: datetime,
) -> list[tuple[int, str]]:
    """Insert a row per inbox (``waiting`` ones as such); the id and host of each queued one."""
    if connection.vendor == "postgresql":
        return _insert_unnest(message, inboxes, hosts, vias, waiting, now)
    rows = [
        Delivery(
            message=message,
            inbox=inbox,
            host=host,
            via=via,
            lane=message.lane,
            ordering_key=message.ordering_key,
            state=DeliveryState.WAITING if inbox in waiting else DeliveryState.QUEUED,
            next_attempt_at=now,
            dispatched_at=None if inbox in waiting else now,
            created_at=now,
        )
        for inbox, host, via in zip(inboxes, hosts, vias, strict=True)
    ]
    Delivery.objects.bulk_create(rows, batch_size=2000)
    return [(row.pk, row.host) for row in rows if row.state == DeliveryState.QUEUED]


def _insert_unnest(
    message: Message,
    inboxes: Sequence[str],
    hosts: Sequence[str],
    vias: Sequence[list[str]],
    waiting: set[str],
    now: datetime,
) -> list[tuple[int, str]]:
    """:func:`bulk_insert` on PostgreSQL, in one statement.

    Every other column takes the value a new ``Delivery`` of ``message`` has,
    so a field added to the model is written with its default here too.
    """
    template = Delivery(
        message=message,
        lane=message.lane,
        ordering_key=message.ordering_key,
        next_attempt_at=now,
        created_at=now,
    )
    quote = connection.ops.quote_name
    fields = {str(field.column): field for field in Delivery._meta.concrete_fields}
    constant = {c: f for c, f in fields.items() if not f.primary_key and c not in _VARYING}
    columns = ", ".join(quote(column) for column in [*constant, *_VARYING])
    values = ", ".join(
        [f"%s::{_db_type(field)}" for field in constant.values()]
        + [f"u.{quote(column)}" for column in _VARYING]
    )
    arrays = ", ".join(f"%s::{_db_type(fields[column])}[]" for column in _VARYING)
    names = ", ".join(quote(column) for column in _VARYING)
    sql = (
        f"INSERT INTO {quote(Delivery._meta.db_table)} ({columns}) "
        f"SELECT {values} FROM unnest({arrays}) AS u({names}) "
        f"RETURNING {quote('id')}, {quote('host')}, {quote('state')}"
    )
    queued = DeliveryState.QUEUED.value
    states = [DeliveryState.WAITING.value if i in waiting else queued for i in inboxes]
    params: list[Any] = [
        field.get_db_prep_save(getattr(template, field.attname), connection)
        for field in constant.values()
    ]
    params += [
        list(inboxes),
        list(hosts),
        [json.dumps(via) for via in vias],
        states,
        [now if state == queued else None for state in states],
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(row_id, host) for row_id, host, state in cursor.fetchall() if state == queued]


def _db_type(field: Field[Any, Any]) -> str:
    """The type to cast a value of ``field`` to: its column type, but ``text`` for a
    ``varchar(n)``, which PostgreSQL's cast would silently cut to ``n`` characters;
    stored into the column, an over-long value raises an error instead."""
    if isinstance(field, CharField):
        return "text"
    return str(field.db_type(connection))
