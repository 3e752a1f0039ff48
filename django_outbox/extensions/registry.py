"""Which extensions take part in delivery: those the settings turn on.

Paid push (``django_outbox.payments``) is the one the package ships, turned on by
``OUTBOX_PAYMENTS``.  An extension is named by the dotted path of its instance and
imported only once it is turned on, so that the core depends on the seam alone and
an extension's code is not loaded while it is off.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from importlib import import_module
from typing import TYPE_CHECKING, Literal

from django.utils.module_loading import import_string

from django_outbox.conf import conf
from django_outbox.extensions import Extension, Tickets
from django_outbox.values.claimed import ClaimedRow, MessageData

if TYPE_CHECKING:
    from django.dispatch import Signal

#: Signals once declared in :mod:`django_outbox.signals`, and the module that holds them now.
MOVED_SIGNALS = dict.fromkeys(
    ("payment_made", "payment_failed", "payment_budget_exceeded"), "django_outbox.payments.signals"
)


#: Paid push's instance, loaded when ``OUTBOX_PAYMENTS`` is set.
PAID_PUSH = "django_outbox.payments.extension.PAID_PUSH"


def active() -> tuple[Extension, ...]:
    """The extensions turned on, in the order they take part."""
    if conf.PAYMENTS is None:
        return ()
    return (load(PAID_PUSH),)


@functools.cache
def load(path: str) -> Extension:
    """The :class:`Extension` instance at the dotted ``path``, imported once."""
    extension = import_string(path)
    if not isinstance(extension, Extension):
        raise TypeError(f"{path} is not a django_outbox.extensions.Extension")
    return extension


def steps_of(hook: Literal["sweep_steps", "recovery_steps"]) -> dict[str, Callable[[], int]]:
    """The steps that each active extension's ``hook`` gives, together."""
    return {
        name: step for extension in active() for name, step in getattr(extension, hook)().items()
    }


def published_first(hosts: Collection[str]) -> set[str]:
    """Which of ``hosts`` an active extension wants served ahead of their lane's backlog
    (:meth:`~django_outbox.extensions.Extension.published_first`); none when none is on."""
    extensions = active()
    if not extensions or not hosts:
        return set()
    return set().union(*(extension.published_first(hosts) for extension in extensions))


def tickets(claimed: Sequence[ClaimedRow], messages: Mapping[int, MessageData]) -> Tickets:
    """What the active extensions make of a claim (``messages``: the message of each
    claimed delivery); the first to take part in a delivery carries it."""
    found = Tickets()
    for extension in active():
        made = extension.tickets(claimed, messages)
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
