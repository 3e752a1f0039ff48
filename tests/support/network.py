"""Loopback ports for servers the tests start, and for clients that must find nobody."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback TCP port that nothing listens on (as of now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
