"""Circuit breakers: hold back deliveries to destinations that keep failing.

``policy`` holds the rules and the protocol of a store, ``memory`` and
``redis_store`` the two stores (``redis_scripts`` the Lua that changes a breaker in
Redis); ``configured`` builds what the settings ask for.
"""

from django_outbox.breakers.memory import MemoryBreakerStore
from django_outbox.breakers.policy import (
    Admission,
    BreakerPolicy,
    BreakerScope,
    BreakerState,
    BreakerStore,
    BreakerStoreUnavailable,
    Report,
    breaker_key,
)
from django_outbox.breakers.redis_store import RedisBreakerStore

__all__ = [
    "Admission",
    "BreakerPolicy",
    "BreakerScope",
    "BreakerState",
    "BreakerStore",
    "BreakerStoreUnavailable",
    "MemoryBreakerStore",
    "RedisBreakerStore",
    "Report",
    "breaker_key",
]
