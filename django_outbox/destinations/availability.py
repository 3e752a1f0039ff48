"""Destination health: failure days and unavailable hosts.

Like Mastodon, a host that has failed on ``OUTBOX_UNAVAILABLE_AFTER_DAYS``
(7) distinct days with no success in between is marked unavailable, and
deliveries to it are settled as ``skipped`` instead of sent, except those
``OUTBOX_SKIP_UNAVAILABLE`` keeps (by default a ``Follow`` still goes, so a
server that comes back can be followed again).  Any success, the admin action,
or the application telling that the host contacted us (:func:`host_seen`) makes
it available again.  Only the server's own failures count (5xx, 408, no answer):
a ``429`` is a server asking us to slow down, not a failing one, an internal
error of ours is no fault of the host, and a 410 from a shared inbox says an
actor is gone, not that the server is, so none of these marks a host.  The rule
is :mod:`django_outbox.destinations.failure_days`'s, which webhook endpoints follow too.

The host's latest failure (status and error) is kept on its row: the reason the
admin, ``outbox status --host`` and the ``host_unavailable`` signal give.  The
signals ``host_unavailable`` and ``host_available`` are sent once the change that
makes them is committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from django.db import transaction
from django.db.models import QuerySet

from django_outbox.conf import conf
from django_outbox.destinations.failure_days import MarkedNames, count_failure_day
from django_outbox.models import Host
from django_outbox.signals import host_available, host_unavailable, send_logged
from django_outbox.values.safe_text import one_line

#: The longest error kept as a host's reason.
REASON_LENGTH = 1000

Failure = tuple[int | None, str]
"""A host's latest failure: the status it answered (``None``: no answer) and the error."""

_unavailable = MarkedNames(Host, "name", "unavailable_since")


def skip_unless_follow(inbox: str, activity_type: str) -> bool:
    """The default ``OUTBOX_SKIP_UNAVAILABLE``: skip everything but a ``Follow``."""
    return activity_type != "Follow"


def reason(status: int | None, error: str) -> str:
    """A failure as one line: ``"HTTP 503: ..."``, or the error alone when nothing answered."""
    text = one_line(error)[:REASON_LENGTH]
    if status is None or text.startswith(f"HTTP {status}"):
        return text
    return f"HTTP {status}: {text}" if text else f"HTTP {status}"


def record_successes(hosts: Iterable[str]) -> None:
    """Forget the failures of hosts that just accepted a delivery."""
    names = set(hosts)
    if names:
        _forget(Host.objects.filter(name__in=names))


def host_seen(host: str) -> bool:
    """The application heard from ``host`` (an inbound activity): if it is marked
    unavailable, deliveries go to it again.  Returns whether it was unavailable.

    Its failure days are kept: one more failure marks it unavailable again, and only
    a delivery it accepts clears them, so that a host that talks to us but cannot
    receive is not retried for days on end.
    """
    name = host.strip().lower()
    with transaction.atomic():
        cleared = Host.objects.filter(name=name, unavailable_since__isnull=False).update(
            unavailable_since=None
        )
        if cleared:
            _announce_available([name])
    return bool(cleared)


def forget_hosts(names: Iterable[str]) -> int:
    """Delete the Host rows of ``names`` (a reset): the number deleted."""
    return _forget(Host.objects.filter(name__in=sorted(set(names))))


def _forget(rows: QuerySet[Host]) -> int:
    with transaction.atomic():
        back = list(rows.filter(unavailable_since__isnull=False).values_list("name", flat=True))
        deleted, _ = rows.delete()
        if back:
            _announce_available(back)
    return deleted


def _announce_available(names: list[str]) -> None:
    forget_cached()

    def send() -> None:
        forget_cached()
        for name in names:
            send_logged(host_available, Host, host=name)

    transaction.on_commit(send, robust=True)


def record_failures(failures: Mapping[str, Failure]) -> None:
    """Count today as a failure day for each host, keep its latest failure as its
    reason, and mark those now unavailable (``host_unavailable`` once committed)."""
    if not failures:
        return
    latest = {
        name: {"last_status": status, "last_error": reason(status, error)}
        for name, (status, error) in failures.items()
    }
    with transaction.atomic():
        marked = count_failure_day(
            Host,
            "name",
            latest,
            after_days=conf.UNAVAILABLE_AFTER_DAYS,
            mark="unavailable_since",
        )
        if marked:
            rows = Host.objects.filter(name__in=marked)
            _announce_unavailable(list(rows.values_list("name", "unavailable_since", "last_error")))


def _announce_unavailable(marked: list[tuple[str, datetime | None, str]]) -> None:
    def send() -> None:
        forget_cached()
        for name, since, why in marked:
            send_logged(host_unavailable, Host, host=name, since=since, reason=why)

    transaction.on_commit(send, robust=True)


def unavailable_hosts() -> frozenset[str]:
    """Hosts marked unavailable, as this process last read them.

    The copy is at most ``OUTBOX_HOSTS_REFRESH`` seconds (60) old, so a host
    another process marks, or the admin resets, is seen within that time.
    """
    return _unavailable.get()


def forget_cached() -> None:
    """Read the unavailable hosts again on next use (tests, admin resets)."""
    _unavailable.forget()
