"""How long ``outbox status``, the admin overview and a metrics scrape take on 1,000,000 rows.

``python bench/status_command.py [--rows 1000000] [--repeats 5] [--keep]``

Fills PostgreSQL's ``outbox_status_bench`` database (on the servers ``scripts/services``
runs) with a day of deliveries written by ``INSERT ... SELECT generate_series``: 94%
delivered, some refused, skipped and failed, a backlog of queued deliveries (half of it
due), a few sending and waiting, 5,000 hosts, 1,000 messages, an attempt history for the
failures and 200 failing hosts; ``VACUUM ANALYZE`` as autovacuum would.  Then times each
part of a snapshot, ``outbox status --json`` as a whole, the overview page's context and
a metrics scrape (with no cached snapshot), and writes ``bench/results/status_command.json``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS_DIR, database_env, log, setup_django, start_services
from bench.figures import save_json

DATABASE = "outbox_status_bench"

FILL = """
INSERT INTO django_outbox_message
    (id, sender, body, body_sha256, content_type, activity_type, tag, ordering_key, lane,
     synchronize_collection, max_attempts, inbox_count, created_at, signing, webhook_id)
SELECT m, 'https://demo.example/users/alice', '\\x7b7d'::bytea, '\\x00'::bytea,
       'application/activity+json', 'Create', 'post-' || m, '', 'outbox', false, 16,
       %(rows)s / 1000, now() - interval '1 day', 'http-signatures', ''
FROM generate_series(1, 1000) AS m;

INSERT INTO django_outbox_delivery
    (id, message_id, inbox, host, via, state, lane, ordering_key, attempts, next_attempt_at,
     dispatched_at, claimed_by, lease_until, last_status, last_error, deadline_reached,
     created_at, finished_at, failed_signal_pending)
SELECT i, 1 + i %% 1000,
       'https://h' || (i %% 5000) || '.example/users/' || i || '/inbox',
       'h' || (i %% 5000) || '.example', '[]'::jsonb, s.state,
       CASE WHEN i %% 10 = 0 THEN 'outbox.priority' WHEN i %% 50 = 1 THEN 'outbox.low'
            ELSE 'outbox' END,
       '', CASE WHEN s.state = 'failed' THEN 16 ELSE 1 END,
       CASE WHEN s.state = 'queued' AND i %% 2 = 0 THEN now() + interval '10 minutes'
            ELSE now() - (i %% 600) * interval '1 second' END,
       NULL, '', NULL, CASE WHEN s.state IN ('delivered', 'refused', 'failed') THEN 202 END,
       CASE WHEN s.state = 'failed' THEN 'HTTP 503' ELSE '' END, false,
       s.created, CASE WHEN s.state IN ('delivered', 'refused', 'skipped', 'failed')
                       THEN s.created + (i %% 100) * interval '100 milliseconds' END, false
FROM generate_series(1, %(rows)s) AS i,
     LATERAL (SELECT CASE
        WHEN i %% 1000 < 940 THEN 'delivered' WHEN i %% 1000 < 950 THEN 'refused'
        WHEN i %% 1000 < 955 THEN 'skipped' WHEN i %% 1000 < 970 THEN 'failed'
        WHEN i %% 1000 < 995 THEN 'queued' WHEN i %% 1000 < 998 THEN 'sending'
        ELSE 'waiting' END AS state,
        now() - (%(rows)s - i) * (interval '1 day' / %(rows)s) AS created) AS s;

INSERT INTO django_outbox_attempt
    (delivery_id, number, held, times, host, at, duration, status, scheme, result, error, wait)
SELECT d.id, n, false, 1, d.host, d.created_at + n * interval '1 minute', 0.2, 503,
       'draft-cavage', 'retry', 'HTTP 503', NULL
FROM django_outbox_delivery d, generate_series(1, 2) AS n
WHERE d.state = 'failed';

INSERT INTO django_outbox_host (name, failure_days, first_failure_at, last_failure_day,
                                unavailable_since)
SELECT 'h' || h || '.example', 1 + h %% 9, now() - interval '3 days', current_date,
       CASE WHEN h %% 9 = 8 THEN now() END
FROM generate_series(1, 200) AS h;

