"""The breaker and host rate stores and policies the settings ask for."""

from __future__ import annotations

from django_outbox.breakers.memory import MemoryBreakerStore
from django_outbox.breakers.policy import BreakerPolicy, BreakerStore
from django_outbox.breakers.rate_memory import MemoryRateStore
from django_outbox.breakers.rate_redis import redis_rate_store_for_cache
from django_outbox.breakers.rates import RatePolicy, RateStore, host_policy
from django_outbox.breakers.redis_store import redis_store_for_cache
from django_outbox.conf import conf


def configured_store() -> BreakerStore:
    """A new breaker store as the settings ask: shared in Redis, or this process's memory."""
    alias = conf.BREAKER_CACHE
    return redis_store_for_cache(alias) if alias else MemoryBreakerStore()


def configured_policy() -> BreakerPolicy | None:
    """The configured breaker policy, or ``None`` when breakers are off (threshold 0)."""
    if conf.BREAKER_THRESHOLD <= 0:
        return None
    return BreakerPolicy(
        threshold=conf.BREAKER_THRESHOLD,
        cool_off=conf.BREAKER_COOL_OFF,
        # Two knocks of the whole time budget, as a worker's lease allows for.
        answer_within=2 * conf.TOTAL_TIMEOUT + 10,
    )


def breakers_shared() -> bool:
    """Whether breakers are kept where every process sees them (Redis); if not, each
    worker process keeps its own and no other process can list or reset them."""
    return conf.BREAKER_CACHE is not None


def rates_on() -> bool:
    """Whether hosts' requests are spaced at all: a rate is set for some host, or slow
    start is on (it slows down throttling hosts and ramps up hosts whose breaker closed)."""
    return conf.HOST_RATE is not None or bool(conf.HOST_RATES) or conf.SLOW_START_SECONDS > 0


def configured_rate_store() -> RateStore | None:
    """A new host rate store as the settings ask (in the breakers' cache, or this
    process's memory), or ``None`` when :func:`rates_on` is not."""
    if not rates_on():
        return None
    alias = conf.BREAKER_CACHE
    return redis_rate_store_for_cache(alias) if alias else MemoryRateStore()


def rate_policy(host: str) -> RatePolicy:
    """The rate policy of ``host`` under the settings."""
    return host_policy(
        host, conf.HOST_RATE, conf.HOST_RATES, conf.RATE_FLOOR, conf.SLOW_START_SECONDS
    )
