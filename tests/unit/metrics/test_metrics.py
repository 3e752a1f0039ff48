"""Counting outcomes, the stores, the Prometheus exposition, and life without prometheus-client."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from django_outbox.counters import recording
from django_outbox.counters.recording import result_class, tally_batch
from django_outbox.counters.shared import (
    WINDOW,
    MemoryMetricsStore,
    configured_metrics_store,
)
from django_outbox.counters.tally import ATTEMPTS, Tally, decode, encode
from django_outbox.metrics import prometheus
from django_outbox.metrics.collectors import counter_families
from django_outbox.models import DeliveryState
from django_outbox.status.snapshot import engine_usage
from django_outbox.values.outcomes import AttemptResult
from django_outbox.worker.recorder import apply_outcomes
from tests.support.claims import claimed, outcome
from tests.support.observability import exposition

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_redis")]


@pytest.mark.parametrize(
    ("details", "expected"),
    [
        ({"result": AttemptResult.DELIVERED, "status": 202}, "2xx"),
        ({"result": AttemptResult.RETRY, "status": 503}, "5xx"),
        ({"result": AttemptResult.REFUSED, "status": 410}, "4xx"),
        ({"result": AttemptResult.RETRY, "failure": "timeout"}, "timeout"),
        ({"result": AttemptResult.RETRY, "failure": "connect"}, "connect"),
        ({"result": AttemptResult.REFUSED, "failure": "blocked"}, "blocked"),
        ({"result": AttemptResult.HELD}, "held"),
        ({"result": AttemptResult.RELEASED}, None),
        ({"result": AttemptResult.EXPIRED}, None),
        ({"result": AttemptResult.REFUSED, "error": "no key"}, None),
    ],
)
def test_result_classes(details: dict[str, object], expected: str | None) -> None:
    (row,) = claimed(1)
    result = details.pop("result")
    assert result_class(outcome(row, result, **details)) == expected  # type: ignore[arg-type]


def test_a_batch_is_tallied_without_inbox_urls() -> None:
    rows = claimed(3)
    sent = [
        outcome(rows[0], AttemptResult.DELIVERED, status=202, schemes=("draft-cavage",)),
        outcome(rows[1], AttemptResult.RETRY, status=401, schemes=("draft-cavage", "rfc9421")),
        outcome(rows[2], AttemptResult.HELD, held_for=3.0),
    ]
    finished = [(sent[0], {"state": DeliveryState.DELIVERED}), (sent[1], {"state": "queued"})]
    tally = tally_batch(sent, finished)
    fields = dict(tally.fields())
    assert fields["outbox_attempts_total|result=2xx"] == 1
    assert fields["outbox_attempts_total|result=4xx"] == 1
    assert fields["outbox_attempts_total|result=held"] == 1
    assert fields["outbox_requests_total|scheme=draft-cavage"] == 2
    assert fields["outbox_requests_total|scheme=rfc9421"] == 1
    assert fields["outbox_deliveries_finished_total|state=delivered|lane=outbox"] == 1
    assert sum(v for f, v in fields.items() if f.startswith("outbox_send_to_settle_seconds_b")) == 1
    assert not any("inbox" in field or "a.example" in field for field in fields)
    assert tally.timings == ["a.example 0.0000", "a.example 0.0000"]


def test_fields_round_trip_and_buckets_include_their_bound() -> None:
    assert decode(encode((ATTEMPTS, "result", "2xx"))) == (ATTEMPTS, {"result": "2xx"})
    tally = Tally()
    tally.observe("outbox_attempt_duration_seconds", 0.1)
    tally.observe("outbox_attempt_duration_seconds", 100.0)
    fields = dict(tally.fields())
    assert fields["outbox_attempt_duration_seconds_bucket|le=0.1"] == 1
    assert fields["outbox_attempt_duration_seconds_bucket|le=+Inf"] == 1
    assert fields["outbox_attempt_duration_seconds_sum"] == 100.1


def test_saved_batches_reach_the_store_and_the_exposition() -> None:
    rows = claimed(4, created_at=timezone.now() - timedelta(seconds=3))
    apply_outcomes(
        [
            outcome(r, AttemptResult.DELIVERED, status=202, duration=0.2, schemes=("rfc9421",))
            for r in rows
        ]
    )
    recording.flush()
    text = exposition()
    assert 'outbox_deliveries_finished_total{lane="outbox",state="delivered"} 4.0' in text
    assert 'outbox_attempts_total{result="2xx"} 4.0' in text
    assert 'outbox_requests_total{scheme="rfc9421"} 4.0' in text
    assert 'outbox_attempt_duration_seconds_bucket{le="0.25"} 4.0' in text
    assert "outbox_attempt_duration_seconds_count 4.0" in text
    assert 'outbox_send_to_settle_seconds_bucket{lane="outbox",le="2.5"} 0.0' in text
    assert 'outbox_send_to_settle_seconds_bucket{lane="outbox",le="5.0"} 4.0' in text
    assert 'outbox_deliveries{lane="outbox",state="delivered"} 4.0' in text
    assert 'outbox_attempts_total{result="timeout"} 0.0' in text  # present while zero
    assert "outbox_metrics_store_up 1.0" in text


def test_counts_that_could_not_be_written_are_written_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = MemoryMetricsStore()
    failing = MemoryMetricsStore()

    def broken(*args: object) -> None:
        raise ConnectionError("Redis is away")

    monkeypatch.setattr(failing, "add", broken)
    monkeypatch.setattr(recording, "configured_metrics_store", lambda: failing)
    tally = Tally()
    tally.count((ATTEMPTS, "result", "2xx"), 3)
    process = recording._this_process()
    process.add(tally)
    process.flush()
    monkeypatch.setattr(recording, "configured_metrics_store", lambda: store)
    process.flush()
    assert store.counters() == {"outbox_attempts_total|result=2xx": 3}


def test_the_recent_window_is_bounded_newest_first() -> None:
    store = MemoryMetricsStore()
    store.add({}, [f"h.example {n}" for n in range(WINDOW + 10)])
    recent = store.timings()
    assert len(recent) == WINDOW
    assert recent[0] == f"h.example {WINDOW + 9}"


def test_engine_reports_count_while_fresh_and_stale_ones_are_forgotten() -> None:
    now = time.time()
    forgotten: list[str] = []
    reports = {"a:1": f"3 64 {now:.0f}", "b:2": f"1 64 {now - 600:.0f}", "c:3": "garbage"}
    assert engine_usage(reports, lambda *names: forgotten.extend(names)) == (1, 3, 64)
    assert sorted(forgotten) == ["b:2", "c:3"]


def test_label_values_of_counters_are_exposed_once_per_series() -> None:
    families = {f.name: f for f in counter_families({"outbox_attempts_total|result=2xx": 7.0})}
    samples = [s for s in families["outbox_attempts"].samples if s.name.endswith("_total")]
    assert {s.labels["result"]: s.value for s in samples}["2xx"] == 7.0
    assert len(samples) == len({s.labels["result"] for s in samples})


def test_the_view_serves_the_outbox_metrics() -> None:
    response = Client().get("/outbox/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert b"outbox_oldest_due_age_seconds" in response.content


def test_without_prometheus_client_the_view_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(prometheus, "prometheus_client", None)
    monkeypatch.setattr(prometheus, "_own", None)
    assert prometheus.exposition() is None
    assert prometheus.register_default() is False
    response = Client().get("/outbox/metrics")
    assert response.status_code == 501
    assert b"django-outbox[metrics]" in response.content


@override_settings(OUTBOX_METRICS=False)
def test_metrics_can_be_switched_off() -> None:
    rows = claimed(2)
    apply_outcomes([outcome(r, AttemptResult.DELIVERED, status=202) for r in rows])
    recording.flush()
    assert configured_metrics_store().counters() == {}
