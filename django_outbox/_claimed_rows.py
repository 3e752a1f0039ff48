"""Reading what deciding the outcomes of a batch needs of their deliveries.

Without receivers for ``delivery_attempted`` or ``delivery_settled`` that is
a handful of columns a row, read as tuples, with whether the row's host has a
:class:`~django_outbox.models.Host` row folded into the same query: a batch
whose hosts are all healthy then deletes no Host rows at all.  A Host row
another process commits after this read stands for a failure seen after this
batch's successes, and stays.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from django.db import connection
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

from django_outbox._signal_args import AttemptSignals
from django_outbox.models import Delivery, Host


class ClaimedRow(NamedTuple):
    """What deciding an outcome needs of its delivery and message: one tuple a row."""

    id: int
    claimed_by: str
    state: str
    host: str
    inbox: str
    lane: str
    ordering_key: str
    attempts: int
    deadline: datetime | None
    max_attempts: int
    sender: str
    #: Whether the host has a :class:`~django_outbox.models.Host` row (is failing).
    failing: bool


_COLUMNS = (
    *("id", "claimed_by", "state", "host", "inbox", "lane", "ordering_key", "attempts"),
    *("message__deadline", "message__max_attempts", "message__sender", "failing"),
)


def _host_row_exists() -> RawSQL:
    """``EXISTS`` a Host row for the delivery's host: one index probe a row, so that
    a batch whose hosts are all healthy needs no ``DELETE`` of Host rows."""
    quote = connection.ops.quote_name
    host, delivery = quote(Host._meta.db_table), quote(Delivery._meta.db_table)
    name, column = quote("name"), quote("host")  # the models' own column names
    sql = f"EXISTS (SELECT 1 FROM {host} WHERE {host}.{name} = {delivery}.{column})"
    return RawSQL(sql, (), output_field=BooleanField())


def read_rows(ids: list[int], signals: AttemptSignals) -> dict[int, ClaimedRow]:
    """What deciding needs of the deliveries with ``ids``, read in one query, by id.

    With receivers that want every row in full (``signals.every_row``) the rows
    are read so, and each host with a success is taken to have a Host row.
    """
    if signals.every_row:
        # Receivers will want the rows in full: read them so, and clear the
        # failures of every host with a success, without telling which had any.
        return {
            pk: ClaimedRow(
                *(pk, row.claimed_by, row.state, row.host, row.inbox, row.lane),
                *(row.ordering_key, row.attempts, row.message.deadline),
                *(row.message.max_attempts, row.message.sender, True),
            )
            for pk, row in signals.preload(ids).items()
        }
    found = Delivery.objects.filter(id__in=ids).order_by().annotate(failing=_host_row_exists())
    return {values[0]: ClaimedRow._make(values) for values in found.values_list(*_COLUMNS)}
