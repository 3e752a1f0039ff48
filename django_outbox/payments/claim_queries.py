"""The two statements of a claim's payment lookup, written out rather than built.

Every claim of a worker with payments on asks which of its deliveries have an open
payment attempt, and which of its hosts are being paid, keep a token or charge per
message (:func:`~django_outbox.payments.lookups.claim_lookup`), whether or not any
host charges.  A claim names up to a hundred deliveries and as many hosts; built with
the ORM, each is a parameter that a lookup prepares one by one, and compiling the
statement cost a claim about three times what running it did (2.3 ms against 0.8 ms
of CPU for a claim of 100 rows and 100 hosts).  Here the SQL is joined once, with the
table's own column names.  The rows come back as :class:`AttemptRow` tuples of the
columns a claim uses (their dates converted as the ORM converts them), not as models;
of the payments under way at the claim's hosts it reads only their host and delivery.
While a host that charges per message is paid, every claim reads each of its payments
under way: made models, they cost a claim 1.3 ms of CPU, read whole 0.88 ms, and read
so 0.56 ms, against 0.47 ms with no payment under way (``bench.paid_alone``).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import NamedTuple

from django_outbox.payments.models import PaymentAttempt, PaymentHost, PaymentState
from django_outbox.payments.statements import as_datetime, fetch
from django_outbox.store.read_values import datetime_reader
from django_outbox.store.statement_parts import marks, name

#: The states of an attempt still open for its delivery: to pay, or to present.
OPEN_STATES = (PaymentState.PENDING, PaymentState.PAID)


class AttemptRow(NamedTuple):
    """A payment attempt as a claim reads it: the columns it uses, named as the model's
    fields (so that :func:`~django_outbox.payments.lookups.open_attempt_of` takes either)."""

    pk: int
    delivery_id: int | None
    host: str
    state: str
    destination: str
    scheme: str
    payment_hash: str
    amount_msat: int
    pay_amount_msat: int | None
    reserved_msat: int
    invoice: str
    macaroon: str
    preimage: str
    created_at: datetime
    invoice_expires_at: datetime
    expires_at: datetime
    paid_at: datetime | None


#: The columns of :class:`AttemptRow`, in its order; the dates are its last four.
_COLUMNS = ("id", *AttemptRow._fields[1:])


class ClaimAttempts(NamedTuple):
    """What :func:`claim_attempts` read, in one statement."""

    #: Newest first: the open attempts of the claim's deliveries and its hosts' kept tokens.
    rows: list[AttemptRow]
    #: ``(host, delivery id)`` of each payment under way at the claim's hosts.
    paying: list[tuple[str, int | None]]


def claim_attempts(ids: Collection[int], hosts: Collection[str], now: datetime) -> ClaimAttempts:
    """The open attempts (:data:`OPEN_STATES`) of the deliveries ``ids`` and the tokens
    ``hosts`` keep (used, not retired, not expired at ``now``), whole; and the host and
    delivery of each attempt under way (pending) at ``hosts``, which is all a claim
    needs of another delivery's payment: while a host that charges per message is
    paid, it has up to ``MAX_PARALLEL_PER_HOST`` of them, and reading each whole cost
    every claim more than the rest of its lookup."""
    delivery, host, state = name("delivery_id"), name("host"), name("state")
    retired, expires = name("retired_at"), name("expires_at")
    whole: list[str] = []
    params: list[object] = []
    if ids:
        whole.append(f"({delivery} IN ({marks(ids)}) AND {state} IN (%s, %s))")
        params += [*ids, *(open_state.value for open_state in OPEN_STATES)]
    if hosts:
        kept = f"{state} = %s AND {retired} IS NULL AND {expires} > %s"
        whole.append(f"({host} IN ({marks(hosts)}) AND {kept})")
        params += [*hosts, PaymentState.USED.value, as_datetime(now)]
    if not whole:
        return ClaimAttempts([], [])
    table, newest = name(PaymentAttempt), name("id")
    columns = ", ".join(name(column) for column in _COLUMNS)
    sql = f"SELECT 1, {columns} FROM {table} WHERE {' OR '.join(whole)}"
    if hosts:
        blanks = ", ".join(["NULL"] * (len(_COLUMNS) - 3))
        sql += (
            f" UNION ALL SELECT 0, {newest}, {delivery}, {host}, {blanks} FROM {table}"
            f" WHERE {host} IN ({marks(hosts)}) AND {state} = %s"
        )
        params += [*hosts, PaymentState.PENDING.value]
    read, found = datetime_reader(), ClaimAttempts([], [])
    for row in fetch(f"{sql} ORDER BY 2 DESC", params):
        if row[0]:
            found.rows.append(AttemptRow(*row[1:-4], *map(read, row[-4:])))
        else:
            found.paying.append((row[3], row[2]))
    return found


def per_message_hosts(hosts: Collection[str]) -> set[str]:
    """Which of ``hosts`` the ledger learnt charge per message (each delivery pays its
    own invoice); the others are taken to sell tokens."""
    if not hosts:
        return set()
    host, charges = name("host"), name("per_message")
    table = name(PaymentHost)
    sql = f"SELECT {host} FROM {table} WHERE {host} IN ({marks(hosts)}) AND {charges} = %s"
    return {found for (found,) in fetch(sql, [*hosts, True])}
