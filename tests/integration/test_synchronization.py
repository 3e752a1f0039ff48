"""FEP-8fcf: the header on a real delivery, covered by the signature."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from django_outbox import Batch, outbox
from django_outbox.models import Delivery
from django_outbox.sending.synchronization import followers_digest
from testproject.demo.keys import ACTOR
from testproject.demo.synchronization import followers_on
from testproject.inbox_servers import InboxServer
from tests.support.verifiers import verify_cavage
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
    assert verify_cavage(synced, pem, covered=["collection-synchronization"])
    forged = type(synced)(**{**synced.__dict__, "headers": _replaced(synced, header, digest)})
    assert not verify_cavage(forged, pem, covered=["collection-synchronization"])


def _replaced(request: Any, header: str, digest: str) -> dict[str, str]:
    """The request's headers with another digest in Collection-Synchronization."""
    return {
        name: header.replace(digest, "0" * 64)
        if name.lower() == "collection-synchronization"
        else value
        for name, value in request.headers.items()
    }
