"""``send()``, signing and the transport read an inbox URL the same way.

``http://h\\.example/inbox`` used to be stored with host ``h\\.example`` and requested
from ``h``: per-host caps, breakers and unavailable-host marks counted a host that was
not the one contacted.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from django_outbox import outbox
from django_outbox.exceptions import InvalidInbox, InvalidSend
from django_outbox.models import Delivery
from django_outbox.worker.engine import Engine
from testproject.demo.keys import ACTOR
from tests.support.sends import ACTIVITY, contacted_host, rows_written, signed_host_header

pytestmark = pytest.mark.django_db

# Eight spellings aimed at h.example: the first four were stored with another host.
SPELLINGS = [
    "http://h.example\\.a/inbox",
    "http://h.example\\.b/inbox",
    "http://h.example\\@c.example/inbox",
    "http://h.example\\d/inbox",
    "http://h.example/e",
    "HTTP://H.Example/f",
    "http://h.example:80/g",
    "http://h.EXAMPLE/./h",
]


@pytest.mark.parametrize("url", SPELLINGS)
def test_the_stored_host_is_the_host_contacted_and_signed(url: str) -> None:
    try:
        outbox.send(ACTOR, ACTIVITY, [url])
    except InvalidSend:
        assert rows_written() == 0
        return
    row = Delivery.objects.get()
    assert row.host == contacted_host(row.inbox) == "h.example"
    assert signed_host_header(row.inbox) == "h.example"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://h\\.example/inbox", "backslash"),
        ("https://.bad.example/inbox", "empty label"),
        ("https://a..example/inbox", "empty label"),
        ("https://xn--abc.example/inbox", "invalid IDNA"),
        ("https://a\u200db.example/inbox", "not valid IDNA"),
        ("https://example.com/a b", "space"),
        ("https://example.com/\r\nX: y", "control character"),
        ("http://127.1/inbox", "dotted-quad"),
        ("https://example.com./inbox", "ending in a dot"),
    ],
)
def test_urls_the_transport_would_read_otherwise_are_refused(url: str, why: str) -> None:
    with pytest.raises(InvalidInbox, match=why):
        outbox.send(ACTOR, ACTIVITY, ["https://ok.example/inbox", url])
    assert rows_written() == 0


def test_the_per_host_cap_holds_for_the_host_contacted() -> None:
    """Rows of every spelling accepted run through an engine capped at one per host."""
    for url in SPELLINGS:
        with contextlib.suppress(InvalidSend):
            outbox.send(ACTOR, ACTIVITY, [url])
    rows = list(Delivery.objects.all())
    assert len(rows) >= 4
    contacted = {row.pk: contacted_host(row.inbox) for row in rows}
    in_flight: dict[str, int] = {}
    most: dict[str, int] = {}

    async def send(row: Delivery) -> None:
        host = contacted[row.pk]
        in_flight[host] = in_flight.get(host, 0) + 1
        most[host] = max(most.get(host, 0), in_flight[host])
        await asyncio.sleep(0.05)
        in_flight[host] -= 1

    engine: Engine[Delivery] = Engine(
        send, host_of=lambda row: row.host, urgent=lambda row: False, concurrency=8, per_host=1
    )
    try:
        assert engine.submit(rows) == []
        assert engine.wait_idle(10)
    finally:
        engine.stop()
    assert most == {"h.example": 1}


class Sneaky(str):
    """A string that claims to equal every other one."""

    def __hash__(self) -> int:
        return 1

    def __eq__(self, other: object) -> bool:
        return True


def test_string_subclasses_are_read_as_the_text_they_hold() -> None:
    urls = ["https://a.example/inbox", "https://b.example/inbox"]
    outbox.send(ACTOR, ACTIVITY, [Sneaky(url) for url in urls])
    stored = list(Delivery.objects.order_by("inbox").values_list("inbox", flat=True))
    assert stored == urls
    assert {type(url) for url in stored} == {str}
