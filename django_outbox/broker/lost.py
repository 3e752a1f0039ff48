"""Deliveries whose Celery message a consumer took and never started, told from the lanes.

A queue is first in, first out: while a message waits in a lane's list, every
message published to that list before it has been taken by some consumer.  A
consumer that is alive starts what it took within ``OUTBOX_HEARTBEAT_TIMEOUT``
(a task claims its deliveries as its engine has room, waiting 10 s at most); one
that died holds it unacknowledged (kombu's Redis transport gives it back after
its ``visibility_timeout``, an hour).  So each recovery pass the leader looks at
the oldest message waiting in each lane (:mod:`django_outbox.broker.backlog`) and notes
a *frontier*: what that look proves taken.  A heartbeat timeout later it judges
by that note: a queued delivery, due for as long, that the frontier shows taken
and that nobody has claimed, is lost, and is published again.  The same catches
rows whose message was never published (a process that died between its commit
and its publish): once messages published after them wait, theirs would have
been taken too.

What a frontier shows taken:

- an empty lane: every message published before the look;
- a waiting message of the package's (its header: published at ``at``, first
  delivery ``first``) whose dispatch's stamp is known (its first row still has
  the ``dispatched_at`` it had when the message was published): every row
  stamped before that stamp (a dispatch stamps its rows, then publishes them),
  and the rows of that stamp with ids below ``first`` (a dispatch publishes in
  ascending order), which tells apart the messages of one large dispatch,
  published in the same instant;
- one whose stamp is not known (an expansion's message, or its first row
  stamped again since): every row stamped :data:`PUBLISH_SLACK` before ``at``;
- a lane whose oldest messages are none of the package's: nothing.

Stamps and publish times come from the clocks of the processes that wrote them
(a view's, a worker's), the look's time from the leader's.  A row wrongly taken
for lost was stamped before the frontier yet published after it (its
transaction outlived a concurrent dispatch's, or its machine's clock is
behind), and it must also still be unclaimed a heartbeat timeout after the
look: its message had that long to reach a consumer.  A time later than the
leader's own clock is never believed (and logged, once), so that a publisher's
clock that runs ahead cannot make the rule judge ahead of the leader's.

Errors of the rule cost little: one taken for lost gets a second Celery message,
which finds its rows claimed (claims are conditional); one missed waits for the
sweeper's ``OUTBOX_REDISPATCH_AFTER`` (900 s).  The grace is therefore no longer
than a live consumer needs: a worker whose prefetched messages wait longer than
the heartbeat timeout (a ``CELERY_WORKER_PREFETCH_MULTIPLIER`` above 1, or many
long countdowns) gets some of them published a second time.
"""

from __future__ import annotations

import functools
import logging
import operator
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from django_outbox.broker.backlog import Backlog, Sent
from django_outbox.broker.publish import mark_dispatched, start_expansions, stuck_expansions
from django_outbox.models import Delivery, DeliveryState
from django_outbox.store.queries import Lanes

logger = logging.getLogger("django_outbox.recovery")

#: Seconds allowed, where only a publish time is known, between stamping rows
#: dispatched and publishing their message (the rest of the sending transaction,
#: usually milliseconds) and for the machines' clocks differing (NTP keeps them
#: within milliseconds).
PUBLISH_SLACK = 2.0
#: Expansions restarted that are remembered, so as not to restart them every pass.
_RESTARTS_KEPT = 10_000


@dataclass(frozen=True)
class Frontier:
    """What one look at one list of a lane showed taken by consumers."""

    before: datetime
    """Every message published to it before this (never later than the look)."""
    stamp: datetime | None = None
    """The ``dispatched_at`` of the dispatch of the message looked at, if known..."""
    first: int | None = None
    """...whose messages before it carry the ids below this one."""

    @property
    def cutoff(self) -> datetime:
        """Rows stamped dispatched before this had their message published before
        the one looked at: a dispatch stamps its rows, then publishes them."""
        if self.stamp is not None:
            return min(self.stamp, self.before)
        return self.before - timedelta(seconds=PUBLISH_SLACK)

    def taken(self) -> Q:
        """The deliveries whose message this frontier shows taken."""
        shown = Q(dispatched_at__lt=self.cutoff)
        if self.stamp is not None and self.first is not None:
            shown |= Q(dispatched_at=self.stamp, id__lt=self.first)
        return shown


#: A lane's frontiers, one per list holding messages: a message was taken if every
#: one of them shows it (it went to one list, which is not known).
Frontiers = tuple[Frontier, ...]


