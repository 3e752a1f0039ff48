"""One HTTP/1.1 client connection on an asyncio event loop.

:class:`HTTPConnection` is an :class:`asyncio.Protocol`: the loop hands it bytes as
they arrive and ``httptools`` (bindings to llhttp, the parser of Node.js and uvicorn)
parses them in place, one parser per connection, with no thread and no file object.
It reads what a delivery needs and no more: the status, the headers and at most
``max_body`` bytes of the body; a longer body ends the connection instead of being
drained.  A read timeout is a timer restarted on every chunk that arrives, so a server
that goes quiet for ``read_timeout`` seconds is cut off however long its answer had
been flowing.

Limits, whatever the server sends: a head (status line and headers, interim ``1xx``
answers included) of at most :data:`MAX_HEAD` bytes and :data:`MAX_HEADER_LINES`
lines; besides the body, at most ``2 * MAX_HEAD`` bytes in all (the head, then the
trailers) and :data:`MAX_CHUNK_FRAMING` bytes of framing per chunk.  llhttp refuses
what does not frame unambiguously (two Content-Lengths, Content-Length beside
Transfer-Encoding, obsolete line folding, bare LF line ends).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import NamedTuple, cast

import httptools

from django_outbox.transport.failures import ProtocolFailed, TimedOut

#: The longest head accepted (status line, headers and the blank line), 64 KiB as
#: http.client's line limits allow.
MAX_HEAD = 64 * 1024
#: The most lines a head may have, its status line included.
MAX_HEADER_LINES = 200
#: The bytes a chunk may spend besides its data: size line (with extensions) and CRLFs.
MAX_CHUNK_FRAMING = 1024


class Headers(Mapping[str, str]):
    """Response headers, looked up case-insensitively; a repeated header's values joined."""

    __slots__ = ("_items",)

    def __init__(self, items: dict[str, str]) -> None:
        self._items = items  # lower-case name -> value

    def __getitem__(self, name: str) -> str:
        return self._items[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._items

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        """The value of ``name``, whatever its case, or ``default``."""
        return self._items.get(name.lower(), default)


class Answer(NamedTuple):
    """What the connection read: status, headers, body (capped), and whether it was whole."""

    status: int
    headers: Headers
    body: bytes
    complete: bool


class _Stop(Exception):
    """Raised in a parser callback to stop parsing: the reason is on the connection."""


class HTTPConnection(asyncio.Protocol):
    """A keep-alive HTTP/1.1 connection that sends one request at a time."""

    def __init__(self, max_body: int, read_timeout: float) -> None:
        self._max_body = max_body
        self._read_timeout = read_timeout
        self._transport: asyncio.Transport | None = None
        self._answer: asyncio.Future[Answer] | None = None
        self._timer: asyncio.TimerHandle | None = None
        # Loop time until which the server may stay quiet, pushed on by each arrival
        # without touching the timer, which looks at it when it fires.
        self._quiet_until = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._parser = httptools.HttpResponseParser(self)
        # The answer being read (reset by exchange; the head's part by each 1xx too).
        self._start = b""  # its first bytes, to show in errors about the status line
        self._fed = 0  # bytes handed to the parser
        self._body = bytearray()
        self._chunks = 0
        self._items: dict[str, str] = {}
        self._lines = 0  # of the head being read
        self._status = 0
        self._head_done = False  # the final (non-1xx) head was read
        self._until_close = False  # its body ends when the server closes
        self._done = False  # the final answer was read whole
        self._stop: ProtocolFailed | None = None  # why a callback stopped the parser
        self._cut = False  # the body went over max_body
        self._extra = False  # bytes came after the answer
        self._keep_alive = True
        self.closed = False
        #: Whether any byte of an answer arrived (a connect that then hangs up sent nothing).
        self.answered = False

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport to write to (uvloop's transports do not derive from
        asyncio's classes, though they have their methods)."""
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        """Parse what arrived; complete the answer when it is whole."""
        if self._answer is None or self._answer.done():
            self.close()  # bytes nobody asked for: the connection cannot be trusted
            return
        self.answered = True
        if len(self._start) < 80:
            self._start += data[: 80 - len(self._start)]
        if self._loop is not None:
            self._quiet_until = self._loop.time() + self._read_timeout
        try:
            self._feed(memoryview(data))
        except ProtocolFailed as error:
            self._fail(error)
            return
        if self._cut:
            self._finish(complete=False)
        elif self._done:
            self._finish(complete=True)

    def eof_received(self) -> bool:
        """The server finished sending: a close-delimited body ends here."""
        if self._answer is not None and not self._answer.done():
            if self._head_done and self._until_close:
                self._keep_alive = False
                self._finish(complete=True)
            else:
                self._fail(ProtocolFailed("the server closed the connection mid-answer"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """The connection is gone: a pending answer fails."""
        self.closed = True
        self._cancel_timer()
        if self._answer is not None and not self._answer.done():
            reason = f": {exc}" if exc else ""
            self._answer.set_exception(ProtocolFailed(f"the connection was lost{reason}"))

    # -- requests --------------------------------------------------------------------

    async def exchange(self, request: bytes) -> Answer:
        """Send ``request`` (head and body, already encoded) and wait for the answer."""
        if self._transport is None or self.closed or self._transport.is_closing():
            raise ProtocolFailed("the connection is closed")
        loop = asyncio.get_running_loop()
        self._answer = loop.create_future()
        self._start, self._fed, self._chunks = b"", 0, 0
        self._body.clear()
        self._new_head()
        self._head_done = self._until_close = self._done = self._cut = self._extra = False
        self._stop, self._keep_alive = None, True
        self.answered = False
        self._transport.write(request)
        self._loop = loop
        self._quiet_until = loop.time() + self._read_timeout
        self._timer = loop.call_at(self._quiet_until, self._quiet_for_a_while)
        try:
            return await self._answer
        finally:
            self._cancel_timer()
            self._answer = None

    @property
    def reusable(self) -> bool:
        """Whether the last exchange left the connection fit for another request."""
        return (
            self._keep_alive
            and not self.closed
            and self._transport is not None
            and (not self._transport.is_closing())
        )

    def close(self) -> None:
        """Close the connection now (the socket is released at once)."""
        self._keep_alive = False
        if self._transport is not None and not self.closed:
            self._transport.abort()

    # -- parsing ---------------------------------------------------------------------

    def _feed(self, data: memoryview) -> None:
        """Hand ``data`` to the parser, the head in pieces that keep it within MAX_HEAD."""
        while data:
            piece = data if self._head_done else data[: MAX_HEAD - self._fed]
            if not piece:
                raise ProtocolFailed("the answer's headers are too long")
            data = data[len(piece) :]
            self._fed += len(piece)
            try:
                self._parser.feed_data(piece)
            except httptools.HttpParserUpgrade:
                raise ProtocolFailed("the server switched protocols, unasked") from None
            except httptools.HttpParserError as error:
                if self._stop is not None:
                    raise self._stop from None
                if self._cut or self._extra:
                    return
                raise self._malformed(error) from None
            if self._fed - len(self._body) > 2 * MAX_HEAD + self._chunks * MAX_CHUNK_FRAMING:
                raise ProtocolFailed("the answer's trailers or chunk framing are too long")
            if self._done:
                return

    def _malformed(self, error: httptools.HttpParserError) -> ProtocolFailed:
        if self._status or self._lines > 1:  # past the status line
            return ProtocolFailed(f"malformed answer: {error}")
        line = self._start.split(b"\r\n", 1)[0]
        return ProtocolFailed(f"not an HTTP/1.x status line: {line[:60]!r} ({error})")

    def _new_head(self) -> None:
        self._items = {}
        self._lines = 1
        self._status = 0

    def _refuse(self, reason: str) -> None:
        self._stop = ProtocolFailed(reason)
        raise _Stop

    # -- httptools callbacks ---------------------------------------------------------

    def on_message_begin(self) -> None:
        """A new answer starts: after the final one, bytes nobody asked for."""
        if self._done:
            self._extra = True
            raise _Stop
        self._new_head()

    def on_header(self, name: bytes, value: bytes) -> None:
        """Keep a header of the head (repeated ones joined); trailers are not kept."""
        if self._head_done:
            return
        self._lines += 1
        if self._lines > MAX_HEADER_LINES:
            self._refuse(f"too many headers: more than {MAX_HEADER_LINES - 1}")
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1").strip()
        self._items[key] = f"{self._items[key]}, {text}" if key in self._items else text

    def on_headers_complete(self) -> None:
        """A head is read: check its status line; the final one decides the framing."""
        status = self._status = self._parser.get_status_code()
        version = self._parser.get_http_version()
        if not version.startswith("1.") or not 100 <= status <= 999:
            line = self._start.split(b"\r\n", 1)[0]
            self._refuse(f"not an HTTP/1.x status line: {line[:60]!r}")
        if status < 200:
            return  # interim: the real answer follows
        self._head_done = True
        self._keep_alive = self._parser.should_keep_alive()
        framed = (
            "content-length" in self._items
            or "chunked" in self._items.get("transfer-encoding", "").lower()
        )
        self._until_close = status not in (204, 304) and not framed

    def on_body(self, body: bytes) -> None:
        """Keep ``body`` up to the cap; past it, stop: the answer ends cut."""
        room = self._max_body - len(self._body)
        if len(body) > room:
            self._body += body[:room]
            self._cut = True
            raise _Stop
        self._body += body

    def on_chunk_header(self) -> None:
        """A chunk starts: its framing is allowed for."""
        self._chunks += 1

    def on_message_complete(self) -> None:
        """An answer was read whole: an interim one is forgotten, the final one kept."""
        if self._head_done:
            self._done = True

    # -- the outcome -----------------------------------------------------------------

    def _finish(self, *, complete: bool) -> None:
        if self._answer is None or self._answer.done():
            return
        answer = Answer(self._status, Headers(self._items), bytes(self._body), complete)
        self._answer.set_result(answer)
        if not complete or self._extra or not self._keep_alive:
            self.close()  # cut, unread bytes, or the server said so: not in a known state

    def _fail(self, error: Exception) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(error)
        self.close()

    # -- read timeout ----------------------------------------------------------------

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _quiet_for_a_while(self) -> None:
        """The read timer fired: fail if nothing arrived since, else wait on from the last byte.

        One timer per exchange, moved only when it fires, rather than one per arrival.
        """
        assert self._loop is not None
        if self._loop.time() < self._quiet_until:
            self._timer = self._loop.call_at(self._quiet_until, self._quiet_for_a_while)
            return
        self._timer = None
        waited = f"{self._read_timeout:g} s without a byte"
        self._fail(TimedOut(f"timed out waiting for the answer: {waited}"))
