"""Which extensions take part in delivery: those the settings turn on.

Paid push (``django_outbox.payments``) is the one the package ships, turned on by
``OUTBOX_PAYMENTS``; its code is imported only then.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from importlib import import_module
from typing import TYPE_CHECKING

from django_outbox.conf import conf
from django_outbox.extensions import Extension, Tickets
from django_outbox.values.claimed import ClaimedRow

if TYPE_CHECKING:
    from django.dispatch import Signal

#: Signals once declared in :mod:`django_outbox.signals`, and the module that holds them now.
MOVED_SIGNALS = dict.fromkeys(
    ("payment_made", "payment_failed", "payment_budget_exceeded"), "django_outbox.payments.signals"
)


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


def moved_signal(name: str) -> Signal:
    """The signal ``name`` of :data:`MOVED_SIGNALS`, after a warning that says where it
    lives now; :class:`AttributeError` for any other name."""
    if name not in MOVED_SIGNALS:
        raise AttributeError(f"module 'django_outbox.signals' has no attribute {name!r}")
    module = MOVED_SIGNALS[name]
    warnings.warn(
        f"django_outbox.signals.{name} moved to {module}.{name}; the old path goes in a "
        "later release",
        DeprecationWarning,
        stacklevel=3,
    )
    signal: Signal = getattr(import_module(module), name)
    return signal
