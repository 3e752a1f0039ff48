"""Hosts paused by hand: their deliveries are held, not sent, until the host is resumed.

An operator pauses a host during an incident, or when its admin asks us to
(``outbox hosts pause``, the host's admin page, :func:`pause_host`), with a reason
and, if they like, an end.  A worker parks each delivery it claims for a paused
host, as an extension parks those it holds: no request, no attempt spent,
``queued`` with its ``last_error`` saying ``held: <host> is paused ...``, due again
when the pause ends, or :data:`RECHECK` seconds later for a pause with no end.
Resuming (:func:`resume_host`: the pause ends now) or the end passing brings them
back: each at random within :data:`RELEASE_SPREAD` seconds of the end (a resume makes
them due at once and publishes each so, from :data:`REFRESH` seconds on), so that a
long pause's backlog does not come back in one instant.  An ended pause's row stays
for a slow start's length, then the sweeper deletes it (:func:`end_lapsed_pauses`).
A paused delivery whose batch deadline passes expires as any other.

Workers read the pauses at most every :data:`REFRESH` seconds, so a pause takes
effect within that time; what was already being sent finishes.  They also read the
pauses that ended lately (:func:`ended_pauses`), for the host's slow start.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from django_outbox.broker.publish import publish
from django_outbox.conf import conf
from django_outbox.exceptions import InvalidHost, InvalidInbox
from django_outbox.models import HostPause
from django_outbox.store.parked import release_parked
from django_outbox.store.queries import Lanes
from django_outbox.transport.target import parse_target
from django_outbox.values import columns

#: Seconds a worker trusts its copy of the paused hosts.
REFRESH = 2.0
#: Seconds a delivery to a host paused with no end stays parked before a worker looks again.
RECHECK = 300.0
#: Seconds over which the deliveries a pause held come due when it ends, each at random.
RELEASE_SPREAD = 10.0
#: Steps (seconds) of the countdowns of a resumed pause's deliveries: a message a step.
SPREAD_STEP = 0.5

#: Every pause as last read (ended ones too), by host, and when read (monotonic).
_cached: tuple[dict[str, Pause], float] = ({}, 0.0)
#: The pause ends this process has given for a slow start (:func:`ended_pauses`).
_given: dict[str, datetime] = {}
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
    """End ``host``'s pause now and make its parked deliveries due now; how many.  Each
    is published at random within :data:`RELEASE_SPREAD` seconds from :data:`REFRESH`
    seconds on (by then every worker has read that the pause ended, and none parks it
    again).  The pause is ended as one whose end passed (its ``until`` set to now, the
    row deleted by the sweeper later), so that the workers read when it ended."""
    name = _host(host)
    with transaction.atomic():
        pauses_in_force().filter(name=name).update(until=timezone.now())
        lanes = release_parked(name, starting=held_reason(name))
        transaction.on_commit(lambda: _publish_spread(lanes), robust=True)
    forget_cached()
    return sum(len(ids) for ids in lanes.values())


def _publish_spread(lanes: Lanes) -> None:
    """Publish the ids of ``lanes``, each after a countdown at random within
    :data:`RELEASE_SPREAD` seconds from :data:`REFRESH` seconds on."""
    spread: dict[float, Lanes] = {}
    for lane, ids in lanes.items():
        for pk in ids:
            countdown = REFRESH + SPREAD_STEP * int(random.random() * RELEASE_SPREAD / SPREAD_STEP)
            spread.setdefault(countdown, {}).setdefault(lane, []).append(pk)
    for countdown, ids_by_lane in sorted(spread.items()):
        publish(ids_by_lane, countdown)


def pauses_in_force() -> QuerySet[HostPause]:
    """The pauses not ended: with no end, or one still to come (an ended pause's row
    stays until the sweeper deletes it)."""
    return HostPause.objects.exclude(until__lte=timezone.now())


def _read() -> dict[str, Pause]:
    """Every pause, ended ones too, as this process read them at most :data:`REFRESH`
    seconds ago."""
    global _cached
    with _lock:
        pauses, read_at = _cached
    if time.monotonic() - read_at >= REFRESH:
        rows = HostPause.objects.values_list("name", "reason", "until")
        pauses = {name: Pause(name, reason, until) for name, reason, until in rows}
        with _lock:
            _cached = (pauses, time.monotonic())
    return pauses


def paused_hosts() -> dict[str, Pause]:
    """The hosts paused now, by name, as this process read them at most
    :data:`REFRESH` seconds ago (pauses whose end has passed are left out)."""
    now = timezone.now()
    return {
        name: pause for name, pause in _read().items() if pause.until is None or pause.until > now
    }


def ended_pauses() -> dict[str, datetime]:
    """The hosts whose pause ended less than ``OUTBOX_SLOW_START_SECONDS`` ago, each
    with its end, as this process read them (as :func:`paused_hosts`), that this
    process has not given before: each end once, for the host's slow start.

    An ended pause's row stays that long (:func:`end_lapsed_pauses`), so every process
    reads the end before it sends any delivery the pause held, whether or not it
    read the pause while it held."""
    global _given
    now = timezone.now()
    since = now - timedelta(seconds=conf.SLOW_START_SECONDS)
    ended = {
        name: pause.until
        for name, pause in _read().items()
        if pause.until is not None and since < pause.until <= now
    }
    with _lock:
        new = {name: end for name, end in ended.items() if _given.get(name) != end}
        _given = ended
    return new


def end_lapsed_pauses() -> int:
    """Delete the pauses that ended over ``OUTBOX_SLOW_START_SECONDS`` ago (the
    sweeper's step; until then the workers read when each ended, see
    :func:`ended_pauses`); how many.  Their deliveries came due by themselves, parked
    no later than the end (and a few seconds at random)."""
    ended = timezone.now() - timedelta(seconds=conf.SLOW_START_SECONDS)
    deleted, _ = HostPause.objects.filter(until__lte=ended).delete()
    if deleted:
        forget_cached()
    return deleted


def forget_cached() -> None:
    """Read the pauses again on next use."""
    global _cached
    with _lock:
        _cached = ({}, 0.0)
