"""Stand-ins for the broker that :mod:`django_outbox.broker.publish` publishes to.

Unit tests run with no broker: :class:`RecordingApp` takes the place of
``dispatch.current_app`` and keeps what would have been published, so a test
can say which deliveries went to which lane, with which countdown and headers;
or it refuses every publish, as a broker that is down would.
:class:`MemoryBroker` is a publisher whose queues are lists, first in, first out,
that consumers can take from and the recovery pass can look into.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django_outbox.broker.backlog import Backlog, read_sent
from django_outbox.broker.publish import DELIVER, EXPAND, SendTask, message_header


@dataclass(frozen=True)
class Published:
    """One task message: the task's name, its arguments, its queue and countdown, and
    its headers (as the package publishes it)."""

    name: str
    args: tuple[Any, ...]
    queue: str
    countdown: float | None
    headers: Mapping[str, Any] = field(default_factory=dict, compare=False)


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
        headers = options.get("headers") or {}
        self.sent.append(Published(name, tuple(args), queue, countdown, headers))

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
    """A :class:`~django_outbox.broker.publish.Publisher` whose queues are lists in memory,
    oldest first, which a test can flush (everything gone, as after Redis's
    ``FLUSHALL``), purge, or take messages from as consumers do."""

    def __init__(self) -> None:
        self.queues: dict[str, list[Published]] = {}
        self.declared: list[str] = []

    @contextlib.contextmanager
    def connect(self) -> Iterator[SendTask]:
        """Each message is appended to its queue."""

        def send(name: str, args: tuple[Any, ...], queue: str, countdown: float | None) -> None:
            headers = message_header(name, args)
            self.queues.setdefault(queue, []).append(
                Published(name, args, queue, countdown, headers)
            )

        yield send

    def queue_sizes(self, queues: Sequence[str]) -> dict[str, int | None]:
        """Messages in each queue; ``None`` for a queue never published to."""
        return {
            queue: len(self.queues[queue]) if queue in self.queues else None for queue in queues
        }

    def declare(self, queues: Sequence[str]) -> None:
        """Note the declaration."""
        self.declared.extend(queues)

    def backlogs(self, queues: Sequence[str]) -> dict[str, Backlog]:
        """Each queue's size and what its oldest message's header says (one list)."""
        backlogs: dict[str, Backlog] = {}
        for queue in queues:
            waiting = self.queues.get(queue, [])
            oldest = (read_sent(waiting[0].headers),) if waiting else ()
            backlogs[queue] = Backlog(len(waiting), oldest)
        return backlogs

    def flush(self) -> None:
        """Lose every queue and message."""
        self.queues.clear()

    def take(self, queue: str, count: int | None = None) -> list[Published]:
        """Remove and return the oldest ``count`` messages of ``queue`` (all if
        ``None``), as consumers would."""
        waiting = self.queues.get(queue, [])
        taken = waiting[: len(waiting) if count is None else count]
        del waiting[: len(taken)]
        return taken

    def ids(self, queue: str) -> set[int]:
        """The delivery ids of the ``deliver`` messages waiting in ``queue``."""
        return {
            pk
            for message in self.queues.get(queue, [])
            if message.name == DELIVER
            for pk in message.args[0]
        }
