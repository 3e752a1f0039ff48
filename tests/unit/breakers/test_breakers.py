"""Circuit breakers in memory (the store's contract and its bounds), keys and policies."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from django_outbox.breakers import BreakerPolicy, MemoryBreakerStore, breaker_key, memory
from django_outbox.exceptions import OutboxConfigurationError
from tests.support.breaker_contract import BreakerStoreContract


class TestMemoryStore(BreakerStoreContract):
    """The memory store follows the seed's state machine, as the Redis store does."""

    @pytest.fixture
    def store(self) -> MemoryBreakerStore:
        return MemoryBreakerStore()


# The memory store.


def test_memory_store_stays_bounded() -> None:
    store = MemoryBreakerStore(max_keys=3)
    once = BreakerPolicy(threshold=1, cool_off=60)
    for number in range(10):
        store.record(f"host:{number}.example", once, failed=True, admission=None)
    assert sorted(state.key for state in store.states()) == [f"host:{n}.example" for n in (7, 8, 9)]


def test_memory_store_forgets_idle_breakers(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(memory, "time", SimpleNamespace(monotonic=lambda: now[0]))
    store = MemoryBreakerStore()
    once = BreakerPolicy(threshold=1, cool_off=60)
    store.record("host:old.example", once, failed=True, admission=None)
    now[0] += once.idle_after + 1
    store.record("host:new.example", once, failed=True, admission=None)
    assert [state.key for state in store.states()] == ["host:new.example"]


# Keys and policies.


def test_breaker_key() -> None:
    inbox = "https://Remote.Example/users/a/inbox"
    assert breaker_key("Remote.Example", inbox, "host") == "host:remote.example"
    assert breaker_key("remote.example", inbox, "inbox") == f"inbox:{inbox}"
    with pytest.raises(OutboxConfigurationError):
        breaker_key("remote.example", inbox, "actor")  # type: ignore[arg-type]


@pytest.mark.parametrize(("threshold", "cool_off"), [(0, 60.0), (10, 0.0), (10, -1.0)])
def test_policy_rejects_nonsense(threshold: int, cool_off: float) -> None:
    with pytest.raises(OutboxConfigurationError):
        BreakerPolicy(threshold=threshold, cool_off=cool_off)
    assert BreakerPolicy() == BreakerPolicy(threshold=10, cool_off=60.0)
    assert BreakerPolicy().idle_after == 600.0
    assert BreakerPolicy(cool_off=3600).idle_after == 7200.0
