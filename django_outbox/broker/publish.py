"""Publishing work to Celery: the only module that talks to the broker.

A ``deliver`` message carries up to ``OUTBOX_CHUNK_SIZE`` delivery ids of one
lane, and a whole dispatch shares one producer connection, so a fan-out of
thousands costs a few dozen publishes.  Tasks are sent by name on the current
Celery app: this module does not import the tasks, which import the worker,
which publishes through here.  When the broker cannot be reached the rows are
marked undispatched and the sweeper sends them once it can: the database, not
the broker, is what must not lose them.

Every message goes through one :class:`Publisher`, Celery's unless a test put
another in place with :func:`use_publisher` (:mod:`django_outbox.testing`
records them instead).  Each carries the header of :mod:`django_outbox.broker.backlog`
(when it was published, its first delivery id), and a dispatch publishes each
lane's ids in ascending order, so that the recovery pass can tell from the
oldest message waiting in a lane which rows' messages consumers took
(:mod:`django_outbox.broker.lost`).

The broker can lose what it holds (Redis flushed or restarted without its data,
a RabbitMQ node reset): :data:`CANARY_QUEUE` holds one message that nobody
consumes, so that its absence says the broker lost everything
(:func:`canary_present`); :func:`restore_canary` declares the queues again
(kombu's Redis transport keeps its bindings in ``_kombu.binding.*`` keys, which
a flush erases too: until they are declared again, a publish is silently
dropped) and puts the canary back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from datetime import datetime, timedelta
from typing import Any, Protocol

from celery import current_app
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from django_outbox.broker.backlog import Backlog, header, redis_backlogs
from django_outbox.conf import conf
from django_outbox.models import Delivery, Message, PendingInboxes, locked
from django_outbox.store.queries import STEP, Lanes, by_lane, queued

logger = logging.getLogger("django_outbox.dispatch")

DELIVER = "django_outbox.deliver"
EXPAND = "django_outbox.expand"
SWEEP = "django_outbox.sweep"
#: The queue of the canary message; no worker may consume it.
CANARY_QUEUE = "django_outbox.canary"
#: The canary's task name: never registered, never run.
CANARY = "django_outbox.canary"
#: Seconds a socket call on the recovery pass's own broker connection may take.
BROKER_CALL_TIMEOUT = 5.0
#: Lost expansions published again in one step at most.
_EXPANSIONS_PER_STEP = 100

SendTask = Callable[[str, tuple[Any, ...], str, float | None], None]
"""Publishes one task message: ``(task name, args, queue, countdown or None)``."""


class Publisher(Protocol):
    """Where task messages go.

    :meth:`connect` is entered once per dispatch, and the function it gives is
    called once per message; when either raises, what was not sent yet is
    treated as not published.
    """

    def connect(self) -> AbstractContextManager[SendTask]:
        """A connection to publish a dispatch's messages on."""
        ...

    def queue_sizes(self, queues: Sequence[str]) -> dict[str, int | None]:
        """Messages ready in each of ``queues``; ``None`` for one the broker does not have."""
        ...

    def declare(self, queues: Sequence[str]) -> None:
        """Declare ``queues`` (with their exchanges and bindings) on the broker again."""
        ...

    def backlogs(self, queues: Sequence[str]) -> dict[str, Backlog]:
        """What waits in each of ``queues``, with the header of its oldest messages
        where the broker can show them without taking them."""
        ...


class CeleryPublisher:
    """The default :class:`Publisher`: the current Celery app, one producer per dispatch."""

    @contextmanager
    def connect(self) -> Iterator[SendTask]:
        """Acquire a producer from the app's pool and publish by task name on it."""
        app = current_app
        with app.producer_or_acquire() as producer:

            def send(name: str, args: tuple[Any, ...], queue: str, countdown: float | None) -> None:
                headers = message_header(name, args)
                app.send_task(
                    name, args, queue=queue, producer=producer, countdown=countdown, headers=headers
                )

            yield send

    def queue_sizes(self, queues: Sequence[str]) -> dict[str, int | None]:
        """A passive declare of each queue, on a channel of its own (a queue that does
        not exist closes the channel on RabbitMQ)."""
        with _fresh_connection() as connection:
            return _declared_sizes(connection, queues)

    def backlogs(self, queues: Sequence[str]) -> dict[str, Backlog]:
        """On kombu's Redis transport, each queue's lists read from their old end
        (:func:`~django_outbox.broker.backlog.redis_backlogs`); elsewhere only the sizes."""
        with _fresh_connection() as connection:
            if connection.transport.driver_type == "redis":
                return redis_backlogs(connection.default_channel, queues)
            sizes = _declared_sizes(connection, queues)
        return {queue: Backlog(size or 0) for queue, size in sizes.items()}

    def declare(self, queues: Sequence[str]) -> None:
        """Declare each queue as the app routes to it, bypassing kombu's cache of what
        a connection declared before (the broker may have lost it since)."""
        app = current_app
        with _fresh_connection() as connection:
            channel = connection.default_channel
            for queue in queues:
                app.amqp.queues[queue](channel).declare()


