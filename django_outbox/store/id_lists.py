"""How the written-out statements of the store match a list of row ids."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection


def ids_match(column: str, ids: Sequence[int]) -> tuple[str, list[Any]]:
    """SQL that holds where ``column`` is one of ``ids``, and its parameters.

    On PostgreSQL one array parameter (``column = ANY(%s)``): the statement's text is
    the same whatever the number of ids, so psycopg converts it once per process
    rather than parsing a new ``IN`` list of hundreds of placeholders at every batch.
    Elsewhere (SQLite) an ``IN`` list.
    """
    if connection.vendor == "postgresql":
        return f"{column} = ANY(%s)", [list(ids)]
    return f"{column} IN ({', '.join(['%s'] * len(ids))})", list(ids)
