"""Inboxes in memory: what a delivery POSTs, and who answers it in a test.

An inbox here is any callable that takes an :class:`InboxRequest` and returns
an :data:`Answer`.  :class:`FakeInbox` is the ready-made one: it records every
request and answers from a list.  :class:`FakeTransport` stands where the
worker's HTTP client stands, so the package's own attempt code (signing,
double-knocking, judging the answer) runs unchanged, with no socket opened.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from requests.structures import CaseInsensitiveDict

from django_outbox.conf import conf
from django_outbox.transport import Response

Answer = int | tuple[int, Mapping[str, str]]
"""What an inbox answers: a status, or a status and response headers (``Retry-After``)."""


@dataclass(frozen=True)
class InboxRequest:
    """One request as the inbox received it: method, URL, headers and the exact body.

    ``headers`` is case-insensitive and holds what the real transport would
    send: the signed headers, ``User-Agent`` and ``Content-Length``.
    """

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes

    @property
    def path(self) -> str:
        """The path and query of :attr:`url`, as the request line carries them."""
        parts = urlsplit(self.url)
        return parts.path + (f"?{parts.query}" if parts.query else "")

    def json(self) -> Any:
        """The body parsed as JSON: the activity as it was delivered."""
        return json.loads(self.body)


Handler = Callable[[InboxRequest], Answer]
"""An inbox in a test: takes the request, returns its :data:`Answer`."""


class FakeInbox:
    """An inbox that records what it receives and answers from ``answers`` in turn.

    ``FakeInbox()`` accepts everything with 202; ``FakeInbox(500, 202)`` fails
    the first request and accepts the rest (the last answer repeats);
    ``FakeInbox((429, {"Retry-After": "60"}))`` asks to come back later.  One
    instance may answer many inbox URLs: :attr:`requests` keeps them all, in order.
    """

    def __init__(self, *answers: Answer) -> None:
        self.answers: list[Answer] = list(answers) or [202]
        self.requests: list[InboxRequest] = []

    def __call__(self, request: InboxRequest) -> Answer:
        """Record ``request`` and give the next answer."""
        answer = self.answers[min(len(self.requests), len(self.answers) - 1)]
        self.requests.append(request)
        return answer

    @property
    def urls(self) -> list[str]:
        """The URL of each request received, in order."""
        return [request.url for request in self.requests]

    def activities(self, type: str | None = None) -> list[Any]:
        """The activities received (parsed bodies), only those of ``type`` if given."""
        found = [request.json() for request in self.requests]
        return [a for a in found if type is None or (isinstance(a, dict) and a.get("type") == type)]

    def clear(self) -> None:
        """Forget the requests received; the answers start again from the first."""
        self.requests.clear()


class FakeTransport:
    """Stands where the worker's :class:`~django_outbox.transport.Transport` stands.

    The attempt code calls only :meth:`post`, which hands each request to the
    handler ``route(url)`` names.  Nothing is resolved or connected, so
    ``OUTBOX_ALLOWED_NETWORKS`` and the timeouts play no part; a handler may
    raise a :class:`~django_outbox.transport.TransportError` (``ConnectFailed``,
    ``TimedOut``) to play an inbox that cannot be reached.  (Building a real
    ``Transport`` loads the system's CA certificates, tens of milliseconds a test.)
    """

    def __init__(self, route: Callable[[str], Handler]) -> None:
        self.user_agent = conf.USER_AGENT
        self._route = route

    async def post(self, url: str, headers: Mapping[str, str], body: bytes) -> Response:
        """Give the request to its handler and return its answer as a :class:`Response`."""
        sent: CaseInsensitiveDict[str] = CaseInsensitiveDict({"User-Agent": self.user_agent})
        sent.update(headers)
        sent["Content-Length"] = str(len(body))
        answer = self._route(url)(InboxRequest("POST", url, sent, body))
        status, answer_headers = answer if isinstance(answer, tuple) else (answer, {})
        return Response(status, CaseInsensitiveDict(answer_headers), b"", 0.0)
