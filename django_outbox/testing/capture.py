"""Recording what an application sends, with nothing handed to Celery.

:func:`captured_sends` puts a recording publisher in place of the broker
(:func:`django_outbox.broker.publish.use_publisher`) and notes each message row that
``outbox.send`` writes.  A send is recorded when its transaction commits, as
production hands work to Celery only then: a send rolled back is never
recorded, and inside a ``TestCase`` (whose transaction never commits) a send
is recorded when ``captureOnCommitCallbacks(execute=True)`` runs the on-commit
callbacks.  Recorded sends can then be delivered in-process to fake inboxes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

from django.db import DEFAULT_DB_ALIAS, transaction
from django.db.models import QuerySet
from django.db.models.signals import post_save

from django_outbox.breakers import MemoryBreakerStore
from django_outbox.broker.backlog import Backlog
from django_outbox.broker.publish import SendTask, use_publisher
from django_outbox.exceptions import OutboxError
from django_outbox.models import Delivery, Lane, Message, PendingInboxes
from django_outbox.sending.batch import Batch
from django_outbox.testing.delivery import deliver_messages
from django_outbox.testing.inbox import FakeInbox, FakeTransport, Handler


class PublishedTask(NamedTuple):
    """A task message that would have gone to the broker: name, arguments, queue, countdown."""

    name: str
    args: tuple[Any, ...]
    queue: str
    countdown: float | None


class CaptureEnded(OutboxError):
    """A send made inside :func:`captured_sends` committed after the block had ended.

    Its task messages would have gone to the real broker, so the commit is
    stopped here instead.
    """


@dataclass(frozen=True, eq=False)
class CapturedSend:
    """One committed ``outbox.send``: the stored message and the inboxes it went to."""

    message: Message
    inboxes: list[str]
    capture: OutboxCapture = field(repr=False)

    @property
    def actor(self) -> str:
        """The id of the actor the activity is signed as."""
        return self.message.sender

    @property
    def activity(self) -> Any:
        """The activity as sent: the stored body, parsed."""
        return json.loads(bytes(self.message.body))

    @property
    def type(self) -> str:
        """The activity's ``type`` (``""`` when it has none)."""
        return self.message.activity_type

    @property
    def batch(self) -> Batch:
        """The batch options, rebuilt from the stored message.

        ``max_attempts`` is the budget the deliveries got (the lower of the
        batch's and ``OUTBOX_MAX_ATTEMPTS``); ``low_priority`` is true only when
        the send travels in the low lane (``OUTBOX_LOW_LANE`` on).
        """
        message = self.message
        return Batch(
            tag=message.tag or None,
            deadline=message.deadline,
            ordering_key=message.ordering_key or None,
            max_attempts=message.max_attempts,
            low_priority=message.lane == Lane.LOW,
            synchronize_collection=message.synchronize_collection,
        )

    def deliveries(self) -> QuerySet[Delivery]:
        """This send's delivery rows, in the order of its inboxes."""
        return Delivery.objects.filter(message=self.message).order_by("id")

    def deliver(
        self,
        handler: Handler | None = None,
        *,
        inboxes: Mapping[str, Handler] | None = None,
        retry_now: bool = False,
    ) -> list[Delivery]:
        """Deliver this send now, in-process; see :meth:`OutboxCapture.deliver_all`."""
        return self.capture._deliver([self], handler, inboxes=inboxes, retry_now=retry_now)


class _TaskList:
    """A :class:`~django_outbox.broker.publish.Publisher` that appends to a list."""

    def __init__(self, tasks: list[PublishedTask]) -> None:
        self.tasks = tasks

    @contextmanager
    def connect(self) -> Iterator[SendTask]:
        """No connection: each message is appended to the list."""
        yield self.append

    def append(self, name: str, args: tuple[Any, ...], queue: str, countdown: float | None) -> None:
        """Record one task message."""
        self.tasks.append(PublishedTask(name, args, queue, countdown))

    def queue_sizes(self, queues: Sequence[str]) -> dict[str, int | None]:
        """How many of the recorded messages went to each of ``queues``."""
        return {queue: sum(1 for task in self.tasks if task.queue == queue) for queue in queues}

    def declare(self, queues: Sequence[str]) -> None:
        """Nothing to declare: the list takes messages for any queue."""

    def backlogs(self, queues: Sequence[str]) -> dict[str, Backlog]:
        """Every recorded message waits (nothing consumes them); none can be looked at."""
        return {queue: Backlog(size or 0) for queue, size in self.queue_sizes(queues).items()}


