"""Loopback inbox servers that speak TLS with a certificate for the names given."""

from __future__ import annotations

import ssl
from typing import Any

from testproject.inbox_servers import InboxServer


def tls_server(ca: Any, *names: str, seen: list[str] | None = None) -> InboxServer:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(context)
    if seen is not None:
        context.sni_callback = lambda sock, name, ctx: seen.append(name)
    return InboxServer(ssl_context=context)
