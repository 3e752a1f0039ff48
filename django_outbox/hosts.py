"""Destination health: failure days and unavailable hosts.

Like Mastodon, a host that has failed on ``OUTBOX_UNAVAILABLE_AFTER_DAYS``
(7) distinct days with no success in between is marked unavailable, and
deliveries to it are settled as ``skipped`` instead of sent, except those
``OUTBOX_SKIP_UNAVAILABLE`` keeps (by default a ``Follow`` still goes, so a
server that comes back can be followed again).  Any success, or the admin
action, makes it available again.  Only failures of the server count (5xx,
408, no answer; not a 429): a 410 from a shared inbox says an actor is gone, not
that the server is, so refusals never mark a host.
"""

from __future__ import annotations

from collections.abc import Iterable

from django_outbox.conf import conf
from django_outbox.failure_days import MarkedNames, count_failure_day
from django_outbox.models import Host

_unavailable = MarkedNames(Host, "name", "unavailable_since")


def skip_unless_follow(inbox: str, activity_type: str) -> bool:
    """The default ``OUTBOX_SKIP_UNAVAILABLE``: skip everything but a ``Follow``."""
    return activity_type != "Follow"


def record_successes(hosts: Iterable[str]) -> None:
    """Forget the failures of hosts that just accepted a delivery."""
    names = set(hosts)
    if names:
        Host.objects.filter(name__in=names).delete()
        if _unavailable.holds_any(names):
            forget_cached()


def record_failures(hosts: Iterable[str]) -> None:
    """Count today as a failure day for each host, marking those now unavailable."""
    failures: dict[str, dict[str, object]] = {name: {} for name in hosts}
    count_failure_day(
        Host, "name", failures, after_days=conf.UNAVAILABLE_AFTER_DAYS, mark="unavailable_since"
    )


def unavailable_hosts() -> frozenset[str]:
    """Hosts marked unavailable, as this process last read them.

    The copy is at most ``OUTBOX_HOSTS_REFRESH`` seconds (60) old, so a host
    another process marks, or the admin resets, is seen within that time.
    """
    return _unavailable.get()


def forget_cached() -> None:
    """Read the unavailable hosts again on next use (tests, admin resets)."""
    _unavailable.forget()
