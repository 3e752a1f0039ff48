"""Reading the oldest waiting messages of a queue on kombu's Redis transport, for real."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kombu import Connection, Exchange, Producer, Queue

from django_outbox.broker.backlog import Backlog, header, read_sent, redis_backlogs
from django_outbox.broker.publish import lane_backlogs, publish
from tests.support.workers import rabbitmq

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis_state]

AT = 1_800_000_000.5
#: Queues no worker consumes.
QUEUE, EMPTY = "lanetest.backlog", "lanetest.empty"


@pytest.fixture
def clean(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    keys = [*client.scan_iter("lanetest*"), *client.scan_iter("_kombu.binding*.lanetest*")]
    if keys:
        client.delete(*keys)
    client.close()


def test_each_priority_list_s_oldest_message_is_read_with_a_key_prefix(
    redis_url: str, clean: redis.Redis
) -> None:
    """Priority steps of its own and a global key prefix: the lists are found where
    kombu puts them, and each list's oldest message of the package's is the one read."""
    options = {
        "priority_steps": [0, 4, 8],
        "global_keyprefix": "lanetest:",
        "queue_order_strategy": "priority",
    }
    with Connection(redis_url, transport_options=options) as connection:
        channel = connection.default_channel
        queue = Queue(QUEUE, Exchange(QUEUE), routing_key=QUEUE)
        producer = Producer(channel, exchange=queue.exchange, routing_key=QUEUE)

        def put(headers: dict[str, Any], priority: int = 0) -> None:
            producer.publish({}, headers=headers, priority=priority, declare=[queue])

        put({"task": "someone.else"})  # no header of ours, and the oldest
        put(header(5, AT))
        put(header(6, AT + 1))
        put(header(1, AT - 5), priority=6)  # step 4
        backlogs = redis_backlogs(channel, [QUEUE, EMPTY])

    assert clean.llen(f"lanetest:{QUEUE}") == 3
    assert clean.llen(f"lanetest:{QUEUE}\x06\x164") == 1
    assert backlogs == {
        QUEUE: Backlog(4, (read_sent(header(5, AT)), read_sent(header(1, AT - 5)))),
        EMPTY: Backlog(0, ()),
    }


def test_the_package_s_publisher_reads_what_it_published(clean: redis.Redis) -> None:
    """Through the app's own transport options (the test project's Redis settings)."""
    if rabbitmq():
        pytest.skip("the session's broker is RabbitMQ")
    before = time.time()
    assert publish({QUEUE: [30, 10, 20]})
    backlogs = lane_backlogs([QUEUE, EMPTY])

    (sent,) = backlogs[QUEUE].oldest or (None,)
    assert backlogs[QUEUE].size == 1 and backlogs[EMPTY] == Backlog(0, ())
    assert sent is not None and sent.first == 10
    assert before <= sent.at.timestamp() <= time.time()
