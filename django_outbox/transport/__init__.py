"""HTTP transport for deliveries: the SSRF guard, pooled connections, bounded requests.

Nothing here reads Django settings, the ORM or the cache (the only Django import is
that of :mod:`django_outbox.exceptions`, whose configuration error is also an
``ImproperlyConfigured``): the worker hands it a URL, headers and a body and gets
back a :class:`Response` or a :class:`TransportError`.  ``client`` holds
the :class:`Transport`, ``addresses`` the check of where a request may go,
``pool`` the pinned connection pools and the deadline watchdog, ``errors`` the
error tree, ``target`` the one parser of inbox URLs, ``special_addresses`` the
IANA table of addresses no delivery may reach.
"""

from django_outbox.transport.client import Response, Transport, retry_after_seconds
from django_outbox.transport.failures import (
    BlockedAddress,
    ConnectFailed,
    ProtocolFailed,
    ResolveError,
    TimedOut,
    TLSFailed,
    TransportError,
)

__all__ = [
    "BlockedAddress",
    "ConnectFailed",
    "ProtocolFailed",
    "ResolveError",
    "Response",
    "TLSFailed",
    "TimedOut",
    "Transport",
    "TransportError",
    "retry_after_seconds",
]
