"""Running the payment tables' most frequent statements as written-out SQL.

A paid delivery runs about ten statements on these tables: the day's budget locked and
raised, the host's slots and the invoice's history read, the attempt stored, then
made paid and used, and what was not spent given back.  Built by the ORM, each cost
0.27 to 0.48 ms of CPU on the benchmark machine, almost all of it compiling the query;
written out, about 0.09 ms.  The statements stay where their rules are
(:mod:`~django_outbox.payments.budget`, :mod:`~django_outbox.payments.lookups`,
:mod:`~django_outbox.payments.ledger`); this module only runs them.  Names are quoted
as the backend quotes them (:mod:`~django_outbox.store.statement_parts`), and dates and
times adapted as the ORM adapts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from typing import Any, TypeVar

from django.db import connection, models

from django_outbox.store.statement_parts import marks, name

Stored = TypeVar("Stored", bound=models.Model)


def as_datetime(value: datetime) -> Any:
    """``value`` as the database takes a ``DateTimeField``'s value."""
    return connection.ops.adapt_datetimefield_value(value)


def as_date(value: date) -> Any:
    """``value`` as the database takes a ``DateField``'s value."""
    return connection.ops.adapt_datefield_value(value)


def execute(sql: str, params: Sequence[Any]) -> int:
    """Run ``sql`` with ``params``: the number of rows it changed."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def fetch(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Run ``sql`` with ``params``: the rows it returned."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


#: (model, connection alias) -> the fields an :func:`insert` writes and its statement.
_inserts: dict[tuple[type[models.Model], str], tuple[list[Any], str]] = {}


def _insert_of(model: type[models.Model]) -> tuple[list[Any], str]:
    """The fields an :func:`insert` of ``model`` writes and its SQL, joined once per
    model and database (quoting 20-odd names cost a fifth of the statement's CPU)."""
    key = (model, connection.alias)
    if key not in _inserts:
        meta = model._meta
        fields = [field for field in meta.concrete_fields if not field.primary_key]
        columns = ", ".join(name(str(field.column)) for field in fields)
        sql = (
            f"INSERT INTO {name(model)} ({columns}) VALUES ({marks(fields)}) "
            f"ON CONFLICT DO NOTHING RETURNING {name(str(meta.pk.column))}"
        )
        _inserts[key] = fields, sql
    return _inserts[key]


def insert(row: Stored) -> Stored | None:
    """Store ``row``, a model instance not saved yet, with one ``INSERT ... ON CONFLICT DO
    NOTHING RETURNING`` of its primary key (no ``pre_save``/``post_save`` signals: nothing
    listens for the payment tables' rows): ``row`` itself, as saved, or None when a unique
    key refused it.  A refusal raises nothing, so the transaction goes on without a
    savepoint to roll back to."""
    fields, sql = _insert_of(type(row))
    values = [field.get_db_prep_save(field.pre_save(row, True), connection) for field in fields]
    stored = fetch(sql, values)
    if not stored:
        return None
    row.pk = stored[0][0]
    row._state.adding, row._state.db = False, connection.alias
    return row
