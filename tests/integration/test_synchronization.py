"""FEP-8fcf: the header on a real delivery, covered by the signature."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from httpsig.verify import HeaderVerifier

from django_outbox import Batch, outbox
from django_outbox.keys import public_pem
from django_outbox.models import Delivery
from django_outbox.synchronization import followers_digest
from testproject.demo.keys import ACTOR
from testproject.demo.synchronization import followers_on
from testproject.inbox_servers import InboxServer
from tests.support.waiting import wait_for
from tests.support.workers import Worker


@pytest.mark.django_db(transaction=True)
def test_the_header_is_sent_and_covered_by_the_signature(
    worker: Worker, inbox_server: InboxServer
) -> None:
    outbox.send(ACTOR, {"type": "Create"}, [inbox_server.url("/a")])
    outbox.send(
        ACTOR,
        {"type": "Create"},
        [inbox_server.url("/b")],
        batch=Batch(synchronize_collection=True),
    )
    wait_for(lambda: Delivery.objects.filter(state="delivered").count() == 2)
    (plain,) = inbox_server.requests("/a")
    (synced,) = inbox_server.requests("/b")
    assert plain.headers["Collection-Synchronization"] is None
    header = synced.headers["Collection-Synchronization"]
    digest = followers_digest(followers_on(inbox_server.url("/b")))
    assert header == (
        f'collectionId="{ACTOR}/followers", url="{ACTOR}/followers_synchronization", '
        f'digest="{digest}"'
    )
    assert "collection-synchronization" in synced.headers["Signature"]
    pem = (Path(settings.RUN_DIR) / "rsa.pem").read_text()
    checker = HeaderVerifier(
        dict(synced.headers.items()),
        public_pem(pem),
        ["collection-synchronization"],
        "POST",
        "/b",
        sign_header="signature",
    )
    assert checker.verify() is not False
