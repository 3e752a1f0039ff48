"""The hosts whose new deliveries are published ahead of their lane's unpaid backlog.

A delivery to a host that the ledger learnt charges per message pays its own invoice in
its first attempt; one to a host whose token the ledger keeps goes with that token.
Both are paid deliveries, and a paid message should not wait behind a large unpaid
fan-out: at the send they are published on the priority lane (their rows keep their
message's lane, which their retries use).  The claim still decides everything else
(slots, holds, which token), so a host learnt or a token bought after this read only
misses the head start.  One statement per send, with the send's hosts.
"""

from __future__ import annotations

from collections.abc import Collection

from django.utils import timezone

from django_outbox.payments.models import PaymentAttempt, PaymentHost, PaymentState
from django_outbox.payments.statements import as_datetime, fetch, marks, name


def paid_hosts(hosts: Collection[str]) -> set[str]:
    """Which of ``hosts`` charge per message, or have a kept token (used, not retired,
    not expired)."""
    if not hosts:
        return set()
    host, charges = name("host"), name("per_message")
    state, retired, expires = name("state"), name("retired_at"), name("expires_at")
    sql = (
        f"SELECT {host} FROM {name(PaymentHost)} WHERE {host} IN ({marks(hosts)}) "
        f"AND {charges} = %s UNION SELECT {host} FROM {name(PaymentAttempt)} "
        f"WHERE {host} IN ({marks(hosts)}) AND {state} = %s AND {retired} IS NULL "
        f"AND {expires} > %s"
    )
    params = [*hosts, True, *hosts, PaymentState.USED.value, as_datetime(timezone.now())]
    return {found for (found,) in fetch(sql, params)}
