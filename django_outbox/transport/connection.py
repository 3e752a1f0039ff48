"""One HTTP/1.1 client connection on an asyncio event loop.

:class:`HTTPConnection` is an :class:`asyncio.Protocol`: the loop hands it bytes
as they arrive and it parses the answer in place, with no thread, no file object
and no per-request parser objects.  It reads what a delivery needs and no more:
the status, the headers and at most ``max_body`` bytes of the body; a longer
body ends the connection instead of being drained.  A read timeout is a timer
restarted on every chunk that arrives, so a server that goes quiet for
``read_timeout`` seconds is cut off however long its answer had been flowing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import NamedTuple

from django_outbox.transport.errors import ProtocolFailed, TimedOut

#: The longest status line plus headers accepted, as http.client's line limits allow.
MAX_HEAD = 64 * 1024
_MAX_HEADERS = 200
# States of a chunked body besides "bytes left of the current chunk".
_SIZE_LINE = -1  # a chunk size line comes next
_TRAILERS = -2  # the last chunk was read; trailers up to a blank line come next
_CHUNK_END = -3  # a chunk's bytes were all read; its closing CRLF comes next


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


class HTTPConnection(asyncio.Protocol):
    """A keep-alive HTTP/1.1 connection that sends one request at a time."""

    def __init__(self, max_body: int, read_timeout: float) -> None:
        self._max_body = max_body
        self._read_timeout = read_timeout
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._answer: asyncio.Future[Answer] | None = None
        self._timer: asyncio.TimerHandle | None = None
        # Loop time until which the server may stay quiet, pushed on by each arrival
        # without touching the timer, which looks at it when it fires.
        self._quiet_until = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._head: tuple[int, Headers] | None = None
        self._body = bytearray()
        # How the body ends: "length" (bytes left), "chunked", "close", or "" (no body).
        self._framing = ""
        self._left = 0
        self._chunk_left = _SIZE_LINE  # bytes left of the current chunk, or a state
        self._keep_alive = True
        self.closed = False
        #: Whether any byte of an answer arrived (a connect that then hangs up sent nothing).
        self.answered = False

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport to write to."""
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        """Parse what arrived; complete the answer when it is whole."""
        if self._answer is None or self._answer.done():
            self.close()  # bytes nobody asked for: the connection cannot be trusted
            return
        self.answered = True
        self._buffer += data
        if self._loop is not None:
            self._quiet_until = self._loop.time() + self._read_timeout
        try:
            self._parse()
        except ProtocolFailed as error:
            self._fail(error)

    def eof_received(self) -> bool:
        """The server finished sending: a close-delimited body ends here."""
        if self._answer is not None and not self._answer.done():
            if self._head is not None and self._framing == "close":
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
        self._head, self._framing, self._keep_alive = None, "", True
        self._body.clear()
        self._buffer.clear()
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

    def _parse(self) -> None:
        buffer = self._buffer
        while self._head is None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0 or end > MAX_HEAD:
                if len(buffer) > MAX_HEAD:
                    raise ProtocolFailed("the answer's headers are too long")
                return
            status, headers = _parse_head(bytes(buffer[:end]))
            del buffer[: end + 4]
            if status >= 200:  # 1xx answers are interim: the real one follows
                self._head = (status, headers)
                self._choose_framing(status, headers)
        if self._framing == "length":
            count = min(self._left, len(buffer))
            if self._take(count):
                del buffer[:count]
                self._left -= count
                if self._left == 0:
                    self._finish(complete=True)
        elif self._framing == "chunked":
            self._parse_chunks()
        elif self._framing == "close":
            if self._take(len(buffer)):
                del buffer[:]
        else:
            self._finish(complete=True)

    def _choose_framing(self, status: int, headers: Headers) -> None:
        if "close" in (headers.get("connection") or "").lower():
            self._keep_alive = False
        if status in (204, 304):
            self._framing = ""
        elif "chunked" in (headers.get("transfer-encoding") or "").lower():
            self._framing, self._chunk_left = "chunked", _SIZE_LINE
        elif (length := headers.get("content-length")) is not None:
            if not length.strip().isdigit():
                raise ProtocolFailed(f"invalid Content-Length {length[:40]!r}")
            self._left = int(length)
            self._framing = "length" if self._left else ""
        else:
            self._framing, self._keep_alive = "close", False

    def _parse_chunks(self) -> None:
        buffer = self._buffer
        while True:
            if self._chunk_left == _SIZE_LINE:
                end = buffer.find(b"\r\n")
                if end < 0:
                    if len(buffer) > 1024:
                        raise ProtocolFailed("a chunk size line is too long")
                    return
                size = bytes(buffer[:end]).split(b";", 1)[0].strip()
                del buffer[: end + 2]
                if not size or len(size) > 16 or size.strip(b"0123456789abcdefABCDEF"):
                    raise ProtocolFailed(f"invalid chunk size {size[:20]!r}")
                self._chunk_left = int(size, 16) or _TRAILERS
            elif self._chunk_left == _TRAILERS:
                if buffer.startswith(b"\r\n"):
                    end = 2
                elif (end := buffer.find(b"\r\n\r\n")) >= 0:
                    end += 4
                else:
                    if len(buffer) > MAX_HEAD:
                        raise ProtocolFailed("the answer's trailers are too long")
                    return
                del buffer[:end]
                self._finish(complete=True)
                return
            elif self._chunk_left == _CHUNK_END:
                if len(buffer) < 2:
                    return
                if buffer[:2] != b"\r\n":
                    raise ProtocolFailed("a chunk does not end where its size says")
                del buffer[:2]
                self._chunk_left = _SIZE_LINE
            else:
                count = min(len(buffer), self._chunk_left)
                if count and not self._take(count):
                    return
                del buffer[:count]
                self._chunk_left -= count
                if self._chunk_left:
                    return
                self._chunk_left = _CHUNK_END

    def _take(self, count: int) -> bool:
        """Keep ``count`` more bytes of body; past the cap, end the answer cut (False)."""
        room = self._max_body - len(self._body)
        if count > room:
            self._body += self._buffer[:room]
            self._keep_alive = False
            self._finish(complete=False)
            return False
        self._body += self._buffer[:count]
        return True

    def _finish(self, *, complete: bool) -> None:
        if self._answer is None or self._answer.done() or self._head is None:
            return
        status, headers = self._head
        self._answer.set_result(Answer(status, headers, bytes(self._body), complete))
        if not complete or self._buffer:
            self.close()  # unread bytes: the connection is not in a known state

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


def _parse_head(head: bytes) -> tuple[int, Headers]:
    """The status and headers of a response head (without its closing blank line)."""
    lines = head.split(b"\r\n")
    status_line = lines[0]
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise ProtocolFailed(f"not an HTTP/1.x status line: {status_line[:60]!r}")
    status = int(parts[1])
    if not 100 <= status <= 999 or len(lines) > _MAX_HEADERS:
        raise ProtocolFailed(f"invalid status line or too many headers: {status_line[:60]!r}")
    items: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            raise ProtocolFailed(f"invalid header line {line[:60]!r}")
        key = name.decode("latin-1").lower()
        text = value.strip().decode("latin-1")
        items[key] = f"{items[key]}, {text}" if key in items else text
    return status, Headers(items)
