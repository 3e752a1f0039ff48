"""Writing the delivery rows of a send, in the caller's transaction or a worker's.

Small sends write their rows inside ``outbox.send``; a large fan-out stores
its inbox list in slices (:class:`~django_outbox.models.PendingInboxes`) and a
worker expands it here slice by slice, each slice committed and dispatched
before the next is written, so the first deliveries start while the rest are
still being written, and no row and no worker holds the whole list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from django.db import transaction

from django_outbox.broker.publish import publish, publish_on_commit
from django_outbox.conf import conf
from django_outbox.extensions.registry import published_first
from django_outbox.models import Lane, Message, PendingInboxes
from django_outbox.store.queries import Lanes, by_lane
from django_outbox.store.transitions import create_deliveries, promote_freed

#: Inboxes in the first slice of a fan-out, small so that sending starts soon.
FIRST_SLICE = 500
#: Inboxes in each further slice: one transaction of the expansion each.
SLICE = 5000
#: Characters a slice holds at most: a slice of long URLs holds fewer of them.
SLICE_CHARS = 1 << 20


def choose_lane(inbox_count: int, low_priority: bool) -> str:
    """The lane a send to ``inbox_count`` inboxes travels in."""
    if low_priority and conf.LOW_LANE:
        return Lane.LOW.value
    if inbox_count <= conf.PRIORITY_MAX_INBOXES:
        return Lane.PRIORITY.value
    return Lane.DEFAULT.value


def write_deliveries(
    message: Message, inboxes: Sequence[str], via: Mapping[str, list[str]] | None = None
) -> None:
    """Insert a delivery per inbox; publish the queued ones once the transaction commits
    (on the priority lane those to hosts an extension serves first, e.g. paid ones).

    Deliveries that wait behind an earlier one with their ordering key are
    looked at again on commit: the worker that finishes the earlier one looks
    for its successor right after saving, and found none if these rows were not
    committed yet.
    """
    queued, waiting = create_deliveries(message, inboxes, via)
    publish_on_commit(lanes_of(message, queued))
    if waiting:
        message_id, key = message.pk, message.ordering_key

        def promote_freed_deliveries() -> None:
            publish(promote_freed(message_id, key))

        transaction.on_commit(promote_freed_deliveries, robust=True)


def lanes_of(message: Message, queued: Sequence[tuple[int, str]]) -> Lanes:
    """The ids of ``queued`` (id, host) deliveries by the lane they are published on: the
    priority lane for those to hosts an extension serves first (not asked when the
    message travels there already), the message's own for the others."""
    first: set[str] = set()
    if queued and message.lane != Lane.PRIORITY:
        first = published_first({host for _, host in queued})
    return by_lane((pk, Lane.PRIORITY if host in first else message.lane) for pk, host in queued)


def pending_slices(inboxes: Sequence[str]) -> list[str]:
    """The inboxes as slice texts, one URL a line: ``FIRST_SLICE``, then ``SLICE`` each.

    A slice is halved until it holds at most ``SLICE_CHARS`` characters.
    """
    texts: list[str] = []
    start, size = 0, FIRST_SLICE
    while start < len(inboxes):
        part = inboxes[start : start + size]
        text = "\n".join(part)
        while len(text) > SLICE_CHARS and len(part) > 1:
            part = part[: len(part) // 2]
            text = "\n".join(part)
        texts.append(text)
        start += len(part)
        size = SLICE
    return texts


def store_pending(message: Message, inboxes: Sequence[str]) -> None:
    """Store the inboxes of a large fan-out in slices, in one INSERT, for :func:`expand`."""
    PendingInboxes.objects.bulk_create(
        PendingInboxes(message=message, seq=seq, inboxes=text)
        for seq, text in enumerate(pending_slices(inboxes))
    )


def expand(message_id: int) -> int:
    """Write and dispatch the deliveries of a large fan-out; returns how many it wrote.

    Each slice's rows are written and the slice deleted in one transaction, and
    dispatched once it commits: after a crash the expansion runs again from the
    first slice left, and of two expansions of one message (the sweeper re-runs
    one it takes for lost) each slice is taken by one.  Memory holds one slice.
    """
    message = Message.objects.defer("body").filter(pk=message_id).first()
    if message is None:
        return 0
    written, after = 0, -1
    while True:
        with transaction.atomic():
            pending = (
                PendingInboxes.objects.filter(message_id=message_id, seq__gt=after)
                .order_by("seq")
                .first()
            )
            if pending is None:
                return written
            after = pending.seq
            taken, _ = PendingInboxes.objects.filter(pk=pending.pk).delete()
            if taken:
                inboxes = [inbox for inbox in pending.inboxes.split("\n") if inbox]
                write_deliveries(message, inboxes)
                written += len(inboxes)
