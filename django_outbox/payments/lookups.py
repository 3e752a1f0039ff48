"""What claims and the sweeper read of payment attempts and budgets; the writes are
:mod:`~django_outbox.payments.ledger`'s.

A claim calls :func:`claim_lookup` (two queries) to hand the attempts what to pay and
what to present, and to hold deliveries whose host is being paid as much as it may
be; the ledger asks :func:`challenge_lookup` (with the host's slots, or
:func:`pending_slots` again after a conflict) and :func:`host_charges` before storing
a challenge; the sweeper asks :func:`orphans` which pending payments no delivery will
resolve.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import NamedTuple

from django.db.models import Q
from django.utils import timezone

from django_outbox.models import FINAL_STATES
from django_outbox.payments.claim_queries import AttemptRow, claim_attempts, per_message_hosts
from django_outbox.payments.models import (
    PaymentAttempt,
    PaymentBudget,
    PaymentHost,
    PaymentState,
)
from django_outbox.payments.reports import Challenge, KeptToken, OpenAttempt
from django_outbox.payments.statements import fetch
from django_outbox.store.statement_parts import name


def day_of(moment: datetime) -> date:
    """The UTC day a budget counts ``moment`` in."""
    return moment.astimezone(UTC).date()


@dataclass(frozen=True)
class ClaimLookup:
    """What a claim reads of payments for its deliveries, in two queries."""

    #: The newest pending or paid attempt of each delivery that has one.
    attempts: dict[int, OpenAttempt]
    #: The newest token each host accepted, unexpired and not refused since.
    tokens: dict[str, KeptToken]
    #: The hosts with payments under way, and the deliveries they are for.
    paying: dict[str, set[int | None]]
    #: The hosts known to charge per message (:func:`.claim_queries.per_message_hosts`).
    per_message: set[str]


def claim_lookup(delivery_ids: Sequence[int], hosts: Iterable[str]) -> ClaimLookup:
    """The open attempts of ``delivery_ids``, and the kept tokens, payments under way and
    way of charging of ``hosts``: two queries, however many deliveries a claim took."""
    ids, hosts = set(delivery_ids), set(hosts)
    read = claim_attempts(ids, hosts, timezone.now())
    found = ClaimLookup({}, {}, {}, per_message_hosts(hosts))
    for host, delivery in read.paying:
        found.paying.setdefault(host, set()).add(delivery)
    newest: dict[str, datetime] = {}
    for row in read.rows:
        if row.state != PaymentState.USED:  # an open attempt of one of the claim's deliveries
            if row.delivery_id is not None and row.delivery_id not in found.attempts:
                found.attempts[row.delivery_id] = open_attempt_of(row)
            continue
        paid = row.paid_at or row.created_at
        if row.host not in newest or paid > newest[row.host]:
            newest[row.host] = paid
            found.tokens[row.host] = KeptToken(
                row.pk, row.host, row.scheme, row.macaroon, row.preimage
            )
    return found


def open_attempt_of(row: PaymentAttempt | AttemptRow) -> OpenAttempt:
    """The attempt ``row`` as a sending thread is handed it (pending, or paid)."""
    return OpenAttempt(
        attempt_id=row.pk,
        destination=row.destination,
        state=row.state,
        scheme=row.scheme,
        payment_hash=row.payment_hash,
        amount_msat=row.amount_msat,
        pay_amount_msat=row.pay_amount_msat,
        invoice_expires_at=row.invoice_expires_at.timestamp(),
        expires_at=row.expires_at.timestamp(),
        invoice=row.invoice,
        macaroon=row.macaroon,
        preimage=row.preimage,
        reserved_msat=row.reserved_msat,
    )


class History(NamedTuple):
    """What the ledger reads before storing a delivery's challenge
    (:func:`challenge_lookup`)."""

    #: How many payments the delivery made or has under way.
    made: int
    #: The attempt already stored for the challenge's invoice (its payment hash is unique).
    earlier: PaymentAttempt | None
    #: The slots of the payments under way at the host asked about (None: not asked).
    slots: set[int] | None = None


def challenge_lookup(delivery_id: int, challenge: Challenge, host: str | None = None) -> History:
    """The delivery's payments made or under way, and the attempt stored for the
    challenge's invoice, if any; with ``host``, also the slots of its payments under way
    (:func:`pending_slots`), so that a store reads both in one query.  A second reads
    the invoice's attempt whole when there is one."""
    payment_hash, pending = challenge.payment_hash, PaymentState.PENDING.value
    where = "(delivery_id = %s AND (paid_at IS NOT NULL OR state = %s)) OR payment_hash = %s"
    params: list[object] = [pending, delivery_id, pending, payment_hash]
    if host is not None:
        where += " OR (host = %s AND state = %s)"
        params += [host, pending]
    sql = (
        f"SELECT id, delivery_id, payment_hash, paid_at IS NOT NULL OR state = %s, host, "
        f"state, slot FROM {name(PaymentAttempt)} WHERE {where}"
    )
    made, earlier = 0, None
    slots: set[int] | None = None if host is None else set()
    for pk, delivery, row_hash, spent, at, state, slot in fetch(sql, params):
        made += delivery == delivery_id and bool(spent)
        earlier = pk if row_hash == payment_hash else earlier
        if slots is not None and at == host and state == pending:
            slots.add(slot)
    stored = None if earlier is None else PaymentAttempt.objects.filter(pk=earlier).first()
    return History(made, stored, slots)


def pending_slots(host: str) -> set[int]:
    """The slots of ``host``'s payments under way (none: nobody is paying it)."""
    sql = f"SELECT slot FROM {name(PaymentAttempt)} WHERE host = %s AND state = %s"
    return {slot for (slot,) in fetch(sql, [host, PaymentState.PENDING.value])}


def host_charges(host: str) -> bool | None:
    """How the ledger learnt ``host`` charges: True per message, False by the token,
    None when it has not learnt it yet."""
    sql = f"SELECT per_message FROM {name(PaymentHost)} WHERE host = %s"
    return next((bool(charges) for (charges,) in fetch(sql, [host])), None)


def orphans(older_than: float, limit: int = 20) -> list[tuple[int, str]]:
    """``(id, payment hash)`` of pending attempts that no live delivery will resolve:
    their delivery finished (given up, refused) or was pruned.  They block their host."""
    cutoff = timezone.now() - timedelta(seconds=older_than)
    rows = PaymentAttempt.objects.filter(state=PaymentState.PENDING, created_at__lt=cutoff)
    rows = rows.filter(Q(delivery__isnull=True) | Q(delivery__state__in=FINAL_STATES))
    return list(rows.order_by("id").values_list("id", "payment_hash")[:limit])


def bought_meanwhile(host: str, delivery_id: int, now: datetime) -> bool:
    """Whether ``host`` has a token to try first: one it accepted, or one paid for a
    delivery still under way.  Asked after the pending row is written, so that the
    statement waits for (and then sees) another worker's payment committing at once."""
    live = ~Q(delivery__state__in=FINAL_STATES) & Q(delivery__isnull=False)
    accepted = Q(state=PaymentState.USED, retired_at__isnull=True, expires_at__gt=now)
    return (
        PaymentAttempt.objects.filter(host=host)
        .exclude(delivery_id=delivery_id)
        .filter(accepted | (Q(state=PaymentState.PAID) & live))
        .exists()
    )


def spent_today(sender: str) -> int:
    """What ``sender`` has paid or reserved today (UTC), in millisatoshis."""
    row = PaymentBudget.objects.filter(sender=sender, day=day_of(timezone.now())).first()
    return row.spent_msat if row else 0
