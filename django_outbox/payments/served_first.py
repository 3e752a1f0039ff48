"""The hosts whose new deliveries are published ahead of their lane's unpaid backlog.

A delivery to a host that the ledger learnt charges per message pays its own invoice in
its first attempt; one to a host whose token the ledger keeps goes with that token.
Both are paid deliveries, and a paid message should not wait behind a large unpaid
fan-out: at the send they are published on the priority lane (their rows keep their
message's lane, which their retries use).  The claim still decides the rest (a free
payment slot, a hold, which token), so a host learnt or a token bought after this read
only misses the head start.  One statement per send, with the send's hosts (none for a
send on the priority lane already).

A per-message host's deliveries published first come to the claims at the pace of the
sends, and each takes one of the host's ``MAX_PARALLEL_PER_HOST`` slots as it pays.
With 16 slots that pace filled them (82-88 deliveries held and parked a run of
``bench/paid_hosts.py --known-hosts``); with 32, the default since, none was held, and
the paid host got its deliveries at the node's pace rather than the fan-out's
(docs/benchmarks.md).  Each one published first costs a message and a claim of its own.
"""

from __future__ import annotations

from collections.abc import Collection

from django.utils import timezone

from django_outbox.payments.models import PaymentAttempt, PaymentHost, PaymentState
from django_outbox.payments.statements import as_datetime, fetch
from django_outbox.store.statement_parts import marks, name


def paid_hosts(hosts: Collection[str]) -> set[str]:
    """Which of ``hosts`` charge per message, as the ledger learnt, or have a kept token:
    a paid attempt used there, neither retired (refused since, or opening one delivery
    only) nor expired."""
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
