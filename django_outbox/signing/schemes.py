"""Which signature scheme each origin accepts, remembered and shared.

An origin (``scheme://host[:port]``, as Fedify keys it: two servers on one
host name but different ports may differ) is tried in the scheme it last
accepted, or ``OUTBOX_FIRST_SCHEME``; on a 400 or 401 the other scheme is
tried (double-knocking), and only what an origin accepted is remembered, in
Django's cache (``OUTBOX_SCHEME_CACHE``) so that every worker learns it, with a
short-lived copy in process memory so that the cache is not asked on every
delivery.
"""

from __future__ import annotations

import threading
import time

from django.core.cache import caches

from django_outbox.conf import conf
from django_outbox.signing.http import Scheme

_LOCAL_TTL = 300.0
_SHARED_TTL = 30 * 86400
_local: dict[str, tuple[Scheme | None, float]] = {}
_lock = threading.Lock()


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
    scheme = Scheme(value) if value in {s.value for s in Scheme} else None
    with _lock:
        if len(_local) > 50_000:
            _local.clear()
        _local[origin] = (scheme, now + _LOCAL_TTL)
    return scheme


def remember_here(origin: str, scheme: Scheme) -> bool:
    """Note in this process that ``origin`` accepted ``scheme``; True if that is news
    the shared cache should hear (:func:`remember`)."""
    with _lock:
        entry = _local.get(origin)
        _local[origin] = (scheme, time.monotonic() + _LOCAL_TTL)
    return entry is None or entry[0] != scheme


def share(origin: str, scheme: Scheme) -> None:
    """Tell the shared cache that ``origin`` accepted ``scheme`` (after
    :func:`remember_here` said it was news: asking it again would say it is not)."""
    caches[conf.SCHEME_CACHE].set(_cache_key(origin), scheme.value, _SHARED_TTL)


def forget_local() -> None:
    """Drop the in-process copies (tests, and after a fork)."""
    with _lock:
        _local.clear()
