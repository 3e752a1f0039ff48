"""The admin overview page: how far behind, how fast, what fails, what is under way.

Everything on it comes from :mod:`django_outbox.status` (the same numbers as
``outbox status`` and the metrics); this module only arranges them, with the
charts drawn as inline SVG by :mod:`django_outbox.charts`.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone

from django_outbox.charts import bar_chart, legend
from django_outbox.status.snapshot import STATES, take_snapshot
from django_outbox.status.timeline import Bucket, batches_in_progress, timeline

#: Colours of the states, as the charts and bars draw them.
COLOURS = {
    "delivered": "#417690",
    "refused": "#c0962e",
    "skipped": "#9aa5ab",
    "failed": "#ba2121",
    "queued": "#79aec8",
    "sending": "#5b9a3c",
    "waiting": "#c9cdd1",
}


def changelist(**filters: str) -> str:
    """The deliveries change list's URL with ``filters`` applied."""
    return reverse("admin:django_outbox_delivery_changelist") + "?" + urlencode(filters)


def _charts(buckets: list[Bucket], label: str, every: int) -> dict[str, Any]:
    labels = [bucket.start.strftime(label) for bucket in buckets]
    finished = [
        ("delivered", COLOURS["delivered"], [b.delivered for b in buckets]),
        ("refused or failed", COLOURS["failed"], [b.given_up for b in buckets]),
        ("skipped", COLOURS["skipped"], [b.finished.get("skipped", 0) for b in buckets]),
    ]
    failures = [("failed attempts", "#e08080", [b.failed_attempts for b in buckets])]
    return {
        "throughput": bar_chart(labels, finished, title="Deliveries finished", every=every),
        "throughput_legend": legend(finished),
        "failures": bar_chart(labels, failures, title="Failed attempts", every=every, height=110),
        "failures_legend": legend(failures),
    }


def overview_context(request: HttpRequest) -> dict[str, Any]:
    """The overview template's context (timed: ``took`` is in milliseconds)."""
    began = time.perf_counter()
    now = timezone.now()
    snapshot = take_snapshot()
    totals = snapshot.totals()
    everything = max(1, sum(totals.values()))
    states = [
        {
            "state": state,
            "count": totals[state],
            "share": round(100 * totals[state] / everything, 2),
            "colour": COLOURS[state],
            "url": changelist(state=state),
        }
        for state in STATES
    ]
    hour = _charts(timeline(timedelta(hours=1), "minute", now), "%H:%M", every=10)
    day = _charts(timeline(timedelta(days=1), "hour", now), "%H:00", every=3)
    failing = [{"host": host, "url": changelist(host=host.host)} for host in snapshot.failing]
    slowest = [{"host": host, "url": changelist(host=host.host)} for host in snapshot.slowest]
    batches = [
        {
            "batch": batch,
            "url": changelist(message=str(batch.message.pk)),
            "delivered": batch.share("delivered"),
            "failed": batch.share("failed", "refused"),
            "skipped": batch.share("skipped"),
        }
        for batch in batches_in_progress()
    ]
    return {
        "snapshot": snapshot,
        "states": states,
        "hour": hour,
        "day": day,
        "failing": failing,
        "slowest": slowest,
        "batches": batches,
        "due_url": changelist(state="queued"),
        "failed_url": changelist(state="failed"),
        "took": round(1000 * (time.perf_counter() - began)),
    }
