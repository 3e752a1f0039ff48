"""Text a server chose reaches ``last_error``, the attempt history and signal
receivers on one printable line, cut to length.

A status line such as ``HTTP/1.1 <script>...\\r\\n`` used to be stored as it came and
handed to receivers, CR and LF included.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from django_outbox import outbox
from django_outbox.models import Attempt, Delivery
from django_outbox.signals import delivery_attempted, delivery_failed
from django_outbox.store.claim_rows import load_messages, new_token
from django_outbox.store.transitions import claim
from django_outbox.transport import ProtocolFailed, Transport
from django_outbox.values.outcomes import AttemptResult, Outcome
from django_outbox.values.safe_text import ERROR_LIMIT, one_line
from django_outbox.worker.recorder import apply_outcomes
from testproject.demo.keys import ACTOR
from tests.support.sends import ACTIVITY

HOSTILE = "HTTP/1.1 <script>alert(1)</script>\rSet-Cookie: x=1\x0b\u202egnp.exe\x00"


@pytest.fixture
def hostile_server() -> Iterator[int]:
    """A loopback server answering every request with a malformed status line."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(5)

    def serve() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            conn.sendall(HOSTILE.encode("utf-8") + b"\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    listener.close()
    thread.join(5)


def assert_one_safe_line(text: str, limit: int) -> None:
    assert text.isprintable(), text
    assert len(text) <= limit


def test_a_malformed_status_line_is_escaped_in_the_transport_error(hostile_server: int) -> None:
    transport = Transport(user_agent="test", allowed_networks=["127.0.0.0/8"])
    with pytest.raises(ProtocolFailed) as raised:
        asyncio.run(transport.post(f"http://127.0.0.1:{hostile_server}/inbox", {}, b"{}"))
    message = str(raised.value)
    assert "<script>" in message  # kept, escaped: the admin escapes HTML itself
    assert "\\r" in message and "\r" not in message and "\n" not in message
    assert_one_safe_line(message, 200)


@pytest.mark.django_db
@pytest.mark.parametrize("result", [AttemptResult.RETRY, AttemptResult.REFUSED])
def test_stored_errors_and_signal_arguments_are_one_line(result: AttemptResult) -> None:
    outbox.send(ACTOR, ACTIVITY, ["https://remote.example/inbox"])
    (row,) = claim(list(Delivery.objects.values_list("id", flat=True)), new_token())
    message = load_messages([row.message_id])[row.message_id]
    received: list[dict[str, Any]] = []

    def receiver(sender: object, **kwargs: Any) -> None:
        received.append(kwargs)

    delivery_attempted.connect(receiver, weak=False)
    delivery_failed.connect(receiver, weak=False)
    try:
        error = HOSTILE + "x" * 5000
        apply_outcomes([Outcome(row, message, result, status=500, error=error)])
    finally:
        delivery_attempted.disconnect(receiver)
        delivery_failed.disconnect(receiver)
    stored = Delivery.objects.get().last_error
    assert_one_safe_line(stored, ERROR_LIMIT)
    assert stored.startswith("HTTP/1.1 <script>alert(1)</script>\\rSet-Cookie")
    history = list(Attempt.objects.values_list("error", flat=True))
    assert history
    for text in history:
        assert_one_safe_line(text, 500)
    assert len(received) == (2 if result is AttemptResult.REFUSED else 1)
    for kwargs in received:
        assert_one_safe_line(kwargs["error"], ERROR_LIMIT)


def test_one_line_escapes_what_is_not_printable_and_cuts() -> None:
    assert one_line("a\r\nb\tc\u2028d\u202e\x00") == "a\\r\\nb\\tc\\u2028d\\u202e\\x00"
    assert one_line("plain text, ünïcödé") == "plain text, ünïcödé"
    assert one_line("x" * 50, 10) == "xxxxxxx..."
    cut = one_line("\n" * 50, 10)
    assert cut.startswith("\\n\\n\\n") and cut.endswith("...") and len(cut) == 10
