"""A stand-in for the Celery app that :mod:`django_outbox.dispatch` publishes through.

Unit tests run with no broker: :class:`RecordingApp` takes the place of
``dispatch.current_app`` and keeps what would have been published, so a test
can say which deliveries went to which lane, with which countdown; or it
refuses every publish, as a broker that is down would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django_outbox.dispatch import DELIVER, EXPAND, SendTask


@dataclass(frozen=True)
class Published:
    """One task message: the task's name, its arguments, its queue and countdown."""

    name: str
    args: tuple[Any, ...]
    queue: str
    countdown: float | None


class BrokerDown(ConnectionError):
    """What :class:`RecordingApp` raises while it is ``down``."""


class RecordingApp:
    """Records ``send_task`` calls instead of publishing them."""

    def __init__(self) -> None:
        self.sent: list[Published] = []
        self.down = False

    @contextlib.contextmanager
    def producer_or_acquire(self) -> Iterator[None]:
        """No connection is needed to record."""
        yield None

    def send_task(
        self,
        name: str,
        args: tuple[Any, ...],
        *,
        queue: str,
        countdown: float | None = None,
        **options: Any,
    ) -> None:
        """Record the message, or fail as an unreachable broker would."""
        if self.down:
            raise BrokerDown("the broker cannot be reached")
        self.sent.append(Published(name, tuple(args), queue, countdown))

    def lanes(self) -> dict[str, list[int]]:
        """The delivery ids of every ``deliver`` message, by queue, in publishing order."""
        lanes: dict[str, list[int]] = {}
        for message in self.sent:
            if message.name == DELIVER:
                lanes.setdefault(message.queue, []).extend(message.args[0])
        return lanes

    def countdowns(self) -> dict[int, float | None]:
        """The countdown of the ``deliver`` message that carried each delivery id."""
        return {
            pk: message.countdown
            for message in self.sent
            if message.name == DELIVER
            for pk in message.args[0]
        }

    def expansions(self) -> list[int]:
        """The message ids of every ``expand`` task."""
        return [message.args[0] for message in self.sent if message.name == EXPAND]

    def clear(self) -> None:
        """Forget what was recorded."""
        self.sent.clear()


class MemoryBroker:
    """A :class:`~django_outbox.dispatch.Publisher` whose queues are lists in memory,
    which a test can flush (everything gone, as after Redis's ``FLUSHALL``) or purge."""

    def __init__(self) -> None:
        self.queues: dict[str, list[Published]] = {}
        self.declared: list[str] = []

    @contextlib.contextmanager
    def connect(self) -> Iterator[SendTask]:
        """Each message is appended to its queue."""

        def send(name: str, args: tuple[Any, ...], queue: str, countdown: float | None) -> None:
            self.queues.setdefault(queue, []).append(Published(name, args, queue, countdown))

        yield send

    def queue_sizes(self, queues: Sequence[str]) -> dict[str, int | None]:
        """Messages in each queue; ``None`` for a queue never published to."""
        return {
            queue: len(self.queues[queue]) if queue in self.queues else None for queue in queues
        }

    def declare(self, queues: Sequence[str]) -> None:
        """Note the declaration."""
        self.declared.extend(queues)

    def flush(self) -> None:
        """Lose every queue and message."""
        self.queues.clear()

    def take(self, queue: str) -> list[Published]:
        """Remove and return the messages of ``queue``, as consumers would."""
        return self.queues.pop(queue, [])

    def ids(self, queue: str) -> set[int]:
        """The delivery ids of the ``deliver`` messages waiting in ``queue``."""
        return {
            pk
            for message in self.queues.get(queue, [])
            if message.name == DELIVER
            for pk in message.args[0]
        }
