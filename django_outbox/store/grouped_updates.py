"""The row updates of a batch of outcomes, in as few statements as they allow.

Each update is conditional on the delivery still being ``sending`` under the
claim token its attempt was made with; the transitions module runs them.
Outcomes that set the same values share one ``UPDATE`` whatever their tokens
(``WHERE state = 'sending' AND (claimed_by = t1 AND id IN (...) OR claimed_by
= t2 AND id IN (...))``), and retries, which differ only in their jittered
``next_attempt_at``, share one too, each row's time picked by a ``CASE`` on
its id.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import DateTimeField, Q
from django.db.models.expressions import RawSQL

#: Rows per UPDATE that sets each its own retry time (two parameters a row, and
#: SQLite may allow no more than 999 in a statement).
TIMED_ROWS = 250
_TIME = "next_attempt_at"
#: Stands for the retry time in a group's key: each row has its own.
_EACH = object()


class GroupedUpdates:
    """The conditional UPDATEs of a batch: one per set of new values, whatever the tokens.

    Retries differ only in their jittered ``next_attempt_at``; those go in one
    statement too, each row's time picked by a ``CASE`` on its id.
    """

    def __init__(self) -> None:
        self._groups: dict[tuple[tuple[str, Any], ...], dict[str, list[int]]] = {}
        self._times: dict[int, datetime] = {}

    def add(self, token: str, pk: int, fields: dict[str, Any]) -> None:
        """Set ``fields`` on ``pk`` if it is still claimed with ``token`` and sending."""
        key = tuple((name, _EACH if name == _TIME else value) for name, value in fields.items())
        self._groups.setdefault(key, defaultdict(list))[token].append(pk)
        if _TIME in fields:
            self._times[pk] = fields[_TIME]

    def statements(self) -> Iterator[tuple[Q, dict[str, Any]]]:
        """``(condition, values)`` for each UPDATE: set ``values`` where ``condition``
        holds and the row is still ``sending`` (the caller adds that)."""
        for key, claims in self._groups.items():
            values = dict(key)
            if values.get(_TIME) is not _EACH:
                yield from _statement(claims, values)
                continue
            ids = [pk for pks in claims.values() for pk in pks]
            for start in range(0, len(ids), TIMED_ROWS):
                times = {pk: self._times[pk] for pk in ids[start : start + TIMED_ROWS]}
                values[_TIME] = each_its_own(times)
                part = {token: [pk for pk in pks if pk in times] for token, pks in claims.items()}
                yield from _statement(part, dict(values))


def _statement(
    claims: dict[str, list[int]], values: dict[str, Any]
) -> Iterator[tuple[Q, dict[str, Any]]]:
    """The condition matching ``claims`` (token: ids) with ``values``; none if no ids."""
    claimed = Q()
    for token, ids in claims.items():
        if ids:
            claimed |= Q(claimed_by=token, id__in=ids)
    if claimed:  # an empty Q() would match every row being sent
        yield claimed, values


def each_its_own(times: dict[int, datetime]) -> datetime | RawSQL:
    """What to set ``next_attempt_at`` to so that each row of ``times`` (id: time, at
    most :data:`TIMED_ROWS`) gets its own: the one time they share, else
    ``CASE id WHEN pk THEN time ... ELSE next_attempt_at END``.

    Written out rather than built from ``Case(When(...))``, whose lookups cost more
    to compile than the rest of the statement.
    """
    distinct = set(times.values())
    if len(distinct) == 1:
        return distinct.pop()
    quote, adapt = connection.ops.quote_name, connection.ops.adapt_datetimefield_value
    whens = " ".join(["WHEN %s THEN %s"] * len(times))
    sql = f"CASE {quote('id')} {whens} ELSE {quote(_TIME)} END"
    params = [value for pk, at in times.items() for value in (pk, adapt(at))]
    return RawSQL(sql, params, output_field=DateTimeField())
