"""Shared fixtures: real Redis, a real Celery worker process, loopback inboxes.

``scripts/test`` starts Redis and PostgreSQL and exports ``REDIS_URL`` and
``DATABASE_URL``; without ``DATABASE_URL`` the suite runs on SQLite.
Integration tests use ``transaction=True`` so that the worker process sees
their rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent

#: Worker settings: short retries and leases so that tests finish quickly.
WORKER_SETTINGS: dict[str, Any] = {
    "OUTBOX_RETRY_BASE": 0.5,
    "OUTBOX_RETRY_CAP": 2.0,
    "OUTBOX_LEASE_SECONDS": 30,
    "OUTBOX_TOTAL_TIMEOUT": 5,
    "OUTBOX_CONCURRENCY": 32,
    "OUTBOX_PER_HOST": 4,
    "OUTBOX_STOP_TIMEOUT": 3,
    "OUTBOX_SENDER_GONE_STATUSES": [401],
    "OUTBOX_HOSTS_REFRESH": 0,
    "DEMO_LOG_SIGNALS": True,
}


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, every: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something true, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {predicate}")
        time.sleep(every)


def postgres() -> bool:
    """Whether the suite runs on PostgreSQL."""
    return settings.DATABASES["default"]["ENGINE"].endswith("postgresql")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not os.environ.get("REDIS_URL"):
        raise pytest.UsageError("REDIS_URL is not set: run the suite with scripts/test")
    if not postgres():
        skip = pytest.mark.skip(reason="PostgreSQL only; this run is on SQLite")
        for item in items:
            if "postgres_only" in item.keywords:
                item.add_marker(skip)


def worker_env(extra: dict[str, Any] | None = None) -> dict[str, str]:
    """The environment of a worker process using this session's test database."""
    env = dict(os.environ)
    db = settings.DATABASES["default"]
    if postgres():
        env["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    else:
        env.pop("DATABASE_URL", None)
        env["OUTBOX_SQLITE"] = str(db["NAME"])
    env["OUTBOX_SETTINGS_JSON"] = json.dumps({**WORKER_SETTINGS, **(extra or {})})
    env["PYTHONPATH"] = str(ROOT)
    return env


class Worker:
    """A ``celery worker`` subprocess with the README's queues."""

    def __init__(self, extra: dict[str, Any] | None = None, concurrency: int = 2) -> None:
        log = Path(settings.RUN_DIR) / f"worker-{os.getpid()}-{time.monotonic_ns()}.log"
        self.log_path = log
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "testproject",
                "worker",
                "-Q",
                "outbox.priority,outbox,outbox.low",
                "-c",
                str(concurrency),
                "--loglevel=INFO",
                "--without-heartbeat",
                "--without-mingle",
                "--without-gossip",
            ],
            cwd=ROOT,
            env=worker_env(extra),
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(lambda: b"ready." in log.read_bytes() or self.process.poll() is not None, 60)
        if self.process.poll() is not None:
            raise RuntimeError(f"the worker did not start:\n{log.read_text()}")

    def stop(self) -> None:
        """Warm shutdown, then a kill if it takes too long."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="session")
def worker(django_db_setup: None, django_db_blocker: Any) -> Iterator[Worker]:
    """One worker for the whole session, on the test database."""
    running = Worker()
    yield running
    running.stop()


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The Redis the tests use (``scripts/test`` starts it)."""
    return os.environ["REDIS_URL"]


@pytest.fixture(autouse=True)
def _clean_redis_state() -> None:
    """Forget breakers and remembered schemes between tests."""
    import redis

    from django_outbox.signing.schemes import forget_local

    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    for pattern in ("outbox:breaker:*", "*django_outbox:scheme:*"):
        keys = list(client.scan_iter(pattern, count=1000))
        if keys:
            client.delete(*keys)
    forget_local()


@pytest.fixture(scope="module")
def ca() -> Any:
    """A throwaway certificate authority for TLS inbox servers."""
    import trustme

    return trustme.CA()


@pytest.fixture
def ca_file(ca: Any, tmp_path: Path) -> str:
    """The CA's certificate in a PEM file, as ``OUTBOX_CA_BUNDLE`` takes it."""
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture
def inbox_server() -> Iterator[Any]:
    """A loopback inbox server that records every request."""
    from testproject.inbox_servers import InboxServer

    with InboxServer() as server:
        yield server


@pytest.fixture(scope="session")
def chaos_broker(django_db_setup: None) -> Iterator[Any]:
    """A private ``redis-server`` that the chaos tests may flush, stop and restart."""
    from tests.chaos import RedisServer

    server = RedisServer(Path(settings.RUN_DIR) / f"chaos-redis-{os.getpid()}").start()
    yield server
    server.stop()


@pytest.fixture
def chaos_workers(chaos_broker: Any) -> Iterator[Any]:
    """Chaos workers on the private broker, which this process publishes to meanwhile."""
    from django.test import override_settings

    from tests.chaos import IN_PROCESS_SETTINGS, Workers, publishing_to

    if chaos_broker.process is None:
        chaos_broker.start()
    chaos_broker.client().flushall()
    workers = Workers(chaos_broker.url)
    with override_settings(**IN_PROCESS_SETTINGS), publishing_to(chaos_broker.url):
        try:
            yield workers
        finally:
            workers.close()
