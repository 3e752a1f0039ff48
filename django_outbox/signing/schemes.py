"""Which signature scheme each origin accepts, remembered and shared.

An origin (``scheme://host[:port]``, as Fedify keys it: two servers on one
host name but different ports may differ) is tried in the scheme it last
accepted, or ``OUTBOX_FIRST_SCHEME``; on a 400 or 401 the other scheme is
tried (double-knocking), and only what an origin accepted is remembered, in
Django's cache (``OUTBOX_SCHEME_CACHE``) so that every worker learns it, with a
short-lived copy in process memory so that the cache is not asked on every
delivery.  What a process learns is told to the cache in batches
(:func:`share_learnt`, after each batch of outcomes is saved), not one write per host.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from django.core.cache import caches

from django_outbox.conf import conf
from django_outbox.signing.http import Scheme

_LOCAL_TTL = 300.0
_SHARED_TTL = 30 * 86400
_local: dict[str, tuple[Scheme | None, float]] = {}
_lock = threading.Lock()
#: Origin -> the scheme it accepted, learnt here and not yet told to the shared cache.
_learnt: dict[str, Scheme] = {}
_SCHEMES = {s.value: s for s in Scheme}

logger = logging.getLogger("django_outbox.signing")


def _cache_key(origin: str) -> str:
    return f"django_outbox:scheme:{origin}"


def remembered_here(origin: str) -> tuple[bool, Scheme | None]:
    """``(True, scheme)`` when this process's copy knows what ``origin`` accepted
    (``None``: nothing yet), ``(False, None)`` when the shared cache must be asked."""
    with _lock:
        entry = _local.get(origin)
    if entry is not None and entry[1] > time.monotonic():
        return True, entry[0]
    return False, None


def remembered(origin: str) -> Scheme | None:
    """The scheme ``origin`` last accepted, if any is known (may ask the shared cache)."""
    known, scheme = remembered_here(origin)
    if known:
        return scheme
    now = time.monotonic()
    value = caches[conf.SCHEME_CACHE].get(_cache_key(origin))
    return _keep({origin: _SCHEMES.get(str(value))}, now)[origin]


def recall(origins: Iterable[str]) -> None:
    """Copy into this process what the shared cache knows of those ``origins`` this
    process does not know, in one round trip: a worker calls it for a claim's
    deliveries, so that their first contact with a host need not ask the cache.
    A cache that fails is only logged (each delivery then asks it alone)."""
    now = time.monotonic()
    with _lock:
        unknown = {o for o in origins if (entry := _local.get(o)) is None or entry[1] <= now}
    if not unknown:
        return
    keys = {_cache_key(origin): origin for origin in unknown}
    try:
        found = caches[conf.SCHEME_CACHE].get_many(keys)
    except Exception:
        logger.warning("could not read remembered schemes from the cache", exc_info=True)
        return
    _keep({origin: _SCHEMES.get(str(found.get(key))) for key, origin in keys.items()}, now)


def _keep(schemes: dict[str, Scheme | None], now: float) -> dict[str, Scheme | None]:
    """Keep ``schemes`` (read from the shared cache at ``now``) in this process's copy."""
    with _lock:
        if len(_local) + len(schemes) > 50_000:
            _local.clear()
        for origin, scheme in schemes.items():
            _local[origin] = (scheme, now + _LOCAL_TTL)
    return schemes


def remember_here(origin: str, scheme: Scheme) -> bool:
    """Note in this process that ``origin`` accepted ``scheme``; True if that is news
    the shared cache should hear (:func:`remember`)."""
    with _lock:
        entry = _local.get(origin)
        _local[origin] = (scheme, time.monotonic() + _LOCAL_TTL)
    return entry is None or entry[0] != scheme


def share(origin: str, scheme: Scheme) -> None:
    """Note that the shared cache should hear that ``origin`` accepted ``scheme`` (after
    :func:`remember_here` said it was news: asking it again would say it is not); the
    next :func:`share_learnt` tells it."""
    with _lock:
        _learnt[origin] = scheme


def share_learnt() -> int:
    """Tell the shared cache, in one round trip, what :func:`share` noted since the last
    call; how many origins it told.  A cache that fails is only logged and those
    origins are dropped: a worker that does not know an origin's scheme double-knocks
    once and learns it again."""
    with _lock:
        learnt = dict(_learnt)
        _learnt.clear()
    if not learnt:
        return 0
    values = {_cache_key(origin): scheme.value for origin, scheme in learnt.items()}
    try:
        caches[conf.SCHEME_CACHE].set_many(values, _SHARED_TTL)
    except Exception:
        logger.warning(
            "could not tell the cache the schemes of %d origins", len(values), exc_info=True
        )
        return 0
    return len(values)


def forget_local() -> None:
    """Drop the in-process copies (tests, and after a fork)."""
    with _lock:
        _local.clear()
        _learnt.clear()
