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

import threading
import time
from collections.abc import Iterable

from django.db.models import F
from django.utils import timezone

from django_outbox.conf import conf
from django_outbox.models import Host

_unavailable: tuple[frozenset[str], float] = (frozenset(), 0.0)
_lock = threading.Lock()


def skip_unless_follow(inbox: str, activity_type: str) -> bool:
    """The default ``OUTBOX_SKIP_UNAVAILABLE``: skip everything but a ``Follow``."""
    return activity_type != "Follow"


def record_successes(hosts: Iterable[str]) -> None:
    """Forget the failures of hosts that just accepted a delivery."""
    names = set(hosts)
    if names:
        Host.objects.filter(name__in=names).delete()
        if names & _unavailable[0]:
            forget_cached()


def record_failures(hosts: Iterable[str]) -> None:
    """Count today as a failure day for each host, marking those now unavailable."""
    names = set(hosts)
    if not names:
        return
    now = timezone.now()
    today = now.date()
    Host.objects.filter(name__in=names).exclude(last_failure_day=today).update(
        failure_days=F("failure_days") + 1, last_failure_day=today
    )
    Host.objects.bulk_create(
        [Host(name=name, last_failure_day=today, first_failure_at=now) for name in names],
        ignore_conflicts=True,
    )
    Host.objects.filter(
        name__in=names,
        failure_days__gte=conf.UNAVAILABLE_AFTER_DAYS,
        unavailable_since__isnull=True,
    ).update(unavailable_since=now)


def unavailable_hosts() -> frozenset[str]:
    """Hosts marked unavailable, as this process last read them.

    The copy is at most ``OUTBOX_HOSTS_REFRESH`` seconds (60) old, so a host
    another process marks, or the admin resets, is seen within that time.
    """
    global _unavailable
    with _lock:
        names, read_at = _unavailable
    if time.monotonic() - read_at < conf.HOSTS_REFRESH:
        return names
    names = frozenset(
        Host.objects.filter(unavailable_since__isnull=False).values_list("name", flat=True)
    )
    with _lock:
        _unavailable = (names, time.monotonic())
    return names


def forget_cached() -> None:
    """Read the unavailable hosts again on next use (tests, admin resets)."""
    global _unavailable
    with _lock:
        _unavailable = (frozenset(), 0.0)
