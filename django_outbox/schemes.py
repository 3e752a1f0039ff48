"""Which signature scheme each host accepts, remembered and shared.

Hosts are tried in the scheme they last accepted, or ``OUTBOX_FIRST_SCHEME``;
on a 400 or 401 the other scheme is tried (double-knocking), and only what a
host accepted is remembered, in Django's cache (``OUTBOX_SCHEME_CACHE``) so
that every worker learns it, with a short-lived copy in process memory so
that the cache is not asked on every delivery.
"""

from __future__ import annotations

import threading
import time

from django.core.cache import caches

from django_outbox.conf import conf
from django_outbox.signing import Scheme

_LOCAL_TTL = 300.0
_SHARED_TTL = 30 * 86400
_local: dict[str, tuple[Scheme | None, float]] = {}
_lock = threading.Lock()


def _cache_key(host: str) -> str:
    return f"django_outbox:scheme:{host}"


def remembered(host: str) -> Scheme | None:
    """The scheme ``host`` last accepted, if any is known."""
    now = time.monotonic()
    with _lock:
        entry = _local.get(host)
    if entry is not None and entry[1] > now:
        return entry[0]
    value = caches[conf.SCHEME_CACHE].get(_cache_key(host))
    scheme = Scheme(value) if value in {s.value for s in Scheme} else None
    with _lock:
        if len(_local) > 50_000:
            _local.clear()
        _local[host] = (scheme, now + _LOCAL_TTL)
    return scheme


def remember(host: str, scheme: Scheme) -> None:
    """Record that ``host`` accepted ``scheme``."""
    with _lock:
        entry = _local.get(host)
        _local[host] = (scheme, time.monotonic() + _LOCAL_TTL)
    if entry is None or entry[0] != scheme:
        caches[conf.SCHEME_CACHE].set(_cache_key(host), scheme.value, _SHARED_TTL)


def forget_local() -> None:
    """Drop the in-process copies (tests, and after a fork)."""
    with _lock:
        _local.clear()
