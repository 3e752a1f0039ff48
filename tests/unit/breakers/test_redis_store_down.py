"""The Redis breaker store when Redis cannot be reached (no Redis is needed for these)."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace
from typing import Any

import pytest

from django_outbox.breakers import Admission, BreakerStoreUnavailable
from django_outbox.breakers import redis_store as redis_breakers
from django_outbox.breakers.redis_store import RedisBreakerStore, redis_store_for_cache
from django_outbox.exceptions import OutboxError
from tests.support.breaker_helpers import KEY, POLICY, closed_port_client


@pytest.fixture(autouse=True)
def _fresh_warning_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the first warning it causes, whatever ran before."""
    monkeypatch.setattr(redis_breakers, "_warnings", redis_breakers._WarningLimiter(60.0))


def _closed_port_store(error_pause: float = 15.0) -> tuple[RedisBreakerStore, list[int]]:
    client = closed_port_client()
    calls: list[int] = []

    def connect() -> Any:
        calls.append(1)
        return client

    return RedisBreakerStore(connect, error_pause=error_pause), calls


def test_a_down_redis_lets_deliveries_through_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, _ = _closed_port_store(error_pause=0.0)
    with caplog.at_level(logging.WARNING, logger="django_outbox.breakers"):
        assert store.admit(KEY, POLICY).kind == "pass"
        store.record(KEY, POLICY, failed=True, admission=None)
        store.record(KEY, POLICY, failed=False, admission=Admission("probe", token="token"))
        assert store.admit(KEY, POLICY).kind == "pass"
    logged = [record for record in caplog.records if record.name == "django_outbox.breakers"]
    assert len(logged) == 1, "rate-limited"
    assert logged[0].levelno == logging.WARNING
    assert "unavailable" in logged[0].getMessage()


def test_a_down_redis_is_skipped_for_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    store, calls = _closed_port_store(error_pause=15.0)
    assert store.admit(KEY, POLICY).kind == "pass"
    store.record(KEY, POLICY, failed=True, admission=None)
    assert store.admit(KEY, POLICY).kind == "pass"
    assert len(calls) == 1, "not asked again during the pause"
    later = time.monotonic() + 16.0
    monkeypatch.setattr(redis_breakers, "time", SimpleNamespace(monotonic=lambda: later))
    assert store.admit(KEY, POLICY).kind == "pass"
    assert len(calls) == 2, "asked again once the pause is over"


def test_a_down_redis_is_reported_to_the_admin() -> None:
    store, _ = _closed_port_store()
    with pytest.raises(BreakerStoreUnavailable):
        store.states()
    with pytest.raises(OutboxError):
        store.reset(KEY)


def test_redis_store_for_cache_connects_lazily() -> None:
    store = redis_store_for_cache("no-such-cache")
    assert isinstance(store, RedisBreakerStore)
    assert store.prefix == "outbox:breaker:"