def frontiers_of(backlog: Backlog, now: datetime) -> Frontiers | None:
    """What ``backlog``, seen at ``now``, shows taken; ``None``: nothing can be said."""
    if backlog.size == 0:
        return (Frontier(now),)
    if not backlog.oldest or None in backlog.oldest:
        return None
    return tuple(_frontier(sent, now) for sent in backlog.oldest if sent is not None)


def _frontier(sent: Sent, now: datetime) -> Frontier:
    # The stamp of its own rows: its first row's, unless stamped again since it was sent.
    stamp = (
        Delivery.objects.filter(pk=sent.first, dispatched_at__lte=sent.at)
        .values_list("dispatched_at", flat=True)
        .first()
        if sent.first is not None
        else None
    )
    return Frontier(min(sent.at, now), stamp, sent.first)


def _ahead(backlog: Backlog, now: datetime) -> timedelta:
    """How far the latest publish time in ``backlog`` is ahead of ``now``."""
    times = [sent.at for sent in backlog.oldest or () if sent is not None]
    return max(times, default=now) - now


class LaneWatch:
    """The frontiers the leader saw on its recent passes, lane by lane.

    Each pass notes what it sees and judges by the newest frontiers seen at least
    ``grace`` seconds before (by this process's monotonic clock): what those showed
    taken had that long to be started by a live consumer.  A process that begins
    to lead therefore judges nothing for its first ``grace`` seconds.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._seen: dict[str, deque[tuple[float, Frontiers]]] = {}
        self._restarted: dict[int, datetime] = {}
        self._told_of_clocks = False

    def judge(self, backlogs: Mapping[str, Backlog], grace: float) -> dict[str, Frontiers]:
        """Note the frontiers of ``backlogs``; the lanes' frontiers ``grace`` old."""
        at, now = self._clock(), timezone.now()
        judged: dict[str, Frontiers] = {}
        for lane, backlog in backlogs.items():
            seen = self._seen.setdefault(lane, deque())
            self._check_clocks(_ahead(backlog, now))
            frontiers = frontiers_of(backlog, now)
            if frontiers is not None:
                seen.append((at, frontiers))
            while len(seen) > 1 and seen[1][0] <= at - grace:
                seen.popleft()
            if seen and seen[0][0] <= at - grace:
                judged[lane] = seen[0][1]
        return judged

    def _check_clocks(self, ahead: timedelta) -> None:
        if ahead.total_seconds() > PUBLISH_SLACK and not self._told_of_clocks:
            self._told_of_clocks = True  # once: it says the machines' clocks differ
            logger.warning(
                "a message waiting in the broker was published %.1f s ahead of this "
                "process's clock: the clocks differ; lost messages are judged by this one",
                ahead.total_seconds(),
            )

    def restart_lost_expansions(self, judged: Mapping[str, Frontiers]) -> int:
        """Publish again the expansions still pending whose message ``judged`` shows
        taken, unless restarted since; how many."""
        now, restarted = timezone.now(), 0
        cutoffs = {lane: min(f.cutoff for f in frontiers) for lane, frontiers in judged.items()}
        for lane, before in cutoffs.items():
            again = [pk for pk, at in self._restarted.items() if at >= before]
            stuck = stuck_expansions(before).filter(lane=lane).exclude(pk__in=again)
            for pk in start_expansions(stuck):
                self._restarted[pk] = now
                restarted += 1
        if cutoffs:  # a restart older than every cutoff excludes nothing any more
            oldest = min(cutoffs.values())
            kept = list(self._restarted.items())[-_RESTARTS_KEPT:]
            self._restarted = {pk: at for pk, at in kept if at >= oldest}
        return restarted


def take_lost(judged: Mapping[str, Frontiers], grace: float) -> Lanes:
    """Queued deliveries due for ``grace`` seconds that the frontiers of their lane
    show taken, marked dispatched now: their ids by lane, to publish again."""
    if not judged:
        return {}
    now = timezone.now()
    shown = _any(
        Q(lane=lane) & _all(f.taken() for f in frontiers) for lane, frontiers in judged.items()
    )
    rows = Delivery.objects.filter(
        shown,
        state=DeliveryState.QUEUED,
        dispatched_at__isnull=False,
        next_attempt_at__lt=now - timedelta(seconds=grace),
    )
    return mark_dispatched(rows, now)


def _any(clauses: Iterable[Q]) -> Q:
    return functools.reduce(operator.or_, clauses, Q(pk__in=[]))


def _all(clauses: Iterable[Q]) -> Q:
    return functools.reduce(operator.and_, clauses, Q())
