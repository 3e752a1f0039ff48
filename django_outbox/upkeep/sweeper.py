"""The periodic pass that keeps the database and the broker in step.

Each pass, in bounded steps: fails live deliveries whose batch deadline has
passed; reclaims deliveries whose lease lapsed (their worker died), failing
those that have spent every attempt; dispatches deliveries that are due and
have no Celery message (parked retries, a broker that was down or flushed);
re-runs large fan-outs whose expansion was lost; frees ordered deliveries
left waiting; sends the ``delivery_failed`` signals of give-ups whose process
died before it could; prunes finished rows past the retention period (heartbeats
of processes dead for an hour, host pauses that ended a slow start ago); and runs the
steps of the active extensions (:meth:`~django_outbox.extensions.Extension.sweep_steps`).  Every
change of state is made in :mod:`django_outbox.store`.

Beat runs it every ``OUTBOX_SWEEP_INTERVAL`` seconds.  What must not wait that
long (dead workers, a lost broker, due rows without a message) the workers'
:mod:`~django_outbox.upkeep.recovery_pass` pass does every heartbeat, beat or no beat.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django_outbox.broker.publish import publish, restart_expansions, take_undispatched
from django_outbox.conf import conf
from django_outbox.extensions.registry import steps_of
from django_outbox.store import heartbeats, pruning, queries, reclaim, transitions
from django_outbox.upkeep.operations import give_up, resend_failed_signals, take_back
from django_outbox.upkeep.passes import Steps, run_steps
from django_outbox.upkeep.pauses import end_lapsed_pauses

logger = logging.getLogger("django_outbox.sweeper")

#: Seconds after a give-up before its ``delivery_failed`` counts as lost: the
#: process that gave up sends it right after its commit.
SIGNAL_GRACE = 10.0


def fail_expired() -> int:
    """Give up on queued and waiting deliveries whose batch deadline has passed."""
    expired = queries.expired()
    return give_up(expired, "the batch's deadline passed before it was sent", deadline=True)


def reclaim_lapsed() -> int:
    """Queue again, or fail, deliveries whose worker's lease ran out."""
    return take_back(reclaim.lapsed(), "the worker's lease lapsed before it reported back")


def dispatch_due() -> int:
    """Publish due deliveries that have no Celery message, or whose message was lost."""
    lanes = take_undispatched()
    publish(lanes)
    return sum(map(len, lanes.values()))


def expand_lost() -> int:
    """Run again the expansion of large fan-outs whose task was lost."""
    return restart_expansions(conf.REDISPATCH_AFTER)


def free_waiting() -> int:
    """Queue ordered deliveries left waiting although nothing is before them."""
    lanes = transitions.free_stranded()
    publish(lanes)
    return sum(map(len, lanes.values()))


def sweep(part: Steps | None = None) -> dict[str, int]:
    """One full pass; returns how many rows each step touched.  Each step runs whatever
    the others did, as a step of ``part`` when given (the sweep task's, supervised)."""
    steps: dict[str, Callable[[], int]] = {
        "expired": fail_expired,
        "reclaimed": reclaim_lapsed,
        "dispatched": dispatch_due,
        "expanded": expand_lost,
        "freed": free_waiting,
        "signals": resend_signals,
        "pruned": pruning.prune,
        "pruned_heartbeats": heartbeats.prune,
        "pauses_ended": end_lapsed_pauses,
    }
    steps.update(steps_of("sweep_steps"))
    counts = run_steps(steps, "sweep", part)
    if any(counts.values()):
        logger.info("sweep: %s", counts)
    return counts


def resend_signals() -> int:
    """Send the ``delivery_failed`` signals of give-ups whose process died first."""
    return resend_failed_signals(SIGNAL_GRACE)
