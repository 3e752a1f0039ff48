"""Unit fixtures: no broker (publishing is recorded), in-memory caches, an in-process worker.

Nothing here connects to Redis or PostgreSQL: ``scripts/test`` runs these tests
before it starts either, with neither ``REDIS_URL`` nor ``DATABASE_URL`` set.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.cache import caches
from django.core.cache.backends.locmem import LocMemCache
from django.db import connections

from django_outbox.broker.lost import LaneWatch
from django_outbox.sending import keys
from django_outbox.store.transitions import OutcomePlan
from django_outbox.upkeep import recovery_pass
from django_outbox.worker import recorder
from django_outbox.worker.process import stop_this_process
from tests.support.broker import RecordingApp
from tests.support.clocks import FakeClock
from tests.support.observability import memory_only


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> RecordingApp:
    """What the package publishes during the test, recorded instead of sent."""
    app = RecordingApp()
    monkeypatch.setattr("django_outbox.broker.publish.current_app", app)
    return app


@pytest.fixture(autouse=True)
def _no_broker(broker: RecordingApp) -> None:
    """Every unit test publishes to the recorder, never to a real broker."""


@pytest.fixture(autouse=True)
def lane_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The clock of the recovery pass's watch on the lanes, whose memory is fresh in
    each test: what one test's passes saw is not another's."""
    clock = FakeClock()
    monkeypatch.setattr(recovery_pass, "_lanes", LaneWatch(clock))
    return clock


@pytest.fixture(autouse=True)
def _empty_local_caches() -> None:
    """In-memory caches (remembered signing schemes) start empty in each test."""
    for cache in caches.all(initialized_only=True):
        if isinstance(cache, LocMemCache):
            cache.clear()


@pytest.fixture
def no_redis() -> Iterator[None]:
    """No Redis anywhere (breakers, metrics and caches in this process's memory), and an
    empty in-memory metrics store: for tests that count (``usefixtures("no_redis")``)."""
    with memory_only():
        yield


@pytest.fixture
def worker_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fresh in-process worker (engine, recorder, transport) for ``run_deliveries``.

    The test creates it on first use; it is stopped at teardown, so that no engine
    or recorder thread outlives the test.  The recorder thread closes its database
    connection after each batch, so that none is left open on the test database.
    """
    save_and_publish = recorder.publish_effects

    def publish_then_close(plan: OutcomePlan) -> None:
        try:
            save_and_publish(plan)
        finally:
            connections.close_all()  # the recorder thread's own

    monkeypatch.setattr(recorder, "publish_effects", publish_then_close)
    stop_this_process(timeout=1)
    try:
        yield
    finally:
        stop_this_process(timeout=5)


@pytest.fixture(scope="module")
def rsa_pem() -> str:
    """An RSA-2048 private key (PEM), one per test module."""
    return keys.generate_rsa_pem()


@pytest.fixture(scope="module")
def ed_pem() -> str:
    """An Ed25519 private key (PEM), one per test module."""
    return keys.generate_ed25519_pem()
