"""What waits in the broker's queues, looked at without taking it.

Every message :mod:`django_outbox.broker.publish` publishes carries a header of the
package's own, :data:`HEADER`: when it was published (the publishing process's
clock, seconds since the epoch) and the first delivery id it carries (``None``
for a message that carries none, such as an expansion).  A dispatch publishes
each lane's ids in ascending order, so every message of a dispatch carries
lower ids than the ones published after it.

:func:`redis_backlogs` reads the oldest messages of each queue from kombu's
Redis transport, which keeps a queue as Redis lists: publishing is an ``LPUSH``
and consuming a ``BRPOP``, so the element at index -1 is the oldest, the next
one a consumer takes.  A queue is one list per priority step: ``queue`` itself
for step 0, ``queue + sep + str(step)`` for the others (``sep`` is
``"\\x06\\x16"``, the steps ``[0, 3, 6, 9]`` unless the transport options say
otherwise; ``queue_order_strategy`` only orders the queues of one ``BRPOP`` and
names nothing).  A ``global_keyprefix`` option prefixes every key.  Other
brokers tell only how many messages wait: AMQP can look at a message only by
taking it, and a quorum queue counts each such look as a delivery.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

#: The header of every message the package publishes: ``[published at, first id]``.
HEADER = "outbox_sent"
#: Messages read from the old end of each list: enough to see past a few of
#: someone else's (beat's sweep, a task routed to a lane by hand).
LOOK_DEPTH = 4
#: Publish times accepted from a header (seconds since the epoch): 2001 to 2286.
_EPOCH_RANGE = (1e9, 1e10)


@dataclass(frozen=True)
class Sent:
    """What :data:`HEADER` says of one message."""

    at: datetime
    """When it was published, by the publishing process's clock."""
    first: int | None
    """The lowest delivery id it carries; ``None`` when it carries none."""


@dataclass(frozen=True)
class Backlog:
    """One queue as the broker shows it."""

    size: int
    """Messages waiting in it (not those consumers took)."""
    oldest: tuple[Sent | None, ...] | None = None
    """For each of its lists that holds messages, what the oldest of the package's
    messages among the oldest :data:`LOOK_DEPTH` says (``None``: none of them is
    the package's); ``None`` when the broker cannot show messages without taking them."""


def header(first: int | None, at: float) -> dict[str, list[Any]]:
    """The headers of a message carrying deliveries from ``first`` on (``None``: none),
    published at ``at`` (seconds since the epoch)."""
    return {HEADER: [at, first]}


def read_sent(headers: object) -> Sent | None:
    """What a message's ``headers`` say under :data:`HEADER`, or ``None`` if nothing
    usable (a message someone else published, or a value out of range)."""
    if not isinstance(headers, Mapping):
        return None
    value = headers.get(HEADER)
    if not isinstance(value, list) or len(value) != 2:
        return None
    at, first = value
    if not _number(at) or not (_EPOCH_RANGE[0] <= at <= _EPOCH_RANGE[1]):
        return None
    if first is not None and (not isinstance(first, int) or isinstance(first, bool)):
        return None
    return Sent(datetime.fromtimestamp(at, tz=UTC), first)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def redis_backlogs(channel: Any, queues: Sequence[str]) -> dict[str, Backlog]:
    """The backlog of each of ``queues`` on a channel of kombu's Redis transport, in
    one round trip: each list's length and its oldest :data:`LOOK_DEPTH` messages."""
    import redis  # the Redis transport's own client library

    # A client of the channel's pool that prefixes nothing: kombu's prefixing client
    # prefixes only the commands it knows (LLEN, not LRANGE), so keys are built whole.
    client = redis.Redis(connection_pool=channel.client.connection_pool)
    prefix = str(getattr(channel, "global_keyprefix", "") or "")
    lists = {queue: list_names(queue, channel.priority_steps, channel.sep) for queue in queues}
    with client.pipeline(transaction=False) as pipe:
        for names in lists.values():
            for name in names:
                pipe.llen(prefix + name)
                pipe.lrange(prefix + name, -LOOK_DEPTH, -1)
        answers = iter(pipe.execute())
    backlogs: dict[str, Backlog] = {}
    for queue, names in lists.items():
        size, oldest = 0, []
        for _ in names:
            length, messages = int(next(answers)), next(answers)
            size += length
            if length:
                oldest.append(oldest_sent(messages))
        backlogs[queue] = Backlog(size, tuple(oldest))
    return backlogs


def list_names(queue: str, steps: Sequence[int], sep: str) -> list[str]:
    """The Redis lists of ``queue`` (kombu's ``Channel._q_for_pri`` for each step)."""
    return [f"{queue}{sep}{step}" if step else queue for step in dict.fromkeys(steps)]


def oldest_sent(messages: Sequence[bytes | str]) -> Sent | None:
    """What the oldest of the package's messages among ``messages`` (a list's elements
    in Redis order, newest first) says; ``None`` if none is the package's."""
    for raw in reversed(messages):
        try:
            payload = json.loads(raw)
        except ValueError:
            continue
        sent = read_sent(payload.get("headers") if isinstance(payload, dict) else None)
        if sent is not None:
            return sent
    return None
