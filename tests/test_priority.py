"""The priority lane overtakes a busy worker: a task blocked on a full engine takes it."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from django_outbox import outbox
from django_outbox.models import Delivery, Lane
from testproject.demo.keys import ACTOR
from testproject.inbox_servers import Behaviour, InboxServer
from tests.conftest import Worker, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SLOW = 0.5
FAN_OUT = 60


@pytest.fixture
def one_process_worker(worker: Worker) -> Iterator[Worker]:
    """The session worker stopped, and one with a single Celery process and 2 threads.

    Its engine holds 2 running and 8 waiting deliveries, so a 50-delivery task for
    slow inboxes keeps its only Celery process waiting for room for seconds.
    """
    worker.stop()
    single = Worker({"OUTBOX_CONCURRENCY": 2, "OUTBOX_PER_HOST": 2}, concurrency=1)
    yield single
    single.stop()
    worker.__init__()  # type: ignore[misc]  # the session worker again, for later tests


def test_a_priority_send_overtakes_a_worker_waiting_for_room(
    one_process_worker: Worker, inbox_server: InboxServer
) -> None:
    inbox_server.behave("/slow", Behaviour(delay=SLOW))
    slow = [inbox_server.url(f"/slow?n={n}") for n in range(FAN_OUT)]
    outbox.send(ACTOR, {"type": "Create", "id": "https://demo.example/fan-out"}, slow)
    wait_for(lambda: len(inbox_server.requests("/slow")) >= 2, 30)

    # Another host name for the same server, so that the slow host's cap does not apply.
    urgent = inbox_server.url("/urgent", host="localhost")
    outbox.send(ACTOR, {"type": "Create", "id": "https://demo.example/dm"}, [urgent])
    assert Delivery.objects.get(inbox=urgent).lane == Lane.PRIORITY
    wait_for(lambda: inbox_server.requests("/urgent"), 30)

    # The fan-out's Celery task still waits for room for most of its 50 deliveries
    # (it takes about FAN_OUT / 2 * SLOW seconds): the priority lane's own Celery
    # message could not have run yet; the waiting task took the delivery itself.
    assert len(inbox_server.requests("/slow")) < FAN_OUT // 3
    wait_for(lambda: Delivery.objects.filter(state="delivered").count() == FAN_OUT + 1, 60)


def test_a_database_error_while_looking_for_priority_work_does_not_stop_the_hand_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django.db import OperationalError

    from django_outbox.worker import process as worker

    class FullOnce:
        """An engine with no room at first, then room for everything."""

        def __init__(self) -> None:
            self.asked = 0
            self.submitted: list[object] = []

        def wait_for_room(self, timeout: float) -> bool:
            self.asked += 1
            return self.asked > 1

        def room(self) -> int:
            return 100

        def submit(self, jobs: list[object]) -> list[object]:
            self.submitted += jobs
            return []

    def unreachable(*args: object, **kwargs: object) -> None:
        raise OperationalError("the database went away")

    monkeypatch.setattr(Delivery.objects, "filter", unreachable)
    engine = FullOnce()
    jobs = [SimpleNamespace(row=SimpleNamespace(lane=Lane.DEFAULT)) for _ in range(3)]
    worker._hand_over(SimpleNamespace(engine=engine), jobs, wait=True)  # type: ignore[arg-type]
    assert engine.asked == 2, "it looked for priority work once, and it failed"
    assert engine.submitted == jobs


def test_a_task_waits_for_room_only_so_long(monkeypatch: pytest.MonkeyPatch) -> None:
    from django_outbox.worker import process as worker

    class NeverRoom:
        """An engine that has stopped making progress."""

        def __init__(self) -> None:
            self.submitted: list[object] = []

        def wait_for_room(self, timeout: float) -> bool:
            return False

        def room(self) -> int:
            return 0

        def submit(self, jobs: list[object]) -> list[object]:
            self.submitted += jobs
            return []

    monkeypatch.setattr(worker, "_ROOM_WAIT_LIMIT", 0.2)
    monkeypatch.setattr(worker, "_urgent_jobs", lambda process: [])
    engine = NeverRoom()
    jobs = [SimpleNamespace(row=SimpleNamespace(lane=Lane.DEFAULT)) for _ in range(3)]
    worker._hand_over(SimpleNamespace(engine=engine), jobs, wait=True)  # type: ignore[arg-type]
    assert engine.submitted == jobs, "handed over after the limit, not held for ever"
