"""The hosts whose new deliveries are published ahead of their lane's unpaid backlog.

A delivery to a host whose token the ledger keeps goes with that token: it is a paid
delivery, and a paid message should not wait behind a large unpaid fan-out.  At the
send it is published on the priority lane (its row keeps its message's lane, which its
retries use).  The claim still decides the rest (which token, whether to hold), so a
token bought or retired after this read only changes the head start.  One statement
per send, with the send's hosts (none for a send on the priority lane already).

A host that charges per message is not served first: each of its deliveries pays
in its own slot, and a send's worth of them claimed at once fills the slots, so most
are held and parked, then released slot by slot.  Measured with the host known
(``bench/paid_hosts.py --known-hosts``, docs/benchmarks.md), that made 82-88 holds a
run, the paid host slower (15.0-15.6 deliveries/s against 16.1-16.5) and the free
hosts too (76% of the all-free rate against 84%).  Its deliveries go with their
message's, one in each claim, at the pace of the fan-out.
"""

from __future__ import annotations

from collections.abc import Collection

from django.utils import timezone

from django_outbox.payments.models import PaymentAttempt, PaymentState
from django_outbox.payments.statements import as_datetime, fetch, marks, name


def token_hosts(hosts: Collection[str]) -> set[str]:
    """Which of ``hosts`` have a kept token: a paid attempt used there, neither retired
    (refused since, or opening one delivery only) nor expired."""
    if not hosts:
        return set()
    host, state = name("host"), name("state")
    retired, expires = name("retired_at"), name("expires_at")
    sql = (
        f"SELECT DISTINCT {host} FROM {name(PaymentAttempt)} WHERE {host} IN ({marks(hosts)}) "
        f"AND {state} = %s AND {retired} IS NULL AND {expires} > %s"
    )
    params = [*hosts, PaymentState.USED.value, as_datetime(timezone.now())]
    return {found for (found,) in fetch(sql, params)}
