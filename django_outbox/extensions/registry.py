"""Which extensions take part in delivery: those the settings turn on.

Paid push (``django_outbox.payments``) is the one the package ships, turned on by
``OUTBOX_PAYMENTS``; its code is imported only then.
"""

from __future__ import annotations

from collections.abc import Sequence

from django_outbox.conf import conf
from django_outbox.extensions import Extension, Tickets
from django_outbox.values.claimed import ClaimedRow


def active() -> tuple[Extension, ...]:
    """The extensions turned on, in the order they take part."""
    if conf.PAYMENTS is None:
        return ()
    from django_outbox.payments.extension import PAID_PUSH

    return (PAID_PUSH,)


def tickets(claimed: Sequence[ClaimedRow]) -> Tickets:
    """What the active extensions make of a claim; the first to take part in a delivery
    carries it."""
    found = Tickets()
    for extension in active():
        made = extension.tickets(claimed)
        found.holds.update({pk: why for pk, why in made.holds.items() if pk not in found.holds})
        for pk, ticket in made.tickets.items():
            found.tickets.setdefault(pk, ticket)
    return found
