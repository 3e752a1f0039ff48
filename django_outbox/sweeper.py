"""The periodic pass that keeps the database and the broker in step.

Each pass, in bounded steps: fails live deliveries whose batch deadline has
passed; reclaims deliveries whose lease lapsed (their worker died), failing
those that have spent every attempt; dispatches deliveries that are due and
have no Celery message (parked retries, a broker that was down or flushed);
re-runs large fan-outs whose expansion was lost; frees ordered deliveries
left waiting; resolves payments of finished deliveries (``OUTBOX_PAYMENTS``);
and prunes finished rows past the retention period (payment attempts once their
delivery is pruned).  Every
change of state is :mod:`django_outbox.store.transitions`'.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db.models import Exists, OuterRef
from django.utils import timezone

from django_outbox.conf import conf
from django_outbox.dispatch import publish, start_expansion, take_undispatched
from django_outbox.models import Message, PendingInboxes
from django_outbox.operations import give_up
from django_outbox.payments import ledger
from django_outbox.payments.recovery import resolve_orphans
from django_outbox.store import queries, transitions

logger = logging.getLogger("django_outbox.sweeper")


def fail_expired() -> int:
    """Give up on queued and waiting deliveries whose batch deadline has passed."""
    expired = queries.expired()
    return give_up(expired, "the batch's deadline passed before it was sent", deadline=True)


def reclaim_lapsed() -> int:
    """Queue again, or fail, deliveries whose worker's lease ran out."""
    spent = queries.lapsed_and_spent()
    failed = give_up(spent, "the worker was lost during every attempt") if spent else 0
    lanes = transitions.reclaim_lapsed()
    publish(lanes)
    return failed + sum(map(len, lanes.values()))


def dispatch_due() -> int:
    """Publish due deliveries that have no Celery message, or whose message was lost."""
    lanes = take_undispatched()
    publish(lanes)
    return sum(map(len, lanes.values()))


def expand_lost() -> int:
    """Run again the expansion of large fan-outs whose task was lost."""
    cutoff = timezone.now() - timedelta(seconds=conf.REDISPATCH_AFTER)
    pending = PendingInboxes.objects.filter(message=OuterRef("pk"))
    stuck = list(
        Message.objects.filter(Exists(pending), created_at__lt=cutoff).values_list("id", "lane")[
            :100
        ]
    )
    for message_id, lane in stuck:
        start_expansion(message_id, lane)
    return len(stuck)


def free_waiting() -> int:
    """Queue ordered deliveries left waiting although nothing is before them."""
    lanes = transitions.free_stranded()
    publish(lanes)
    return sum(map(len, lanes.values()))


def resolve_payments() -> int:
    """Ask the node about the pending payments of finished deliveries."""
    settings = conf.PAYMENTS
    return resolve_orphans(settings) if settings is not None else 0


def sweep() -> dict[str, int]:
    """One full pass; returns how many rows each step touched."""
    counts = {
        "expired": fail_expired(),
        "reclaimed": reclaim_lapsed(),
        "dispatched": dispatch_due(),
        "expanded": expand_lost(),
        "freed": free_waiting(),
        "payments": resolve_payments(),
        "pruned": transitions.prune(),
        "pruned_payments": ledger.prune(conf.RETENTION_SECONDS),
    }
    if any(counts.values()):
        logger.info("sweep: %s", counts)
    return counts
