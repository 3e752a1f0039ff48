"""The asyncio transport driven from plain test code, on an event loop of its own."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

from django_outbox.transport import Response, Transport


class LoopTransport:
    """A :class:`Transport` whose ``post`` blocks the calling test until it answers.

    One loop thread per instance, so that keep-alive connections outlive a call.
    ``transport`` drives an existing :class:`Transport` on this instance's loop.
    """

    def __init__(self, transport: Transport | None = None, **options: Any) -> None:
        options.setdefault("allowed_networks", ["127.0.0.0/8"])
        options.setdefault("user_agent", "outbox-test/1")
        self.transport = transport or Transport(**options)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def post(self, url: str, headers: Mapping[str, str], body: bytes) -> Response:
        """POST on the transport's loop and wait for the answer (or its error)."""
        coroutine = self.transport.post(url, headers, body)
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(60)

    def close(self) -> None:
        """Close the idle connections (on the loop that owns them)."""
        self.loop.call_soon_threadsafe(self.transport.close)
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0.05), self.loop).result(5)
