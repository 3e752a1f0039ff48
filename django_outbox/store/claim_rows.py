"""What a claim hands the worker: the claimed rows and their messages.

A claim returns :class:`ClaimedRow` tuples, which travel with each attempt to
the recorder, so that recording an outcome reads nothing of the row again but
whether its claim still holds.  A message's sending parts are
:class:`MessageData`, read once and kept by the worker (a body never changes).
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import socket
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from django.db import connection

from django_outbox.models import Delivery, DeliveryState, Host, Message
from django_outbox.store.read_values import datetime_reader
from django_outbox.store.statement_parts import marks, name
from django_outbox.values.claimed import ClaimedRow, MessageData

_counter = itertools.count()
_owner: tuple[int, str] | None = None


def owner_name() -> str:
    """This process's name as a claim owner and in its heartbeat: ``host:pid:token``.

    The random token keeps a restarted process that got the same pid from
    passing for the one that died; a forked child gets a name of its own.
    """
    global _owner
    pid = os.getpid()
    if _owner is None or _owner[0] != pid:
        _owner = (pid, f"{socket.gethostname()[:60]}:{pid}:{secrets.token_hex(6)}")
    return _owner[1]


def new_token() -> str:
    """A claim token unique across hosts, processes and claims: its owner's name, ``:n``."""
    return f"{owner_name()}:{next(_counter)}"


#: The columns a claim returns, in :class:`ClaimedRow` order (the token is the claim's).
CLAIMED_COLUMNS = ("id", "message_id", "inbox", "host", "via", "lane", "ordering_key", "attempts")


def claimed_row(values: Sequence[Any], token: str) -> ClaimedRow:
    """A :class:`ClaimedRow` from the values of :data:`CLAIMED_COLUMNS`."""
    pk, message_id, inbox, host, via, lane, ordering_key, attempts = values
    return ClaimedRow(
        pk, message_id, inbox, host, _json_list(via), lane, ordering_key, attempts, token
    )


def _json_list(value: object) -> list[str]:
    """The ``via`` column as a list: PostgreSQL decodes JSON, SQLite returns text."""
    decoded = json.loads(value) if isinstance(value, str) else value
    return [str(url) for url in decoded] if isinstance(decoded, list) else []


#: The columns :func:`load_messages` reads, in :class:`MessageData` order.
_MESSAGE_COLUMNS = (
    "id",
    "sender",
    "body",
    "body_sha256",
    "content_type",
    "deadline",
    "activity_type",
    "synchronize_collection",
    "max_attempts",
    "created_at",
    "signing",
    "webhook_id",
)


def load_messages(ids: Iterable[int]) -> dict[int, MessageData]:
    """The sending parts of the messages with ``ids``, in one query.

    Written out: a send to a few inboxes (a reply, a follow) makes a claim of its own,
    whose message is read before anything else, and the ORM's compilation of this
    read cost 0.85 ms of the worker's CPU a claim, most of its preparation."""
    wanted = list(ids)
    if not wanted:
        return {}
    columns = ", ".join(name(column) for column in _MESSAGE_COLUMNS)
    sql = f"SELECT {columns} FROM {name(Message)} WHERE id IN ({marks(wanted)})"
    with connection.cursor() as cursor:
        cursor.execute(sql, wanted)
        rows = cursor.fetchall()
    read = datetime_reader()
    return {
        row[0]: MessageData(
            row[0],
            row[1],
            bytes(row[2]),
            bytes(row[3]),
            row[4],
            read(row[5]),
            row[6],
            bool(row[7]),
            row[8],
            read(row[9]),
            *row[10:],
        )
        for row in rows
    }


class ClaimCheck(NamedTuple):
    """Whether a claimed delivery is still held by its claim, and its host's health."""

    #: The token the row is claimed under now, or ``""`` when it is not being sent.
    claimed_by: str
    #: Whether the row's host has a :class:`~django_outbox.models.Host` row (is failing).
    failing: bool


def check_claims(ids: list[int]) -> dict[int, ClaimCheck]:
    """For the deliveries ``ids``: who holds them now and whether their host is failing.

    One query, written out (the ORM's compilation of an ``IN`` list of a batch's
    ids costs more than the query); the host test is one index probe a row, so that
    a batch whose hosts are all healthy needs no ``DELETE`` of Host rows.  A Host
    row another process commits after this read stands for a failure seen after
    this batch's successes, and stays.
    """
    if not ids:
        return {}
    host, delivery = name(Host), name(Delivery)
    host_name, column = name("name"), name("host")  # the models' own column names
    exists = f"EXISTS (SELECT 1 FROM {host} WHERE {host}.{host_name} = {delivery}.{column})"
    sql = (
        f"SELECT id, claimed_by, {exists} FROM {delivery} WHERE id IN ({marks(ids)}) AND state = %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*ids, DeliveryState.SENDING.value])
        found = cursor.fetchall()
    return {pk: ClaimCheck(claimed_by, bool(failing)) for pk, claimed_by, failing in found}