def _declared_sizes(connection: Any, queues: Sequence[str]) -> dict[str, int | None]:
    sizes: dict[str, int | None] = {}
    for queue in queues:
        channel = connection.channel()
        try:
            sizes[queue] = channel.queue_declare(queue=queue, passive=True).message_count
        except connection.channel_errors:
            sizes[queue] = None
        finally:
            with suppress(*connection.channel_errors, *connection.connection_errors):
                channel.close()
    return sizes


def message_header(name: str, args: tuple[Any, ...]) -> dict[str, list[Any]]:
    """The headers of a message of task ``name`` with ``args``, published now."""
    first = min(args[0]) if name == DELIVER and args and args[0] else None
    return header(first, time.time())


@contextmanager
def _fresh_connection() -> Iterator[Any]:
    """A new connection to the broker, closed afterwards: not one from the app's pool,
    which may hold a connection the broker cut (a restarted node) that it cannot
    open channels on.  One attempt to connect: the next pass tries again.  Its socket
    calls time out after :data:`BROKER_CALL_TIMEOUT` seconds (whatever the project set
    for its own connections), so that a broker that stops answering fails a recovery
    step rather than hanging it."""
    url = current_app.conf.broker_write_url or current_app.conf.broker_url or ""
    bound = BROKER_CALL_TIMEOUT
    if str(url).startswith(("redis://", "rediss://", "unix://")):
        options: dict[str, float] = {"socket_timeout": bound, "socket_connect_timeout": bound}
    else:
        options = {"read_timeout": bound, "write_timeout": bound}
    with current_app.connection_for_write(
        connect_timeout=bound, transport_options=options
    ) as connection:
        connection.ensure_connection(max_retries=1)
        yield connection


_publisher: Publisher = CeleryPublisher()


@contextmanager
def use_publisher(publisher: Publisher) -> Iterator[None]:
    """Send this process's task messages to ``publisher`` while the block runs.

    For tests (:mod:`django_outbox.testing`).  It swaps one module-level
    publisher, for every thread, as ``override_settings`` swaps settings.
    """
    global _publisher
    previous, _publisher = _publisher, publisher
    try:
        yield
    finally:
        _publisher = previous


def chunked(ids: Sequence[int], size: int) -> Iterable[list[int]]:
    """``ids`` in lists of at most ``size``."""
    for start in range(0, len(ids), max(1, size)):
        yield list(ids[start : start + size])


def publish(lanes: Lanes, countdown: float | None = None) -> bool:
    """Send ``deliver`` messages for the ids of each lane, in ascending order; False if
    the broker failed.

    On failure the rows not published are marked undispatched, so that the
    sweeper picks them up on its next pass rather than after
    ``OUTBOX_REDISPATCH_AFTER``.
    """
    if not any(lanes.values()):
        return True
    size = conf.CHUNK_SIZE
    sent: set[int] = set()
    try:
        with _publisher.connect() as send:
            for lane, ids in lanes.items():
                for chunk in chunked(sorted(ids), size):
                    send(DELIVER, (chunk,), lane, countdown)
                    sent.update(chunk)
    except Exception:
        unsent = [pk for ids in lanes.values() for pk in ids if pk not in sent]
        logger.warning(
            "could not publish %d deliveries; the sweeper will send them",
            len(unsent),
            exc_info=True,
        )
        forget_dispatch(unsent)
        return False
    return True


def publish_on_commit(lanes: Lanes) -> None:
    """:func:`publish` ``lanes`` once the current transaction commits."""

    def publish_deliveries() -> None:
        publish(lanes)

    if any(lanes.values()):
        transaction.on_commit(publish_deliveries, robust=True)


