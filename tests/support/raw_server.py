"""A loopback server that answers each request with bytes a test wrote, as it wrote them.

The parser's tests need answers no real server library would send (a malformed status
line, a chunk that overruns its size, a head of 70 KiB), sent in pieces (one byte at a
time, with pauses), and to know whether the client kept the connection.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

#: One answer: the pieces to send in order, and the pause before each piece after the first.
Pieces = Sequence[bytes]


@dataclass
class RawServer:
    """Answers the n-th request (over all connections) with ``answers[n]``, then hangs
    up on any further one.  ``pause`` seconds pass between two pieces of an answer;
    ``close_after`` closes the connection after each answer."""

    answers: Sequence[Pieces]
    pause: float = 0.0
    close_after: bool = False
    connections: int = 0
    requests: int = 0
    _listener: socket.socket = field(init=False)
    _threads: list[threading.Thread] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    @property
    def url(self) -> str:
        """The inbox URL to POST to."""
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}/inbox"

    def close(self) -> None:
        """Stop accepting and wait for the connections' threads."""
        self._stopping.set()
        for thread in self._threads:
            thread.join(10)
        self._listener.close()

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                continue
            with self._lock:
                self.connections += 1
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        buffer = b""
        with conn:
            while not self._stopping.is_set():
                try:
                    while b"\r\n\r\n" not in buffer:
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        buffer += chunk
                    head, _, buffer = buffer.partition(b"\r\n\r\n")
                    found = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
                    length = int(found.group(1)) if found else 0
                    while len(buffer) < length:
                        buffer += conn.recv(65536)
                    buffer = buffer[length:]
                    with self._lock:
                        index, self.requests = self.requests, self.requests + 1
                    if index >= len(self.answers):
                        return
                    for number, piece in enumerate(self.answers[index]):
                        if number and self.pause:
                            time.sleep(self.pause)
                        conn.sendall(piece)
                except OSError:
                    return
                if self.close_after:
                    return
