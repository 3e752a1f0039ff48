"""FEP-ef61: a portable inbox is delivered through the first gateway that accepts."""

from __future__ import annotations

import pytest

from django_outbox import PortableInbox, outbox
from django_outbox.models import Delivery
from testproject.demo.keys import ACTOR
from testproject.inbox_servers import Behaviour, InboxServer
from tests.support.waiting import wait_for
from tests.support.workers import Worker

DID = "did:key:z6MkrJVnaZkeFzdQyMZu1cgjg7k1pZZ6pvBQ7XJPt4swbTQ2"
INBOX = f"ap://{DID}/actor/inbox"


@pytest.mark.django_db(transaction=True)
def test_the_first_gateway_that_accepts_completes_the_delivery(worker: Worker) -> None:
    with InboxServer("127.0.0.4") as down, InboxServer("127.0.0.5") as up:
        down.default = Behaviour(statuses=(503,))
        portable = PortableInbox(INBOX, [down.url("/"), up.url("/")])
        outbox.send_portable(ACTOR, {"type": "Create"}, [portable])
        row = wait_for(lambda: Delivery.objects.filter(state="delivered").first())
        assert (row.inbox, row.host, row.attempts) == (INBOX, "127.0.0.4", 1)
        path = f"/.well-known/apgateway/{DID}/actor/inbox"
        assert [r.path for r in down.requests()] == [path]
        assert [r.path for r in up.requests()] == [path]