SELECT setval(pg_get_serial_sequence('django_outbox_delivery', 'id'), %(rows)s);
SELECT setval(pg_get_serial_sequence('django_outbox_message', 'id'), 1000);
"""


def fill(rows: int) -> float:
    """Empty the tables and write ``rows`` deliveries; seconds taken."""
    from django.db import connection

    began = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE django_outbox_attempt, django_outbox_delivery, django_outbox_message, "
            "django_outbox_host RESTART IDENTITY CASCADE"
        )
        cursor.execute(FILL, {"rows": rows})
    connection.connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    return time.perf_counter() - began


def timed(function: Callable[[], Any], repeats: int) -> dict[str, float]:
    """Median and worst seconds of ``repeats`` calls (after one warm-up call)."""
    function()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        function()
        times.append(time.perf_counter() - began)
    return {"median_s": round(statistics.median(times), 4), "max_s": round(max(times), 4)}


def snapshot_parts(now: datetime) -> dict[str, Callable[[], Any]]:
    """Each query of a snapshot, and of the overview's charts and batches, by name."""
    from django_outbox.status import snapshot, timeline

    return {
        "counts by state and lane": lambda: snapshot.lane_statuses(now),
        "finished per minute (5 min)": lambda: snapshot.per_minute(now),
        "send-to-settle sample": lambda: snapshot.settle_times(now),
        "failing hosts": lambda: snapshot.failing_hosts(now),
        "timeline, last hour": lambda: timeline.timeline(timedelta(hours=1), "minute"),
        "timeline, last day": lambda: timeline.timeline(timedelta(days=1), "hour"),
        "timeline, last day, no hour kept": lambda: (
            timeline.forget_ended_hours(),
            timeline.timeline(timedelta(days=1), "hour"),
        ),
        "batches under way": timeline.batches_in_progress,
    }


def measure(repeats: int) -> dict[str, Any]:
    """Time each query of a snapshot, the command, the overview and a scrape."""
    from django.core.management import call_command
    from django.test import RequestFactory, override_settings
    from django.utils import timezone

    from django_outbox.admin.overview import overview_context
    from django_outbox.metrics.prometheus import exposition
    from django_outbox.status import timeline

    results: dict[str, Any] = {
        name: timed(part, repeats) for name, part in snapshot_parts(timezone.now()).items()
    }

    def command() -> None:
        out = io.StringIO()
        call_command("outbox", "status", "--json", stdout=out)
        json.loads(out.getvalue())

    results["outbox status --json"] = timed(command, repeats)
    request = RequestFactory().get("/admin/django_outbox/delivery/overview/")
    results["admin overview"] = timed(
        lambda: overview_context(request, can_view_hosts=True), repeats
    )
    results["admin overview, no hour kept"] = timed(
        lambda: (timeline.forget_ended_hours(), overview_context(request, can_view_hosts=True)),
        repeats,
    )
    with override_settings(OUTBOX_METRICS_TTL=0):
        results["metrics scrape (no cache)"] = timed(exposition, repeats)
    return results


def arguments(
    argv: Sequence[str] | None, doc: str | None, repeats: int, only: bool = False
) -> argparse.Namespace:
    """``--rows``, ``--repeats`` and ``--keep`` (and ``--only``), for a script whose
    docstring is ``doc``."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--keep", action="store_true", help="reuse the rows of a previous run")
    if only:
        parser.add_argument("--only", nargs="+", default=[], help="time only these parts")
    return parser.parse_args(argv)


def prepare(rows: int, keep: bool) -> dict[str, Any]:
    """Start the servers, make and migrate :data:`DATABASE` and fill it with ``rows``
    deliveries (unless ``keep``); the results so far (rows there, seconds filling)."""
    env = database_env(start_services(), DATABASE)
    setup_django(env)
    results: dict[str, Any] = {"rows": rows}
    if not keep:
        log(f"filling {rows:,} deliveries")
        results["fill_s"] = round(fill(rows), 1)
        log(f"filled in {results['fill_s']}s")
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM django_outbox_delivery")
        results["rows"] = cursor.fetchone()[0]
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Fill, measure, save."""
    options = arguments(argv, __doc__, repeats=5)
    results = prepare(options.rows, options.keep)
    results["timings"] = measure(options.repeats)
    results["at"] = time.strftime("%Y-%m-%d %H:%M:%S")
    results["load_average"] = round(os.getloadavg()[0], 2)
    for name, figures in results["timings"].items():
        log(
            f"{name:32} median {figures['median_s'] * 1000:8.1f} ms   max "
            f"{figures['max_s'] * 1000:8.1f} ms"
        )
    save_json(RESULTS_DIR / "status_command.json", results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
