"""FEP-ef61 portable inboxes: the gateways' targets, and what is refused."""

from __future__ import annotations

import pytest

from django_outbox import PortableInbox, outbox
from django_outbox.exceptions import InvalidInbox
from django_outbox.models import Message
from testproject.demo.keys import ACTOR

DID = "did:key:z6MkrJVnaZkeFzdQyMZu1cgjg7k1pZZ6pvBQ7XJPt4swbTQ2"
INBOX = f"ap://{DID}/actor/inbox"


def test_targets_follow_the_gateways_in_order() -> None:
    portable = PortableInbox(
        INBOX, ["https://b.example/", "https://a.example", "https://b.example"]
    )
    assert portable.targets() == [
        f"https://b.example/.well-known/apgateway/{DID}/actor/inbox",
        f"https://a.example/.well-known/apgateway/{DID}/actor/inbox",
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("inbox", "gateways"),
    [
        ("https://a.example/inbox", ["https://g.example"]),
        ("ap://did:web:a.example/inbox", ["https://g.example"]),
        (INBOX + "?q=1", ["https://g.example"]),
        (INBOX, []),
        (INBOX, ["https://g.example/path"]),
        (INBOX, ["ftp://g.example"]),
        (INBOX, ["https://user@g.example"]),
    ],
)
def test_bad_portable_inboxes_are_refused_writing_nothing(inbox: str, gateways: list[str]) -> None:
    with pytest.raises(InvalidInbox):
        outbox.send_portable(ACTOR, {"type": "Create"}, [PortableInbox(inbox, gateways)])
    assert not Message.objects.exists()
