"""Idle keep-alive connections, kept per pinned address, and the TLS context they share.

A connection is kept for exactly the (scheme, IP, port, host name) it was opened
for: the transport connects to the address it checked, and the host name decides
the TLS identity, so two names served from one IP never share a connection.  Only
connections whose last exchange ended cleanly come back; the most recently used is
taken first (it is the least likely to have been closed by the server), and at most
``per_pin`` wait per address and ``max_pins`` addresses are remembered (least
recently used go first, their connections closed).
"""

from __future__ import annotations

import ssl
from collections import OrderedDict
from collections.abc import Iterable

from django_outbox.transport.connection import HTTPConnection

#: (scheme, IP, port, host name): where a connection goes and whom it must prove to be.
Pin = tuple[str, str, int, str]


class ConnectionPools:
    """The idle connections of one event loop, by pinned address.  Not thread-safe:
    used only from the loop that owns the connections."""

    def __init__(self, per_pin: int = 4, max_pins: int = 1024) -> None:
        self._per_pin = max(0, per_pin)
        self._max_pins = max(1, max_pins)
        self._idle: OrderedDict[Pin, list[HTTPConnection]] = OrderedDict()

    def take(self, pin: Pin) -> HTTPConnection | None:
        """An idle connection to ``pin`` still open, or ``None``."""
        idle = self._idle.get(pin)
        while idle:
            connection = idle.pop()
            if connection.reusable:
                return connection
            connection.close()
        return None

    def give_back(self, pin: Pin, connection: HTTPConnection) -> None:
        """Keep ``connection`` for the next request to ``pin`` if it is fit and there is room."""
        if not connection.reusable:
            connection.close()
            return
        idle = self._idle.get(pin)
        if idle is None:
            idle = self._idle[pin] = []
            while len(self._idle) > self._max_pins:
                _, dropped = self._idle.popitem(last=False)
                _close_all(dropped)
        else:
            self._idle.move_to_end(pin)
        if len(idle) < self._per_pin:
            idle.append(connection)
        else:
            connection.close()

    def close(self) -> None:
        """Close every idle connection (those in use close when they come back unfit)."""
        idle, self._idle = self._idle, OrderedDict()
        for connections in idle.values():
            _close_all(connections)

    def __len__(self) -> int:
        return sum(len(connections) for connections in self._idle.values())


def _close_all(connections: Iterable[HTTPConnection]) -> None:
    for connection in connections:
        connection.close()


def shared_ssl_context(ca_bundle: str | None) -> ssl.SSLContext:
    """A verifying TLS client context (TLS >= 1.2, HTTP/1.1 by ALPN), made once and shared."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificate and name
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca_bundle:
        context.load_verify_locations(cafile=ca_bundle)
    else:
        context.load_default_certs()
    context.set_alpn_protocols(["http/1.1"])
    return context
