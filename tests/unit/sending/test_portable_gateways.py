"""A portable inbox's gateway list costs linear time, cut before it is read.

The list comes from a stranger's actor document: 32,000 gateways (645 KiB) cost 26 s
inside ``send()`` when the whole list was de-duplicated before it was cut to five.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from django_outbox import PortableInbox, outbox
from django_outbox.exceptions import InvalidInbox
from django_outbox.models import Delivery
from django_outbox.sending.portable import MAX_GATEWAYS
from testproject.demo.keys import ACTOR
from tests.support.sends import ACTIVITY, contacted_host, rows_written

DID = "did:key:z6MkrJVnaZkeFzdQyMZu1cgjg7k1pZZ6pvBQ7XJPt4swbTQ2"
INBOX = f"ap://{DID}/actor/inbox"


class CountingList(list[str]):
    """A gateway list that counts how many of its items were read."""

    read = 0

    def __iter__(self) -> Iterator[str]:
        for item in super().__iter__():
            self.read += 1
            yield item


def test_only_the_head_of_a_long_gateway_list_is_read() -> None:
    gateways = CountingList(f"https://g{i}.example" for i in range(32_000))
    targets = PortableInbox(INBOX, gateways).targets()
    assert targets == [
        f"https://g{i}.example/.well-known/apgateway/{DID}/actor/inbox" for i in range(5)
    ]
    assert gateways.read == MAX_GATEWAYS


def test_a_long_list_of_repeats_is_read_a_bounded_way() -> None:
    gateways = CountingList(["https://g.example"] * 32_000 + ["https://h.example"])
    assert len(PortableInbox(INBOX, gateways).targets()) == 1
    assert gateways.read <= 100


@pytest.mark.django_db
def test_send_portable_with_32000_gateways_is_quick() -> None:
    gateways = [f"https://g{i}.example/" for i in range(32_000)]
    started = time.perf_counter()
    outbox.send_portable(ACTOR, ACTIVITY, [PortableInbox(INBOX, gateways)])
    assert time.perf_counter() - started < 2.0
    row = Delivery.objects.get()
    assert len(row.via) == MAX_GATEWAYS
    assert row.host == contacted_host(row.via[0]) == "g0.example"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("inbox", "gateways"),
    [
        (INBOX, ["https://g\\.example"]),
        (INBOX, ["https://.g.example"]),
        (INBOX, ["https://g.example/?"]),
        (INBOX, "https://g.example"),
        (INBOX, None),
        (INBOX, [None]),
        (INBOX + "\\x", ["https://g.example"]),
        (INBOX + "/" + "x" * 2048, ["https://g.example"]),
        (INBOX + "/%zz", ["https://g.example"]),
    ],
)
def test_bad_portable_inboxes_raise_invalid_inbox(inbox: str, gateways: object) -> None:
    with pytest.raises(InvalidInbox):
        outbox.send_portable(ACTOR, ACTIVITY, [PortableInbox(inbox, gateways)])  # type: ignore[arg-type]
    assert rows_written() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("inboxes", [None, 42, [INBOX], [None]])
def test_send_portable_refuses_what_is_no_list_of_portable_inboxes(inboxes: object) -> None:
    with pytest.raises(InvalidInbox):
        outbox.send_portable(ACTOR, ACTIVITY, inboxes)  # type: ignore[arg-type]
    assert rows_written() == 0
