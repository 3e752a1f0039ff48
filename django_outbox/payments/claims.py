"""The claim's part in paid push: what each claimed delivery may pay, and which to hold.

A claim may read the database (a sending thread may not), so here each claimed
delivery gets its open attempt and its host's kept token, and a delivery whose host
another delivery is paying, with no token to present, is held instead of sent: on
a host that sells tokens it will use the one being bought, and on any host the
payments go one after another (a unique constraint allows one pending attempt per
host).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from django_outbox.conf import conf
from django_outbox.payments.lookups import kept_tokens, open_attempts, paying_hosts
from django_outbox.payments.paying import PaymentJob, payment_client
from django_outbox.store.claimed import ClaimedRow
from django_outbox.store.queries import queued_per_host

#: Longest hold of a delivery whose host another delivery is paying, in seconds.
HOLD_LIMIT = 60.0


def payment_jobs(claimed: Sequence[ClaimedRow]) -> tuple[dict[int, PaymentJob], dict[int, float]]:
    """What each claimed delivery may pay and present, and those to hold for a while
    (with no token for their host, which another delivery is paying); nothing when
    payments are off."""
    settings = conf.PAYMENTS
    if settings is None:
        return {}, {}
    client = payment_client(settings)
    attempts = open_attempts([row.id for row in claimed])
    tokens = kept_tokens(row.host for row in claimed)
    paying = paying_hosts(row.host for row in claimed if row.host not in tokens)
    held = [
        row for row in claimed if row.id not in attempts and paying.get(row.host, row.id) != row.id
    ]
    waiting = queued_per_host(row.host for row in held) if held else {}
    wait = {row.id: _hold(settings.hold_while_paying, waiting.get(row.host, 0)) for row in held}
    jobs = {
        row.id: PaymentJob(settings, client, attempts.get(row.id), tokens.get(row.host))
        for row in claimed
    }
    return jobs, wait


def _hold(base: float, queued: int) -> float:
    """Seconds to hold a delivery while its host is being paid: ``base``, longer the more
    deliveries wait for that host (up to a minute), spread at random so that they do not
    all come back at once and payments to that host go one after another."""
    return min(HOLD_LIMIT, max(base, base * queued / 2)) * (0.75 + random.random() / 2)
