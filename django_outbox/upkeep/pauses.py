"""Hosts paused by hand: their deliveries are held, not sent, until the host is resumed.

An operator pauses a host during an incident, or when its admin asks us to
(``outbox hosts pause``, the host's admin page, :func:`pause_host`), with a reason
and, if they like, an end.  A worker parks each delivery it claims for a paused
host, as an extension parks those it holds: no request, no attempt spent,
``queued`` with its ``last_error`` saying ``held: <host> is paused ...``, due again
when the pause ends, or :data:`RECHECK` seconds later for a pause with no end.
Resuming (:func:`resume_host`, or the end passing) brings them back: each at random
within :data:`RELEASE_SPREAD` seconds of the end (of :data:`REFRESH` seconds after a
resume), so that a long pause's backlog does not come back in one instant.  A paused
delivery whose batch deadline passes expires as any other.

Workers read the pauses at most every :data:`REFRESH` seconds, so a pause takes
effect within that time; what was already being sent finishes.  Each worker process
notes the pauses it saw end (:func:`ended_pauses`), for the host's slow start.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from django_outbox.broker.publish import publish_on_commit
from django_outbox.exceptions import InvalidHost, InvalidInbox
from django_outbox.models import HostPause
from django_outbox.store.parked import release_parked, spread_due
from django_outbox.transport.target import parse_target
from django_outbox.values import columns

#: Seconds a worker trusts its copy of the paused hosts.
REFRESH = 2.0
#: Seconds a delivery to a host paused with no end stays parked before a worker looks again.
RECHECK = 300.0
#: Seconds over which the deliveries a pause held come due when it ends, each at random.
RELEASE_SPREAD = 10.0

#: The pauses as last read: by host, when read (monotonic), and when read (wall clock).
_cached: tuple[dict[str, Pause], float, datetime | None] = ({}, 0.0, None)
#: The hosts this process saw paused: the last read that held each pause, and the pause.
_watched: dict[str, tuple[datetime, Pause]] = {}
#: The hosts whose pause this process saw end, not yet taken: when each ended.
_ended: dict[str, datetime] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class Pause:
    """A host's pause as the workers read it."""

    host: str
    reason: str
    until: datetime | None

    @property
    def error(self) -> str:
        """The ``last_error`` of its parked deliveries."""
        return held_reason(self.host) + (f": {self.reason}" if self.reason else "")

    def parked_until(self, now: datetime) -> datetime:
        """When a delivery parked now is due again: at random within
        :data:`RELEASE_SPREAD` seconds of the pause's end, or a recheck."""
        recheck = now + timedelta(seconds=RECHECK)
        if self.until is None:
            return recheck
        return min(self.until + timedelta(seconds=random.random() * RELEASE_SPREAD), recheck)


def held_reason(host: str) -> str:
    """How the ``last_error`` of a delivery parked while ``host`` is paused begins."""
    return f"held: {host} is paused"


def _host(host: str) -> str:
    """``host`` as deliveries store it (lower case, IDNA), or :class:`InvalidHost`."""
    try:
        target = parse_target(f"https://{host.strip()}/", columns.URL)
    except InvalidInbox:
        raise InvalidHost(f"{host!r} is not a host name") from None
    if target.port != 443 or target.path != "/" or not host.strip():
        raise InvalidHost(f"{host!r} is not a host name")
    return target.host


def pause_host(host: str, reason: str = "", until: datetime | None = None) -> Pause:
    """Hold every delivery to ``host`` until :func:`resume_host` (or ``until``).

    Pausing a paused host changes its reason and end.  Raises
    :class:`~django_outbox.exceptions.InvalidHost` for a value that is not a host name,
    or an ``until`` that has passed.
    """
    name = _host(host)
    if until is not None and until <= timezone.now():
        raise InvalidHost(f"a pause of {name} cannot end in the past ({until.isoformat()})")
    HostPause.objects.update_or_create(
        name=name, defaults={"reason": reason[:500], "until": until, "paused_at": timezone.now()}
    )
    forget_cached()
    return Pause(name, reason[:500], until)


def resume_host(host: str) -> int:
    """End ``host``'s pause and publish its parked deliveries, each due at random within
    :data:`RELEASE_SPREAD` seconds from :data:`REFRESH` seconds on (by then every worker
    has read that the pause ended, and none parks them again); how many."""
    name = _host(host)
    with transaction.atomic():
        HostPause.objects.filter(name=name).delete()
        lanes = release_parked(name, starting=held_reason(name))
        for countdown, spread in spread_due(lanes, RELEASE_SPREAD, REFRESH).items():
            publish_on_commit(spread, countdown or None)
    forget_cached()
    return sum(len(ids) for ids in lanes.values())


def paused_hosts() -> dict[str, Pause]:
    """The hosts paused now, by name, as this process read them at most
    :data:`REFRESH` seconds ago (pauses whose end has passed are left out)."""
    global _cached
    with _lock:
        pauses, read_at, read_on = _cached
    if read_on is None or time.monotonic() - read_at >= REFRESH:
        read_on = timezone.now()
        rows = HostPause.objects.values_list("name", "reason", "until")
        pauses = {name: Pause(name, reason, until) for name, reason, until in rows}
        with _lock:
            _cached = (pauses, time.monotonic(), read_on)
    now = timezone.now()
    paused = {
        name: pause for name, pause in pauses.items() if pause.until is None or pause.until > now
    }
    _watch(paused, read_on, now)
    return paused


def _watch(paused: dict[str, Pause], read_on: datetime, now: datetime) -> None:
    """Note the pauses that ended since the last look: one that lapsed at its end, one
    resumed at the last read that still held it (the earliest it may have ended: a
    slow start from then is at most :data:`REFRESH` seconds ahead for a process that
    reads often, and over already for one that had not read for long)."""
    global _watched
    with _lock:
        for name, (seen, pause) in _watched.items():
            if name not in paused:
                lapsed = pause.until is not None and pause.until <= now
                _ended[name] = pause.until if pause.until is not None and lapsed else seen
        _watched = {name: (read_on, pause) for name, pause in paused.items()}


def ended_pauses() -> dict[str, datetime]:
    """The hosts whose pause this process saw end since last asked, each with when it
    ended (see :func:`_watch`); taken, so each end is given once."""
    with _lock:
        ended = dict(_ended)
        _ended.clear()
    return ended


def end_lapsed_pauses() -> int:
    """Delete the pauses whose end has passed (the sweeper's step); how many.  Their
    deliveries come due by themselves, parked no later than the end."""
    deleted, _ = HostPause.objects.filter(until__lte=timezone.now()).delete()
    if deleted:
        forget_cached()
    return deleted


def forget_cached() -> None:
    """Read the pauses again on next use."""
    global _cached
    with _lock:
        _cached = ({}, 0.0, None)
