"""The one module that imports ``prometheus-client`` (the ``metrics`` extra).

Without it, :func:`exposition` returns ``None`` and :func:`register_default`
does nothing; the workers still count (``outbox status`` shows their times).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from django_outbox.conf import conf

try:
    import prometheus_client
except ImportError:  # the optional extra is not installed
    prometheus_client = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

_lock = threading.Lock()
_own: CollectorRegistry | None = None
_registered_default = False


def available() -> bool:
    """Whether ``prometheus-client`` is installed."""
    return prometheus_client is not None


def outbox_registry() -> CollectorRegistry | None:
    """A registry holding only the outbox's collector (what the package's view serves)."""
    global _own
    if prometheus_client is None:
        return None
    from django_outbox.metrics.collectors import OutboxCollector

    with _lock:
        if _own is None:
            _own = prometheus_client.CollectorRegistry(auto_describe=False)
            _own.register(OutboxCollector())
        return _own


def register_default() -> bool:
    """Add the outbox's collector to ``prometheus_client.REGISTRY``, once.

    That is the registry ``django-prometheus``'s ``/metrics`` and
    ``prometheus_client.start_http_server`` serve (outside multiprocess mode).
    Returns whether the collector is registered there.
    """
    global _registered_default
    if prometheus_client is None or not conf.METRICS:
        return False
    from django_outbox.metrics.collectors import OutboxCollector

    with _lock:
        if not _registered_default:
            prometheus_client.REGISTRY.register(OutboxCollector())
            _registered_default = True
    return True


def exposition() -> tuple[bytes, str] | None:
    """The outbox's metrics in Prometheus's text format and its content type, or ``None``."""
    registry = outbox_registry()
    if registry is None:
        return None
    return prometheus_client.generate_latest(registry), prometheus_client.CONTENT_TYPE_LATEST
