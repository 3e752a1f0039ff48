"""The claim's part in paid push: what each claimed delivery may pay, and which to hold.

A claim may read the database (a sending thread may not), so here each claimed
delivery gets its open attempt and its host's kept token (one query), and a delivery
whose host is being paid as much as it may be is held instead of sent (the worker
parks it in the database until its hold ends, or until the ledger makes it due when a
payment ends).  On a host that sells tokens (or not known yet to charge per message)
the payments go one after another and the others will use the token being bought; on
one that charges per message up to ``MAX_PARALLEL_PER_HOST`` go at once (a unique
constraint allows one pending attempt per host and slot).  Each job knows
when its delivery's lease ends, so that a payment starts only while the lease can
cover it (:func:`~django_outbox.payments.settling.payment_seconds`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from django_outbox.conf import conf
from django_outbox.payments.hold_times import hold_for, spread
from django_outbox.payments.lookups import claim_lookup
from django_outbox.payments.paying import PaymentJob, met_402_lately, payment_client
from django_outbox.store.queries import queued_per_host
from django_outbox.values.claimed import ClaimedRow, MessageData

#: Hosts whose queue length a process keeps at most.
_COUNTED_HOSTS = 10_000
#: Host -> (deliveries queued for it, monotonic time until which that count is used).
_counted: dict[str, tuple[int, float]] = {}


def payment_jobs(
    claimed: Sequence[ClaimedRow], messages: Mapping[int, MessageData]
) -> tuple[dict[int, PaymentJob], dict[int, float]]:
    """What each claimed delivery may pay and present, and those to hold for a while;
    nothing when payments are off (``messages``: the message of each, by id).

    On a host that charges per message, each delivery pays its own invoice: as many go
    as its host has free slots (``MAX_PARALLEL_PER_HOST`` less its payments under way),
    the others are held, and none is handed a kept token (it opens one delivery).  On
    any other host, those with no token are held while another delivery pays it, or
    while one of this process met its 402 a moment ago.

    Called as the claim returns: its lease is taken to end ``OUTBOX_LEASE_SECONDS``
    from now (the claim committed a moment ago, well within the margin kept for
    saving the outcome)."""
    settings = conf.PAYMENTS
    if settings is None:
        return {}, {}
    lease_ends = time.monotonic() + conf.LEASE_SECONDS
    client = payment_client(settings)
    found = claim_lookup([row.id for row in claimed], (row.host for row in claimed))
    attempts, tokens, paying = found.attempts, found.tokens, found.paying
    slots = {
        host: settings.max_parallel_per_host - len(paying.get(host, ()))
        for host in found.per_message
    }
    held = []
    for row in claimed:
        if row.id in attempts:
            continue
        if row.host in found.per_message:
            if slots[row.host] <= 0:
                held.append(row)
            slots[row.host] -= 1
        elif row.host not in tokens and (_others(paying, row) or met_402_lately(row.host)):
            held.append(row)
    waiting = _queued({row.host for row in held}, settings.hold_while_paying)
    one_spread = spread()
    wait = {
        row.id: hold_for(settings.hold_while_paying, waiting.get(row.host, 0), one_spread)
        for row in held
    }
    jobs = {
        row.id: PaymentJob(
            settings,
            client,
            lease_ends,
            attempts.get(row.id),
            None if row.host in found.per_message else tokens.get(row.host),
            paying=row.host not in found.per_message and _others(paying, row),
            per_message=row.host in found.per_message,
            row=row,
            sender=messages[row.message_id].sender,
        )
        for row in claimed
    }
    return jobs, wait


def _others(paying: dict[str, set[int | None]], row: ClaimedRow) -> bool:
    """Whether another delivery's payment to the row's host is under way."""
    return bool(paying.get(row.host, set()) - {row.id})


def _queued(hosts: set[str], ttl: float) -> dict[str, int]:
    """How many deliveries are queued for each of ``hosts``, counted at most every
    ``ttl`` seconds per host in a process: a hold's length needs no exact count, and
    while a host is paid every claim of a fan-out holds some of its deliveries."""
    now = time.monotonic()
    stale = {host for host in hosts if _counted.get(host, (0, 0.0))[1] <= now}
    if stale:
        if len(_counted) > _COUNTED_HOSTS:
            _counted.clear()
        counts = queued_per_host(stale)
        _counted.update({host: (counts.get(host, 0), now + ttl) for host in stale})
    return {host: _counted[host][0] for host in hosts}