class OutboxCapture:
    """The sends committed while :func:`captured_sends` is active, and tools to deliver them.

    It is a sequence of :class:`CapturedSend`, in commit order.  :attr:`tasks`
    lists the task messages that would have gone to Celery; :attr:`inbox` is the
    fake inbox deliveries go to unless told otherwise.  Circuit breakers are
    kept in memory for this capture alone, as configured otherwise.
    """

    def __init__(self) -> None:
        self.sends: list[CapturedSend] = []
        self.tasks: list[PublishedTask] = []
        self.inbox = FakeInbox()
        self.breakers = MemoryBreakerStore()
        self._publisher = _TaskList(self.tasks)
        self._active = False
        self.uncommitted = 0

    def __len__(self) -> int:
        return len(self.sends)

    def __iter__(self) -> Iterator[CapturedSend]:
        return iter(self.sends)

    def __getitem__(self, index: int) -> CapturedSend:
        return self.sends[index]

    def __repr__(self) -> str:
        shown = ", ".join(f"{s.type or '?'} to {len(s.inboxes)}" for s in self.sends)
        text = f"<OutboxCapture: {len(self.sends)} sent [{shown}]"
        if self.uncommitted:
            text += (
                f"; {self.uncommitted} not committed (in a TestCase, run on-commit "
                "callbacks with captureOnCommitCallbacks(execute=True))"
            )
        return text + ">"

    @property
    def inboxes(self) -> list[str]:
        """The inboxes of every send, in order (an inbox sent to twice is listed twice)."""
        return [inbox for send in self.sends for inbox in send.inboxes]

    def activities(self, type: str | None = None) -> list[Any]:
        """The activities sent, parsed; only those of ``type`` if given."""
        return [send.activity for send in self.filter(type=type)]

    def filter(
        self, *, type: str | None = None, actor: str | None = None, inbox: str | None = None
    ) -> list[CapturedSend]:
        """The sends of activity ``type``, by ``actor``, to ``inbox`` (each if given)."""
        return [
            send
            for send in self.sends
            if (type is None or send.type == type)
            and (actor is None or send.actor == actor)
            and (inbox is None or inbox in send.inboxes)
        ]

    def clear(self) -> None:
        """Forget the sends, task messages and requests of :attr:`inbox` recorded so far."""
        self.sends.clear()
        self.tasks.clear()
        self.inbox.clear()

    def deliver_all(
        self,
        handler: Handler | None = None,
        *,
        inboxes: Mapping[str, Handler] | None = None,
        retry_now: bool = False,
    ) -> list[Delivery]:
        """Deliver every recorded send now, in this thread; their delivery rows afterwards.

        Each POST goes to the handler ``inboxes`` names for its URL, else to
        ``handler``, else to :attr:`inbox`.  The worker's own code claims,
        signs, attempts and records, so rows change state and the signals are
        sent as in production.  A delivery answered with a retryable failure
        stays queued for its retry; with ``retry_now`` retries are made at once,
        ignoring their backoff, until each delivery settles or fails (or the
        breaker opens).  Task messages that follow (retries, successors) are
        recorded in :attr:`tasks`, even after the ``with`` block.
        """
        return self._deliver(self.sends, handler, inboxes=inboxes, retry_now=retry_now)

    def _deliver(
        self,
        sends: Sequence[CapturedSend],
        handler: Handler | None,
        *,
        inboxes: Mapping[str, Handler] | None,
        retry_now: bool,
    ) -> list[Delivery]:
        """:meth:`deliver_all` for ``sends`` only."""
        routes = dict(inboxes or {})
        default = handler or self.inbox
        transport = FakeTransport(lambda url: routes.get(url, default))
        ids = [send.message.pk for send in sends]
        with use_publisher(self._publisher):
            deliver_messages(ids, transport, self.breakers, retry_now=retry_now)
        return list(Delivery.objects.filter(message_id__in=ids).order_by("id"))

    def _message_saved(
        self,
        sender: type[Message],
        instance: Message,
        created: bool,
        raw: bool = False,
        using: str = DEFAULT_DB_ALIAS,
        **kwargs: Any,
    ) -> None:
        """``post_save`` receiver: record a new message once its transaction commits."""
        if created and not raw:
            self.uncommitted += 1
            transaction.on_commit(partial(self._committed, instance, using), using=using)

    def _committed(self, message: Message, using: str) -> None:
        """Record ``message``, whose transaction has just committed."""
        if not self._active:
            raise CaptureEnded(
                f"a send of message {message.pk} made inside captured_sends() committed after "
                "the block ended; enter captured_sends() before captureOnCommitCallbacks() "
                "and before the atomic block that commits"
            )
        pending = PendingInboxes.objects.using(using).filter(message=message).order_by("seq")
        if pending.exists():
            slices = pending.values_list("inboxes", flat=True)
            inboxes = [inbox for text in slices for inbox in text.split("\n")]
        else:
            rows = Delivery.objects.using(using).filter(message=message).order_by("id")
            inboxes = list(rows.values_list("inbox", flat=True))
        self.uncommitted -= 1
        self.sends.append(CapturedSend(message, inboxes, self))


@contextmanager
def captured_sends() -> Iterator[OutboxCapture]:
    """Record the sends committed in the block; publish nothing to the broker meanwhile.

    ::

        with captured_sends() as sent:
            outbox.send(actor, activity, inboxes)
        assert sent[0].activity["type"] == "Create"
        sent.deliver_all()
    """
    capture = OutboxCapture()
    uid = f"django_outbox.testing:{id(capture)}"
    post_save.connect(capture._message_saved, sender=Message, weak=False, dispatch_uid=uid)
    capture._active = True
    try:
        with use_publisher(capture._publisher):
            yield capture
    finally:
        capture._active = False
        post_save.disconnect(sender=Message, dispatch_uid=uid)
