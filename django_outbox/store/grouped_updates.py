"""The row updates of a batch of outcomes, in as few statements as they allow.

Each update is conditional on the delivery still being ``sending`` under the
claim token its attempt was made with; the transitions module runs them.
Outcomes that set the same values share one ``UPDATE`` whatever their tokens
(``WHERE state = 'sending' AND (claimed_by = t1 AND id IN (...) OR claimed_by
= t2 AND id IN (...))``), and retries, which differ only in their jittered
``next_attempt_at``, share one too, each row's time picked by a ``CASE`` on
its id.  The statements are written out (:func:`update_claimed`), not built by the ORM,
whose filter and update compilation cost more than the statements themselves.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Field

from django_outbox.models import Delivery, DeliveryState

#: Rows per UPDATE that sets each its own retry time (two parameters a row, and
#: SQLite may allow no more than 999 in a statement).
_TIMED_ROWS = 250
_TIME = "next_attempt_at"
#: Stands for the retry time in a group's key: each row has its own.
_EACH = object()


@dataclass(frozen=True)
class Sql:
    """A column's new value written as SQL, with its parameters (a ``CASE``, a decrement)."""

    text: str
    params: tuple[Any, ...] = ()


#: ``attempts`` less the one a claim counted: for an attempt that was not made.
UNSPEND = Sql("attempts - 1")


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

    def statements(self) -> Iterator[tuple[dict[str, list[int]], dict[str, Any]]]:
        """``(claims, values)`` for each UPDATE: set ``values`` on the ids of ``claims``
        (token: ids) still sending under that token (:func:`update_claimed`)."""
        for key, claims in self._groups.items():
            values = dict(key)
            if values.get(_TIME) is not _EACH:
                yield claims, values
                continue
            ids = [pk for pks in claims.values() for pk in pks]
            for start in range(0, len(ids), _TIMED_ROWS):
                times = {pk: self._times[pk] for pk in ids[start : start + _TIMED_ROWS]}
                part = {token: [pk for pk in pks if pk in times] for token, pks in claims.items()}
                yield part, values | {_TIME: _each_its_own(times)}


def update_claimed(claims: dict[str, list[int]], values: dict[str, Any]) -> int:
    """Set ``values`` (field name: value or :class:`Sql`) on the deliveries of ``claims``
    (token: ids) that are still ``sending`` under that token, in one statement; how
    many rows it changed.  Nothing is run when no ids are given."""
    matches: list[str] = []
    match_params: list[Any] = []
    for token, ids in claims.items():
        if ids:
            matches.append(f"(claimed_by = %s AND id IN ({', '.join(['%s'] * len(ids))}))")
            match_params += [token, *ids]
    if not matches:  # no condition would match every row being sent
        return 0
    sets: list[str] = []
    set_params: list[Any] = []
    for name, value in values.items():
        field = Delivery._meta.get_field(name)
        assert isinstance(field, Field)  # a column of the row, not a relation's other side
        if isinstance(value, Sql):
            sets.append(f"{field.column} = {value.text}")
            set_params += value.params
        else:
            sets.append(f"{field.column} = %s")
            set_params.append(field.get_db_prep_save(value, connection))
    table = connection.ops.quote_name(Delivery._meta.db_table)
    sql = f"UPDATE {table} SET {', '.join(sets)} WHERE state = %s AND ({' OR '.join(matches)})"
    with connection.cursor() as cursor:
        cursor.execute(sql, [*set_params, DeliveryState.SENDING.value, *match_params])
        return int(cursor.rowcount)


def _each_its_own(times: dict[int, datetime]) -> datetime | Sql:
    """What to set ``next_attempt_at`` to so that each row of ``times`` (id: time, at
    most :data:`_TIMED_ROWS`) gets its own: the one time they share, else
    ``CASE id WHEN pk THEN time ... ELSE next_attempt_at END``.

    Written out rather than built from ``Case(When(...))``, whose lookups cost more
    to compile than the rest of the statement.
    """
    distinct = set(times.values())
    if len(distinct) == 1:
        return distinct.pop()
    adapt = connection.ops.adapt_datetimefield_value
    whens = " ".join(["WHEN %s THEN %s"] * len(times))
    params = tuple(value for pk, at in times.items() for value in (pk, adapt(at)))
    return Sql(f"CASE id {whens} ELSE {_TIME} END", params)
