"""Circuit breakers: hold back deliveries to destinations that keep failing.

``policy`` holds the rules and the protocol of a store, ``memory`` and
``redis_store`` the two stores (``redis_scripts`` the Lua that changes a breaker in
Redis); ``configured`` builds what the settings ask for.  Host rates: ``rates``
holds their arithmetic and a rate store's protocol, ``rate_memory`` and
``rate_redis`` the two stores (``rate_scripts`` their Lua), ``ramp_shares`` how far
along its ramp each host is, as this process last learnt it.
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
