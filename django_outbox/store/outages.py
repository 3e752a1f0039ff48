"""What counts as the database being away, rather than a statement that cannot work.

A connection refused, dropped or timed out (``OperationalError``, ``InterfaceError``)
passes: the same statement is tried again once the database answers.  Any other
``DatabaseError`` (an ``IntegrityError``, a ``DataError`` for a value a column cannot
hold) would fail again however often it is tried, so it is handled as the error it is.
"""

from __future__ import annotations

from django.db import InterfaceError, OperationalError

#: The errors of a database that is away for a while.
DATABASE_OUTAGES = (OperationalError, InterfaceError)
