"""A real worker whose engine runs on uvloop (OUTBOX_EVENT_LOOP = "uvloop") delivers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from django.conf import settings

from django_outbox import outbox
from django_outbox.models import Delivery
from testproject.demo.keys import ACTOR
from testproject.inbox_servers import InboxServer
from tests.support.verifiers import verify_cavage
from tests.support.waiting import wait_for
from tests.support.workers import Worker

pytestmark = [pytest.mark.django_db(transaction=True)]

NOTE = {"@context": "https://www.w3.org/ns/activitystreams", "type": "Create", "id": "uv"}


def test_a_worker_on_uvloop_delivers_signed_activities(
    make_worker: Callable[..., Worker],
) -> None:
    worker = make_worker(OUTBOX_EVENT_LOOP="uvloop")
    with InboxServer() as server:
        inboxes = [server.url(f"/users/{n}/inbox") for n in range(40)]
        outbox.send(ACTOR, NOTE, inboxes)
        wait_for(lambda: Delivery.objects.filter(state="delivered").count() == 40, 60)
        received = server.requests()
    assert Counter(Delivery.objects.values_list("state", flat=True)) == {"delivered": 40}
    assert len({r.path for r in received}) == 40
    pem = (Path(settings.RUN_DIR) / "rsa.pem").read_text()
    assert all(verify_cavage(r, pem) for r in received)
    assert any("uvloop" in maps for maps in pool_memory_maps(worker.pid))


def pool_memory_maps(parent: int) -> list[str]:
    """The memory maps of ``parent``'s child processes (Linux /proc): which libraries
    each pool process loaded."""
    maps = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                maps.append((entry / "maps").read_text())
        except (OSError, ValueError, IndexError):
            continue
    return maps
