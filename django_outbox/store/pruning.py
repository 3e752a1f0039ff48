"""Deleting finished deliveries past the retention period, and then their messages.

The sweeper's prune step.  It deletes in batches of :data:`~django_outbox.store.queries.STEP`
rows, the longest finished first (a range of the ``(finished_at, state)`` index), each
batch in a transaction of its own with the rows' history (payment records stay,
unlinked), until none is left or the pass has spent :data:`SHARE` of
``OUTBOX_SWEEP_INTERVAL``: a year's backlog is worked off pass by pass, a pass ends long
before the next one starts (and before the sweep's supervisor would call it stuck), and
no transaction holds many locks for long.  Only finished rows are deleted, which no
claim, outcome or recovery pass changes, so workers do not wait on a prune's locks.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from django_outbox.conf import conf
from django_outbox.models import FINAL_STATES, Delivery, Message
from django_outbox.store.queries import STEP

#: The share of ``OUTBOX_SWEEP_INTERVAL`` one prune pass may spend deleting.
SHARE = 1 / 3


def prune() -> int:
    """Delete finished deliveries, and then messages, older than the retention period,
    a batch at a time for at most :data:`SHARE` of the sweep interval (one batch of
    each at least); how many rows were deleted (history rows included)."""
    cutoff = timezone.now() - timedelta(seconds=conf.RETENTION_SECONDS)
    ends = time.monotonic() + SHARE * conf.SWEEP_INTERVAL
    deleted = 0
    while True:
        found, removed = _delete_deliveries(cutoff)
        deleted += removed
        if found < STEP or time.monotonic() >= ends:
            break
    while _delete_messages(cutoff) == STEP and time.monotonic() < ends:
        pass
    return deleted


def _delete_deliveries(cutoff: datetime) -> tuple[int, int]:
    """One batch: (deliveries found, rows deleted with their history)."""
    old = Delivery.objects.filter(state__in=FINAL_STATES, finished_at__lt=cutoff)
    ids = list(old.order_by("finished_at").values_list("id", flat=True)[:STEP])
    with transaction.atomic():
        removed, _ = Delivery.objects.filter(id__in=ids).delete()
    return len(ids), removed


def _delete_messages(cutoff: datetime) -> int:
    """One batch of messages older than ``cutoff`` with no delivery and nothing pending
    left; how many were found."""
    empty = Message.objects.filter(created_at__lt=cutoff, pending=None, deliveries=None)
    ids = list(empty.values_list("id", flat=True)[:STEP])
    Message.objects.filter(id__in=ids).delete()
    return len(ids)