def start_expansion(message_id: int, lane: str) -> bool:
    """Publish the task that writes the rows of a large fan-out; False if the broker failed.

    On failure the message keeps its inbox list, and the sweeper starts the
    expansion after ``OUTBOX_REDISPATCH_AFTER``.
    """
    try:
        with _publisher.connect() as send:
            send(EXPAND, (message_id,), lane, None)
    except Exception:
        logger.warning(
            "could not publish the expansion of message %s; the sweeper will",
            message_id,
            exc_info=True,
        )
        return False
    return True


def stuck_expansions(created_before: datetime) -> QuerySet[Message]:
    """Messages created before ``created_before`` whose inboxes are still pending."""
    pending = PendingInboxes.objects.filter(message=OuterRef("pk"))
    return Message.objects.filter(Exists(pending), created_at__lt=created_before)


def start_expansions(messages: QuerySet[Message]) -> list[int]:
    """Publish again the expansion of the first hundred of ``messages``; their ids.

    Two expansions of one message share its slices out, so a restart of one that
    was merely slow costs nothing."""
    found = list(messages.values_list("id", "lane")[:_EXPANSIONS_PER_STEP])
    for message_id, lane in found:
        start_expansion(message_id, lane)
    return [message_id for message_id, _ in found]


def restart_expansions(older_than: float) -> int:
    """Publish again the expansion of fan-outs sent more than ``older_than`` seconds
    ago whose inboxes are still pending (a hundred at most); how many."""
    cutoff = timezone.now() - timedelta(seconds=older_than)
    return len(start_expansions(stuck_expansions(cutoff)))


def start_expansion_on_commit(message_id: int, lane: str) -> None:
    """:func:`start_expansion` once the current transaction commits."""

    def start_expansion_of_message() -> None:
        start_expansion(message_id, lane)

    transaction.on_commit(start_expansion_of_message, robust=True)


def take_undispatched() -> Lanes:
    """Due deliveries with no Celery message, or whose message was lost, marked dispatched.

    A message is taken for lost ``OUTBOX_REDISPATCH_AFTER`` seconds after it was
    published, if the row is still queued and was due as long.  ``dispatched_at``
    is this module's: when a Celery message was last published for the row, or
    ``None`` when none is known to be on its way.
    """
    now = timezone.now()
    lost = now - timedelta(seconds=conf.REDISPATCH_AFTER)
    due = queued().filter(next_attempt_at__lte=now)
    undispatched = Q(dispatched_at__isnull=True) | Q(
        dispatched_at__lt=lost, next_attempt_at__lt=lost
    )
    return mark_dispatched(due.filter(undispatched), now)


def mark_dispatched(rows: QuerySet[Delivery], now: datetime) -> Lanes:
    """The first ``STEP`` of ``rows`` (longest due first), locked and marked
    dispatched at ``now``: their ids by lane, to publish."""
    with transaction.atomic():
        found = list(locked(rows.order_by("next_attempt_at")).values_list("id", "lane")[:STEP])
        Delivery.objects.filter(id__in=[pk for pk, _ in found]).update(dispatched_at=now)
    return by_lane(found)


def forget_dispatch(ids: Iterable[int]) -> None:
    """Mark deliveries whose Celery message could not be published as undispatched."""
    Delivery.objects.filter(id__in=list(ids), dispatched_at__isnull=False).update(
        dispatched_at=None
    )


def canary_present() -> bool:
    """Whether the canary message is still in its queue (raises if the broker is away)."""
    return bool(_publisher.queue_sizes([CANARY_QUEUE])[CANARY_QUEUE])


def restore_canary(lanes: Sequence[str]) -> None:
    """Declare the ``lanes`` and the canary's queue again, and put the canary back."""
    _publisher.declare([*lanes, CANARY_QUEUE])
    with _publisher.connect() as send:
        send(CANARY, (), CANARY_QUEUE, None)


def lane_backlogs(lanes: Sequence[str]) -> dict[str, Backlog]:
    """What waits in each lane's queue (:meth:`Publisher.backlogs`)."""
    return _publisher.backlogs(lanes)


def forget_all_dispatches() -> int:
    """Mark every queued delivery undispatched, as its message is known to be lost;
    the due ones are published again by :func:`take_undispatched`, the rest when due."""
    return queued().filter(dispatched_at__isnull=False).update(dispatched_at=None)
