"""Values as a written-out statement reads them, made what the ORM hands back.

A statement run on a cursor skips the ORM's converters; the few that matter here are
the backend's own (a ``DateTimeField`` read on SQLite comes back naive, or as text).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connection


def datetime_reader() -> Callable[[Any], Any]:
    """What turns a ``DateTimeField``'s value, as a written-out statement read it, into
    what the ORM hands back (aware, on a backend that stores it as text or without its
    zone; None stays None): the backend is asked once for all the values of a read."""
    convert = getattr(connection.ops, "convert_datetimefield_value", None)
    if convert is None:
        return _unchanged
    return lambda value: convert(value, None, connection)


def _unchanged(value: Any) -> Any:
    return value
