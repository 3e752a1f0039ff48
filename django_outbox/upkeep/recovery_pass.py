"""The recovery pass: what a worker process does every heartbeat while it leads.

One live worker process, the leader (:mod:`django_outbox.worker.heartbeat`),
runs :func:`recover` every ``OUTBOX_HEARTBEAT_INTERVAL`` seconds, so that a
fault costs seconds with the default settings, and beat being down costs
nothing but the sweeper's housekeeping:

- deliveries claimed by a process whose heartbeat stopped are taken back
  (:func:`reclaim_dead`), and so are those whose lease lapsed (a process that beats
  but never reported back);
- a broker that lost its messages is noticed (:func:`check_broker`): by the
  canary message gone from its queue (Redis flushed or restarted empty, a
  RabbitMQ node reset), then every queued delivery is published again and the
  queues are declared again; or by the oldest message waiting in a lane, which
  shows every message published to it before taken by some consumer: deliveries
  of those still queued a heartbeat timeout later (messages a killed worker had
  taken, a process that died before it published, a purged queue) are
  published again (:mod:`django_outbox.broker.lost`);
- due deliveries without a message (parked retries, a broker that was down)
  are published, as the sweeper does;
- ``delivery_failed`` signals a dying process never sent are sent;
- the steps of the active extensions run
  (:meth:`~django_outbox.extensions.Extension.recovery_steps`).

Every step is conditional (a row moved meanwhile is left alone) and a message
published twice finds its rows claimed, so two processes that both believe
they lead for a moment do no harm.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django_outbox.broker.lost import LaneWatch, take_lost
from django_outbox.broker.publish import (
    canary_present,
    forget_all_dispatches,
    lane_backlogs,
    publish,
    restart_expansions,
    restore_canary,
)
from django_outbox.conf import conf
from django_outbox.extensions.registry import steps_of
from django_outbox.models import Lane
from django_outbox.store import reclaim
from django_outbox.store.queries import STEP
from django_outbox.upkeep.operations import take_back
from django_outbox.upkeep.passes import Steps, run_steps
from django_outbox.upkeep.sweeper import dispatch_due, reclaim_lapsed, resend_signals

logger = logging.getLogger("django_outbox.recovery")

#: Steps of ``STEP`` deliveries one pass publishes at most (100,000).
_DRAIN_STEPS = 20
#: What the lanes' oldest messages showed on this process's recent passes.
_lanes = LaneWatch()


def reclaim_dead() -> int:
    """Queue again, or fail, deliveries claimed by processes that stopped beating."""
    abandoned = reclaim.orphaned(conf.HEARTBEAT_TIMEOUT)
    return take_back(abandoned, "its worker stopped beating before it reported back")


def check_broker() -> int:
    """Publish again what the broker lost, or consumers took and never started; how many
    deliveries (and expansions)."""
    lanes = Lane.values
    if not canary_present():
        # The canary first: a loss after this point is seen by the next pass.
        restore_canary(lanes)
        found = forget_all_dispatches() + restart_expansions(0.0)
        # No canary and nothing queued: most likely a broker this package never used.
        log = logger.warning if found else logger.info
        log("the canary is gone, the broker lost its messages: publishing %d again", found)
        return found
    grace = conf.HEARTBEAT_TIMEOUT
    judged = _lanes.judge(lane_backlogs(lanes), grace)
    lost = take_lost(judged, grace)
    publish(lost)
    found = sum(map(len, lost.values())) + _lanes.restart_lost_expansions(judged)
    if found:
        logger.warning("published %d deliveries (or expansions) again: lost messages", found)
    return found


def dispatch_all_due() -> int:
    """Publish due deliveries without a message, a step at a time until none is left
    (a broker that lost everything leaves every queued delivery so), at most
    :data:`_DRAIN_STEPS` steps."""
    total = 0
    for _ in range(_DRAIN_STEPS):
        found = dispatch_due()
        total += found
        if found < STEP:
            break
    return total


def recover(*, judge_owners: bool, part: Steps | None = None) -> dict[str, int]:
    """One pass; ``judge_owners`` says whether to take back dead processes' claims
    and lapsed leases (only a process that has itself beaten steadily for a while may
    judge others).  Each step is a step of ``part`` when given (the heart's recovery
    pass, which the supervisor watches).

    A step that fails (the broker or the database away) is logged and the next
    one runs.  Returns how many rows each step touched.
    """
    steps: dict[str, Callable[[], int]] = {"broker": check_broker, "dispatched": dispatch_all_due}
    if judge_owners:
        steps = {"reclaimed": reclaim_dead, "lapsed": reclaim_lapsed, **steps}
    steps["signals"] = resend_signals
    steps.update(steps_of("recovery_steps"))
    counts = run_steps(steps, "recovery", part)
    if any(counts.values()):
        logger.info("recovery: %s", counts)
    return counts
