"""Deliveries held for their host that come back before their hold ends.

A delivery held for its host (an open breaker, a probe under way, the deliveries that
await an answer) is queued with ``next_attempt_at`` at the end of its hold and a Celery
countdown to match: that end is the upper bound, which nothing here can lengthen, so a
crash between two steps loses nothing.  When the breaker store says that a success freed
the host while holds run there (:meth:`~django_outbox.breakers.BreakerStore.record`
answered True), the recorder that saved the success calls :func:`release_held`: a few of
the host's held deliveries, those due first, become due at random within
:data:`RELEASE_SPREAD` seconds.  Each of those that succeeds frees the host again, so
the host's backlog comes back in steps that grow with its good answers (one probe, then
``OUTBOX_RELEASE_STEP``, then that many per success) and stops at its first failure.
Throttled deliveries (a ``429``) are not released: they wait the time asked.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from datetime import timedelta

from django.utils import timezone

from django_outbox.breakers.policy import releasable_errors
from django_outbox.models import Delivery, DeliveryState
from django_outbox.store.queries import Lanes

#: Seconds over which the deliveries of one release come due, each at random.
RELEASE_SPREAD = 1.0


def release_held(hosts: Iterable[str], threshold: int, step: int) -> dict[float, Lanes]:
    """Make up to ``step`` held deliveries of each host in ``hosts`` (per time it is
    named) due within :data:`RELEASE_SPREAD` seconds; the ids to publish, by countdown
    (seconds) and lane.

    ``threshold`` is the breakers' (their holds' ``last_error`` names it).  Each row
    changes only while it is still queued with the due time read, so a release racing a
    claim or another release changes nothing twice; ``dispatched_at`` is stamped, and a
    row whose message is then lost is published again by the recovery pass, or by its
    hold's own countdown at the latest.
    """
    now = timezone.now()
    errors = releasable_errors(threshold)
    released: dict[float, Lanes] = {}
    for host, times in Counter(hosts).items():
        held = Delivery.objects.filter(
            host=host, state=DeliveryState.QUEUED, last_error__in=errors, next_attempt_at__gt=now
        ).order_by("next_attempt_at", "id")
        for pk, lane, due in held.values_list("id", "lane", "next_attempt_at")[: step * times]:
            delay = round(random.random() * RELEASE_SPREAD, 1)
            if Delivery.objects.filter(
                id=pk, state=DeliveryState.QUEUED, next_attempt_at=due
            ).update(next_attempt_at=now + timedelta(seconds=delay), dispatched_at=now):
                released.setdefault(delay, {}).setdefault(lane, []).append(pk)
    return released
