"""Chaos: faults during a 2,000-inbox fan-out, with real workers, Redis and the database.

Each test runs its own ``celery worker`` processes (tests/chaos.py) on a
private ``redis-server``, delivers to 20 loopback hosts that record every
request, injects one kind of fault mid-run, then runs the sweeper until
nothing is live.  It asserts that every delivery settled and every inbox was
reached, and that the duplicate requests (an inbox receiving the activity
more than once) are no more than the deliveries in flight at the fault,
which is all that at-least-once may send twice.  The counts are printed.
"""

from __future__ import annotations

import signal
import time

import pytest
from django.db import transaction
from django.test import override_settings

from django_outbox import Batch, outbox
from django_outbox.models import Delivery, DeliveryState, Message
from testproject.demo.keys import ACTOR
from testproject.inbox_servers import Behaviour, InboxServer
from tests.chaos import (
    NOTE,
    Farm,
    Workers,
    busiest,
    children,
    delivered,
    drive,
    group,
    in_flight,
    kill,
    pool_pids,
    report,
    restart_postgres,
    states,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

FAN_OUT = 2000


def test_five_sigkills_mid_send_lose_nothing(chaos_workers: Workers) -> None:
    """Four pool processes and one whole worker are SIGKILLed during the run."""
    live = chaos_workers.start(2)
    started = time.monotonic()
    with Farm() as farm:
        inboxes = farm.inboxes(FAN_OUT)
        outbox.send(ACTOR, NOTE, inboxes, batch=Batch(tag="sigkill"))
        stranded: list[int] = []
        for n in range(5):
            wait_until(lambda n=n: delivered() >= (n + 1) * FAN_OUT // 7, 60, every=0.02)
            if n == 2:  # the whole worker: its main process and its pool at once
                victim = live.pop(0)
                pids = [victim.process.pid, *children(victim.process.pid)]
                kill(group(victim.process.pid))
                victim.process.wait()
                stranded.append(in_flight(pids))
                live += chaos_workers.start(1)
            else:
                pid = busiest(pool_pids(live))
                kill([pid])
                stranded.append(in_flight([pid]))
        sweeps = drive(FAN_OUT, 120)
        tally = farm.tally(inboxes)
    report(
        "5 x SIGKILL",
        stranded_per_kill=stranded,
        duplicates=tally.duplicates,
        requests=tally.requests,
        sweeps=sweeps,
        seconds=round(time.monotonic() - started, 1),
    )
    assert states() == {DeliveryState.DELIVERED: FAN_OUT}
    assert tally.missing == 0
    assert sum(stranded) > 0, "no kill hit a delivery in flight"
    assert tally.duplicates <= sum(stranded)
