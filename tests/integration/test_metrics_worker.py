"""Metrics after real deliveries through a real prefork worker (two processes).

The counters a scrape shows must equal what the database and the inbox
servers saw: the two worker processes write their sums to Redis, and the
scrape, in this process, reads them.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client, RequestFactory, override_settings

from django_outbox import Batch, outbox
from django_outbox.counters.recording import FLUSH_EVERY
from django_outbox.counters.shared import configured_metrics_store
from django_outbox.models import LIVE_STATES, Attempt, Delivery
from testproject.demo.keys import ACTOR
from testproject.inbox_servers import Behaviour, InboxServer
from tests.support.waiting import wait_for
from tests.support.workers import Worker

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

NOTE = {"@context": "https://www.w3.org/ns/activitystreams", "type": "Create", "id": "n2"}
_SAMPLE = re.compile(r"^([a-z_]+)(?:\{(.*)\})? (\S+)$")


def parse(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Prometheus text format as ``{(name, labels): value}``."""
    samples = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', match[2] or ""))
            samples[(match[1], labels)] = float(match[3])
    return samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def scrape() -> dict[Any, float]:
    response = Client().get("/outbox/metrics")
    assert response.status_code == 200
    return parse(response.content.decode())


@override_settings(OUTBOX_METRICS_TTL=0, OUTBOX_CHUNK_SIZE=2)
def test_scraped_counts_equal_the_database_after_a_prefork_worker(
    make_worker: Callable[..., Worker],
) -> None:
    # Sums of earlier tests' workers are written within FLUSH_EVERY: count from here.
    time.sleep(FLUSH_EVERY + 0.5)
    configured_metrics_store().clear()
    server, strict = InboxServer().start(), InboxServer().start()
    # Every inbox is on 127.0.0.1: no breaker, so that no delivery is held (held ones
    # would add history rows and attempts, and how many depends on timing).
    worker = make_worker(2, OUTBOX_BREAKER_THRESHOLD=0)
    try:
        for n in range(6):
            server.behave(f"/flaky/{n}", Behaviour(statuses=(500, 202)))
        for n in range(4):
            server.behave(f"/gone/{n}", Behaviour(statuses=(410,)))
            strict.behave(f"/rfc/{n}", Behaviour.accept_only("rfc9421"))
        outbox.send(ACTOR, NOTE, [server.url(f"/ok/{n}") for n in range(20)])
        outbox.send(ACTOR, NOTE, [server.url(f"/flaky/{n}") for n in range(6)])
        outbox.send(ACTOR, NOTE, [server.url(f"/gone/{n}") for n in range(4)])
        outbox.send(ACTOR, NOTE, [strict.url(f"/rfc/{n}") for n in range(4)])
        dead = "http://127.0.0.1:1/inbox"
        outbox.send(ACTOR, NOTE, [dead], batch=Batch(max_attempts=2))
        wait_for(lambda: not Delivery.objects.filter(state__in=LIVE_STATES).exists(), 90)
        by_state_lane = Counter(Delivery.objects.values_list("state", "lane"))
        finished = sum(by_state_lane.values())
        assert finished == 35
        wait_for(
            lambda: (
                sum(
                    value(samples, "outbox_deliveries_finished_total", state=s, lane=lane)
                    for (s, lane) in by_state_lane
                )
                == finished
                if (samples := scrape())
                else False
            ),
            30,
        )
        samples = scrape()
        for (state, lane), count in by_state_lane.items():
            assert value(samples, "outbox_deliveries_finished_total", state=state, lane=lane) == (
                count
            ), (state, lane)
            assert value(samples, "outbox_deliveries", state=state, lane=lane) == count
        states = Counter(Delivery.objects.values_list("state", flat=True))
        assert states == {"delivered": 30, "refused": 4, "failed": 1}
        assert value(samples, "outbox_attempts_total", result="2xx") == 30
        assert value(samples, "outbox_attempts_total", result="4xx") == 4
        assert value(samples, "outbox_attempts_total", result="5xx") == 6
        assert value(samples, "outbox_attempts_total", result="connect") == 2
        received = [*server.requests(), *strict.requests()]
        rfc = sum(1 for r in received if "Signature-Input" in r.headers)
        assert value(samples, "outbox_requests_total", scheme="rfc9421") == rfc
        # The dead inbox's two requests were signed (draft-cavage) but never arrived.
        cavage = len(received) - rfc + 2
        assert value(samples, "outbox_requests_total", scheme="draft-cavage") == cavage
        assert value(samples, "outbox_attempt_duration_seconds_count") == 42
        for lane in {lane for _, lane in by_state_lane}:
            in_lane = sum(n for (_, each), n in by_state_lane.items() if each == lane)
            assert value(samples, "outbox_send_to_settle_seconds_count", lane=lane) == in_lane
        # Each attempt the scrape counts was spent by a delivery: 42 when no step of the
        # worker failed, one more for each internal error (a locked SQLite, say), which
        # is an attempt too and comes back as one.
        spent = dict(Delivery.objects.values_list("id", "attempts"))
        made = sum(
            count
            for (name, labels), count in samples.items()
            if name == "outbox_attempts_total" and ("result", "held") not in labels
        )
        assert made == sum(spent.values()) >= 42
        # History: a row per attempt of each delivery that took more than one or did not
        # arrive (the flaky ones' failure and late success, the refusals, the dead
        # attempts: 18 rows); held rows count the holds.  Only this test's deliveries:
        # the history has no foreign key, and a row an earlier test's worker wrote after
        # that test's tables were emptied would stay (CI once saw one).
        ours = Attempt.objects.filter(delivery_id__in=spent)
        history = list(ours.values_list("delivery_id", "number", "held", "result"))
        delivered = set(Delivery.objects.filter(state="delivered").values_list("id", flat=True))
        expected = {
            (pk, number)
            for pk, attempts in spent.items()
            if attempts > 1 or pk not in delivered
            for number in range(1, attempts + 1)
        }
        assert {(pk, number) for pk, number, held, _ in history if not held} == expected, history
        assert len(expected) >= 6 * 2 + 4 + 2
        holds = ours.filter(held=True).values_list("times", flat=True)
        assert sum(holds) == value(samples, "outbox_attempts_total", result="held")
        reports = configured_metrics_store().processes()
        assert 1 <= len(reports) <= 2, reports
        assert value(samples, "outbox_worker_processes") == len(reports)
    finally:
        worker.stop()
        server.stop()
        strict.stop()
    assert configured_metrics_store().processes() == {}, "stopped processes withdraw"


def test_django_prometheus_serves_the_outbox_metrics() -> None:
    from django_prometheus.exports import ExportToDjangoView

    response = ExportToDjangoView(RequestFactory().get("/metrics"))
    text = response.content.decode()
    assert "outbox_deliveries_finished_total" in text
    assert "outbox_oldest_due_age_seconds" in text
