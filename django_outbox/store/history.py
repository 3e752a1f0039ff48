"""The attempt history: what each delivery's failed and held attempts were.

Written with the outcomes of a batch, in the same transaction, by one
``INSERT ... ON CONFLICT`` (on SQLite, one per 80 rows): no row is read first.
A row is keyed by delivery, attempt number and whether it is a hold, so a
delivery keeps at most two rows per attempt it may spend however often a
breaker holds it (the holds before an attempt share one row, which counts
them), and a requeued delivery's new attempts take the places of the old ones.
A first attempt that succeeds writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.utils import timezone

from django_outbox.models import Attempt
from django_outbox.values.outcomes import AttemptResult, Outcome
from django_outbox.values.safe_text import one_line

#: Rows per INSERT: twelve parameters each, and SQLite may allow no more than 999.
_ROWS = 80
_COLUMNS = (
    "delivery_id",
    "number",
    "held",
    "times",
    "host",
    "at",
    "duration",
    "status",
    "scheme",
    "result",
    "error",
    "wait",
)
#: Results that made no attempt, whose outcome has no place in the history.
_NOT_ATTEMPTS = (AttemptResult.RELEASED, AttemptResult.EXPIRED, AttemptResult.SKIPPED)


def kept(outcome: Outcome) -> bool:
    """Whether ``outcome`` belongs in its delivery's history."""
    if outcome.result is AttemptResult.DELIVERED:
        return outcome.row.attempts > 1
    return outcome.result not in _NOT_ATTEMPTS


def history_row(outcome: Outcome, now: datetime) -> tuple[Any, ...]:
    """The column values (:data:`_COLUMNS` order) of ``outcome``'s history row."""
    held = outcome.result is AttemptResult.HELD
    started = datetime.fromtimestamp(outcome.started_at, UTC) if outcome.started_at else now
    return (
        outcome.row.id,
        outcome.row.attempts,
        held,
        1,
        outcome.row.host,
        started,
        None if held else round(outcome.duration, 4),
        outcome.status,
        outcome.schemes[-1] if outcome.schemes else "",
        outcome.result.value,
        one_line(outcome.error, 500),  # server text: one printable line, no NUL
        outcome.held_for if held else outcome.retry_after,
    )


def save_history(outcomes: Iterable[Outcome]) -> int:
    """Write the history rows of ``outcomes`` (one per delivery at most); how many."""
    now = timezone.now()
    rows = [history_row(outcome, now) for outcome in outcomes if kept(outcome)]
    if rows and connection.vendor == "postgresql":
        # One statement with a parameter per column (arrays): its text never changes,
        # so the driver parses it once, and the arrays are adapted in C.
        columns = [list(column) for column in zip(*rows, strict=True)]
        with connection.cursor() as cursor:
            cursor.execute(_statement(f"SELECT * FROM unnest({_ARRAYS})"), columns)
        return len(rows)
    for start in range(0, len(rows), _ROWS):
        chunk = rows[start : start + _ROWS]
        adapt = connection.ops.adapt_datetimefield_value
        marks = "(" + ", ".join(["%s"] * len(_COLUMNS)) + ")"
        with connection.cursor() as cursor:
            cursor.execute(
                _statement(f"VALUES {', '.join([marks] * len(chunk))}"),
                [value for row in chunk for value in (*row[:5], adapt(row[5]), *row[6:])],
            )
    return len(rows)


#: PostgreSQL's types of :data:`_COLUMNS`, for ``unnest`` of one array per column.
_ARRAYS = ", ".join(
    f"%s::{kind}[]"
    for kind in (
        *("bigint", "smallint", "boolean", "integer", "text", "timestamptz"),
        *("float8", "smallint", "text", "text", "text", "float8"),
    )
)


def _statement(rows: str) -> str:
    """``INSERT ... <rows> ON CONFLICT ... DO UPDATE``: a hold counts, an attempt replaces."""
    quote = connection.ops.quote_name
    table = quote(Attempt._meta.db_table)
    columns = ", ".join(quote(name) for name in _COLUMNS)
    replaced = [name for name in _COLUMNS[4:] if name != "times"]
    updates = ", ".join(f"{quote(name)} = excluded.{quote(name)}" for name in replaced)
    times, held = quote("times"), quote("held")
    return (
        f"INSERT INTO {table} ({columns}) {rows} "
        f"ON CONFLICT ({quote('delivery_id')}, {quote('number')}, {held}) DO UPDATE SET "
        f"{times} = CASE WHEN excluded.{held} THEN {table}.{times} + 1 ELSE 1 END, {updates}"
    )
