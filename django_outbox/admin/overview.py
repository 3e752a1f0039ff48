"""The admin overview page: how far behind, how fast, what fails, what is under way.

Everything on it comes from :mod:`django_outbox.status` (the same numbers as
``outbox status`` and the metrics); this module only arranges them, with the
charts drawn as inline SVG by :mod:`django_outbox.admin.charts`, and adds what only a
page needs: how many worker processes beat, how many hosts the failing table is
the worst of, and links to the lists and pages behind each number.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone

from django_outbox.admin.charts import bar_chart, legend
from django_outbox.breakers.configured import breakers_shared
from django_outbox.breakers.policy import breaker_host
from django_outbox.conf import conf
from django_outbox.status.snapshot import STATES, failing_population, take_snapshot
from django_outbox.status.timeline import Bucket, batches_in_progress, timeline
from django_outbox.store.heartbeats import live_names

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
#: Seconds between two reloads of the overview's numbers, when asked for.
REFRESH_EVERY = 5


def changelist(**filters: str) -> str:
    """The deliveries change list's URL with ``filters`` applied."""
    return reverse("admin:django_outbox_delivery_changelist") + "?" + urlencode(filters)


def _charts(buckets: list[Bucket], label: str, every: int) -> dict[str, Any]:
    labels = [timezone.localtime(bucket.start).strftime(label) for bucket in buckets]
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


def overview_context(request: HttpRequest, *, can_view_hosts: bool) -> dict[str, Any]:
    """The overview template's context (timed: ``took`` is in milliseconds).

    Hosts and breakers are linked to their pages only for users who may see them.
    """
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
    day = _charts(timeline(timedelta(days=1), "hour", now), "%H:%M", every=3)
    batches = [
        {
            "batch": batch,
            "url": reverse("admin:django_outbox_message_change", args=[batch.message.pk]),
            "deliveries_url": changelist(message=str(batch.message.pk)),
            "delivered": batch.share("delivered"),
            "failed": batch.share("failed", "refused"),
            "skipped": batch.share("skipped"),
        }
        for batch in batches_in_progress()
    ]
    return {
        "snapshot": snapshot,
        "totals": totals,
        "due": sum(lane.due for lane in snapshot.lanes),
        "beating": len(live_names(conf.HEARTBEAT_TIMEOUT)),
        "heartbeat_timeout": conf.HEARTBEAT_TIMEOUT,
        "states": states,
        "hour": hour,
        "day": day,
        "zone": timezone.get_current_timezone_name(),
        "failing": [_host(host.host, can_view_hosts, host=host) for host in snapshot.failing],
        "failing_of": failing_population(now),
        "slowest": [_host(host.host, can_view_hosts, host=host) for host in snapshot.slowest],
        "breakers": [
            _host(breaker_host(state.key), can_view_hosts, state=state)
            for state in snapshot.breakers
        ],
        "batches": batches,
        "can_view_hosts": can_view_hosts,
        "breakers_unseen": not breakers_shared(),
        "refresh_every": REFRESH_EVERY,
        "due_url": changelist(due="yes"),
        "queued_url": changelist(state="queued"),
        "sending_url": changelist(state="sending"),
        "failed_url": changelist(state="failed"),
        "took": round(1000 * (time.perf_counter() - began)),
    }


def _host(name: str, linked: bool, **row: Any) -> dict[str, Any]:
    """A table row about host ``name``: its page's URL (for users who may see it) and
    the list of its deliveries."""
    page = reverse("admin:django_outbox_host_page", args=[name]) if linked and name else ""
    return {"name": name, "page": page, "deliveries": changelist(host=name), **row}
