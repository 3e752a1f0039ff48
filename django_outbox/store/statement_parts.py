"""The parts of a written-out statement: quoted names and ``IN (...)`` placeholders.

The store and the payment ledger write some statements out rather than through the
ORM (a claim's reads, the ledger's conditional updates), and quote and mark them the
same way, as the backend quotes them.
"""

from __future__ import annotations

from collections.abc import Collection

from django.db import connection, models


def name(model_or_column: type[models.Model] | str) -> str:
    """A model's table, or a column, quoted for the database."""
    if isinstance(model_or_column, str):
        return connection.ops.quote_name(model_or_column)
    return connection.ops.quote_name(model_or_column._meta.db_table)


def marks(values: Collection[object]) -> str:
    """One placeholder per value, comma-separated (for ``IN (...)``)."""
    return ", ".join(["%s"] * len(values))
