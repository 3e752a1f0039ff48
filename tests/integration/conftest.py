"""Integration fixtures: real Redis, Celery worker processes, a private broker for chaos.

The Celery broker is Redis unless ``OUTBOX_BROKER_URL`` names another (``scripts/test``
runs the tests marked ``broker`` again with RabbitMQ's ``amqp://`` URL); Redis stays the
cache and breaker store either way.

Every test here is marked ``integration`` and needs ``REDIS_URL`` (``scripts/test``
starts Redis and PostgreSQL and exports it with ``DATABASE_URL``).  Tests that
use a worker process mark themselves ``django_db(transaction=True)`` so that the
worker sees their rows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from tests.support.workers import Worker, WorkerFactory, rabbitmq

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = [item for item in items if HERE in item.path.parents]
    if ours and not os.environ.get("REDIS_URL"):
        raise pytest.UsageError(
            "tests/integration needs REDIS_URL: run scripts/test, or only tests/unit"
        )
    for item in ours:
        item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session", autouse=True)
def _flush_outlasts_deadlocks() -> Iterator[None]:
    """A transactional test ends by emptying every table (one ``TRUNCATE``) while the
    shared worker may still be saving a late outcome: PostgreSQL may then find the two
    in a deadlock and cancel the ``TRUNCATE``.  Empty the tables again when it does."""
    from django.db import OperationalError
    from django.db.backends.base.operations import BaseDatabaseOperations

    flush = BaseDatabaseOperations.execute_sql_flush

    def flush_again_after_a_deadlock(self: BaseDatabaseOperations, sql_list: list[str]) -> None:
        for attempt in range(5):
            try:
                return flush(self, sql_list)
            except OperationalError as error:
                if "deadlock" not in str(error) or attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))

    BaseDatabaseOperations.execute_sql_flush = flush_again_after_a_deadlock  # type: ignore[method-assign]
    try:
        yield
    finally:
        BaseDatabaseOperations.execute_sql_flush = flush  # type: ignore[method-assign]


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The Redis the tests use (``scripts/test`` starts it)."""
    return os.environ["REDIS_URL"]


@pytest.fixture(autouse=True)
def _clean_redis_state(redis_url: str) -> None:
    """Forget breakers, host rates and remembered schemes in Redis between tests."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        for pattern in ("outbox:breaker:*", "outbox:rate:*", "*django_outbox:scheme:*"):
            keys = list(client.scan_iter(pattern, count=1000))
            if keys:
                client.delete(*keys)
    finally:
        client.close()


@pytest.fixture(scope="session")
def workers(django_db_setup: None) -> Iterator[WorkerFactory]:
    """Every worker process of the session, on the test database; all stopped at the end."""
    factory = WorkerFactory()
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def worker(workers: WorkerFactory) -> Worker:
    """The shared worker with the test settings, running."""
    return workers.shared()


@pytest.fixture
def make_worker(workers: WorkerFactory) -> Iterator[Callable[..., Worker]]:
    """``make_worker(concurrency=2, **settings)`` starts a worker of the test's own.

    The shared worker is stopped first, so that the test's workers alone take the
    queues; the next test that asks for ``worker`` starts it again.  The test's
    workers are stopped at teardown.
    """
    workers.stop_shared()
    mine: list[Worker] = []

    def make(concurrency: int = 2, **extra: Any) -> Worker:
        worker = workers.start(extra, concurrency)
        mine.append(worker)
        return worker

    try:
        yield make
    finally:
        for worker in mine:
            worker.stop()


@pytest.fixture(scope="session")
def chaos_broker(django_db_setup: None) -> Iterator[Any]:
    """A private broker of the session's kind that the chaos tests may flush, stop and
    restart: a ``redis-server``, or a RabbitMQ node when the tests run on RabbitMQ."""
    from tests.support.chaos_servers import RedisServer
    from tests.support.rabbitmq import RabbitServer

    kind = RabbitServer if rabbitmq() else RedisServer
    server = kind(Path(settings.RUN_DIR) / f"chaos-broker-{os.getpid()}").start()
    yield server
    server.close()


@pytest.fixture
def chaos_workers(chaos_broker: Any, workers: WorkerFactory) -> Iterator[Any]:
    """Chaos workers on the private broker, which this process publishes to meanwhile.

    The shared worker is stopped first: its recovery pass would publish the test's
    rows to the session's broker and send them itself."""
    from django_outbox.models import Lane
    from tests.support.chaos import Workers
    from tests.support.chaos_servers import publishing_to

    workers.stop_shared()
    if not chaos_broker.running():
        chaos_broker.start()
    chaos_broker.clear(Lane.values)
    workers = Workers(chaos_broker.url)
    with publishing_to(chaos_broker.url):
        try:
            yield workers
        finally:
            workers.close()


@pytest.fixture
def faults(redis_url: str) -> Iterator[Any]:
    """The fault plan the workers started with ``fault_settings`` read (cleared)."""
    from tests.support.faults import Faults

    plan = Faults(redis_url)
    yield plan
    plan.clear()
