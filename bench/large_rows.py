"""The rows of the ``large-table`` scenario: two weeks of a busy server's deliveries.

:data:`FINISHED` finished deliveries (ids ``1..FINISHED``, oldest first, over 14 days)
and :data:`QUEUED` queued ones (the ids after them), written by ``INSERT ... SELECT
generate_series`` into a database of their own (:data:`DATABASE`, so that the other
scenarios' ``TRUNCATE`` leaves them alone), and kept: :data:`MARKER` records the data
set's :data:`VERSION`, and a run whose version matches reuses the rows.

Proportions, by ``id % 1000`` (a delivery's values are a function of its id, so that a
range of ids pruned by a measurement can be written again as it was,
:func:`restore`): 92.5% delivered at the first attempt (no history row), 3% delivered
after one or two failed attempts (a history row per attempt), 2% refused (``410``, one
row), 0.5% skipped (host unavailable, none), 2% failed after the default 16 attempts
(16 rows).  100 deliveries per message, a 1 KB activity each; 20,000 hosts, the
busiest first (a host's share falls as a cube).  The queued deliveries are parked
retries to 2,000 failing hosts (a :class:`~django_outbox.models.Host` row each), 5% of
them on the priority lane, with one to five attempts spent and a history row for
each, due 30 to 37 days from the build: none comes due during a run.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

from bench.common import log

DATABASE = "outbox_bench_large"
MARKER = "bench_large_dataset"
FINISHED = 10_000_000
QUEUED = 1_000_000
PER_MESSAGE = 100
#: Changes whenever what :data:`FILL` writes changes: the rows are built again.
VERSION = f"3 {FINISHED} {QUEUED} {PER_MESSAGE}"
#: ``mod(i, 1000)`` below each bound: failed, refused, skipped, delivered after retries.
FAILED, REFUSED, SKIPPED, RETRIED = 20, 40, 45, 75

_STATE = f"""CASE WHEN i > {FINISHED} THEN 'queued'
    WHEN mod(i, 1000) < {FAILED} THEN 'failed' WHEN mod(i, 1000) < {REFUSED} THEN 'refused'
    WHEN mod(i, 1000) < {SKIPPED} THEN 'skipped' ELSE 'delivered' END"""
_ATTEMPTS = f"""CASE WHEN i > {FINISHED} THEN 1 + mod(i, 5) WHEN mod(i, 1000) < {FAILED} THEN 16
    WHEN mod(i, 1000) < {REFUSED} THEN 1 WHEN mod(i, 1000) < {SKIPPED} THEN 0
    WHEN mod(i, 1000) < {RETRIED} THEN 2 + mod(i, 2) ELSE 1 END"""
#: The columns of delivery ``i`` (``generate_series`` ``i``), the host computed once.
_ROW = f"""SELECT i, {_STATE} AS state, {_ATTEMPTS} AS attempts,
    CASE WHEN i > {FINISHED} THEN 'down' || mod(i, 2000) || '.example'
         ELSE 'h' || floor(20000 * power(mod(i::bigint * 2654435761, 4294967296)
                                          / 4294967296.0, 3))::int || '.example' END AS host,
    CASE WHEN i > {FINISHED} THEN now() - interval '1 day' + (i - {FINISHED})
                                   * (interval '1 day' / {QUEUED})
         ELSE now() - interval '14 days' + i * (interval '14 days' / {FINISHED}) END AS created
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i"""

MESSAGES = f"""
INSERT INTO django_outbox_message
    (id, sender, body, body_sha256, content_type, activity_type, tag, ordering_key, lane,
     synchronize_collection, max_attempts, inbox_count, created_at, signing, webhook_id)
SELECT m, 'https://demo.example/users/u' || mod(m, 500),
       convert_to('{{"type": "Create", "id": "https://demo.example/statuses/' || m
                  || '", "content": "' || repeat('Benchmark post with text. ', 36) || '"}}',
                  'UTF8'),
       sha256(int8send(m)), 'application/activity+json', 'Create', '', '', 'outbox', false,
       16, {PER_MESSAGE}, d.created_at, 'http-signatures', ''
FROM generate_series((%(first)s - 1) / {PER_MESSAGE} + 1, (%(last)s - 1) / {PER_MESSAGE} + 1) AS m
JOIN django_outbox_delivery d ON d.id = (m - 1) * {PER_MESSAGE} + 1
ON CONFLICT (id) DO NOTHING;
"""

DELIVERIES = f"""
INSERT INTO django_outbox_delivery
    (id, message_id, inbox, host, via, state, lane, ordering_key, attempts, next_attempt_at,
     dispatched_at, claimed_by, lease_until, last_status, last_error, deadline_reached,
     created_at, finished_at, failed_signal_pending)
SELECT r.i, (r.i - 1) / {PER_MESSAGE} + 1, 'https://' || r.host || '/users/u' || r.i || '/inbox',
       r.host, '[]'::jsonb, r.state,
       CASE WHEN mod(r.i, 20) = 0 THEN 'outbox.priority' ELSE 'outbox' END, '', r.attempts,
       CASE WHEN r.state = 'queued' THEN now() + interval '30 days' + mod(r.i, 604800)
                                          * interval '1 second'
            ELSE r.created END,
       CASE WHEN r.state = 'queued' THEN NULL ELSE r.created END, '', NULL,
       CASE r.state WHEN 'delivered' THEN 202 WHEN 'refused' THEN 410 WHEN 'skipped' THEN NULL
                    ELSE 503 END,
       CASE r.state WHEN 'failed' THEN 'gave up after 16 attempts: HTTP 503 Service Unavailable'
                    WHEN 'refused' THEN 'HTTP 410 Gone'
                    WHEN 'skipped' THEN 'the host is unavailable'
                    WHEN 'queued' THEN 'HTTP 503 Service Unavailable' ELSE '' END,
       false, r.created,
       CASE r.state WHEN 'queued' THEN NULL
                    WHEN 'failed' THEN r.created + interval '2 days'
                    ELSE r.created + (r.attempts * interval '40 seconds') END,
       false
FROM ({_ROW}) AS r
ON CONFLICT (id) DO NOTHING;
"""

ATTEMPTS = f"""
INSERT INTO django_outbox_attempt
    (delivery_id, number, held, times, host, at, duration, status, scheme, result, error, wait)
SELECT r.i, n, false, 1, r.host, r.created + (n - 1) * interval '3 hours', 0.25,
       CASE WHEN r.state = 'refused' THEN 410 WHEN r.state = 'delivered' AND n = r.attempts
            THEN 202 ELSE 503 END,
       'draft-cavage',
       CASE WHEN r.state = 'refused' THEN 'refused' WHEN r.state = 'delivered' AND n = r.attempts
            THEN 'delivered' ELSE 'retry' END,
       CASE WHEN r.state = 'refused' THEN 'HTTP 410 Gone' WHEN r.state = 'delivered'
            AND n = r.attempts THEN '' ELSE 'HTTP 503 Service Unavailable' END,
       NULL
FROM ({_ROW}) AS r, generate_series(1, r.attempts) AS n
WHERE r.state <> 'skipped' AND (r.state <> 'delivered' OR r.attempts > 1)
ON CONFLICT DO NOTHING;
"""

HOSTS = """
INSERT INTO django_outbox_host (name, failure_days, first_failure_at, last_failure_day,
                                last_status, last_error)
SELECT 'down' || h || '.example', 1 + mod(h, 5), now() - interval '5 days', current_date, 503,
       'HTTP 503 Service Unavailable'
FROM generate_series(0, 1999) AS h ON CONFLICT DO NOTHING;
"""


def _execute(sql: str, params: dict[str, Any] | list[Any] | None = None) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _scalar(sql: str) -> Any:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchone()[0]


def current() -> bool:
    """Whether the database holds this :data:`VERSION` of the data set, complete (rows a
    prune measurement deleted are written again first)."""
    _execute(f"CREATE TABLE IF NOT EXISTS {MARKER} (version text, built_at timestamptz)")
    _execute(f"ALTER TABLE {MARKER} ADD COLUMN IF NOT EXISTS pruned bigint NOT NULL DEFAULT 0")
    if not _scalar(f"SELECT count(*) FROM {MARKER} WHERE version = '{VERSION}'"):
        return False
    pruned = int(_scalar(f"SELECT max(pruned) FROM {MARKER}"))
    if pruned:
        restore(pruned)
        mark_pruned(0)
    return True


def mark_pruned(last: int) -> None:
    """Note that finished deliveries up to id ``last`` may have been pruned (0: none)."""
    _execute(f"UPDATE {MARKER} SET pruned = %s", [last])


def fill(first: int, last: int) -> None:
    """Write deliveries ``first..last`` (those missing), their history and messages.

    Foreign keys are not checked meanwhile (``session_replication_role``): every row
    written refers to one written with it.
    """
    _execute("SET session_replication_role = replica")
    try:
        params = {"first": first, "last": last}
        for sql in (DELIVERIES, ATTEMPTS, MESSAGES):
            _execute(sql, params)
    finally:
        _execute("SET session_replication_role = DEFAULT")


def restore(last: int) -> None:
    """Write again the finished deliveries ``1..last`` a prune deleted (with their
    history and messages), and VACUUM."""
    began = time.monotonic()
    fill(1, last)
    vacuum()
    log(f"large-table: rows 1..{last:,} restored in {time.monotonic() - began:.0f}s")


def vacuum() -> None:
    """``VACUUM (FREEZE, ANALYZE)`` the delivery tables, as autovacuum would in time."""
    from django.db import connection

    with connection.cursor() as cursor:
        for table in ("django_outbox_message", "django_outbox_delivery", "django_outbox_attempt"):
            cursor.execute(f"VACUUM (FREEZE, ANALYZE) {table}")


def build() -> float:
    """Empty the tables and write the data set (the models' extra indexes dropped and
    made again after, one core, at low priority); seconds taken."""
    from django.db import connection

    from django_outbox.models import Attempt, Delivery

    began = time.monotonic()
    backend = _scalar("SELECT pg_backend_pid()")
    subprocess.run(["renice", "-n", "19", "-p", str(backend)], capture_output=True, check=False)
    _execute(f"DELETE FROM {MARKER}")
    _execute(
        "TRUNCATE django_outbox_attempt, django_outbox_delivery, django_outbox_message, "
        "django_outbox_host, django_outbox_pendinginboxes RESTART IDENTITY CASCADE"
    )
    _execute("SET maintenance_work_mem = '512MB'; SET max_parallel_maintenance_workers = 0")
    indexes = [(model, index) for model in (Delivery, Attempt) for index in model._meta.indexes]
    with connection.cursor() as cursor:
        existing = {
            name
            for model in (Delivery, Attempt)
            for name in connection.introspection.get_constraints(cursor, model._meta.db_table)
        }
    with connection.schema_editor() as editor:
        for model, index in indexes:
            if index.name in existing:
                editor.remove_index(model, index)
    for first in range(1, FINISHED + QUEUED + 1, 1_000_000):
        fill(first, min(first + 999_999, FINISHED + QUEUED))
        log(f"large-table: {min(first + 999_999, FINISHED + QUEUED):,} deliveries written")
    _execute(HOSTS)
    with connection.schema_editor() as editor:
        for model, index in indexes:
            editor.add_index(model, index)
    for table, last in (("delivery", FINISHED + QUEUED), ("message", _messages())):
        _execute(f"SELECT setval(pg_get_serial_sequence('django_outbox_{table}', 'id'), {last})")
    vacuum()
    _execute(f"INSERT INTO {MARKER} VALUES ('{VERSION}', now())")
    return time.monotonic() - began


def _messages() -> int:
    return (FINISHED + QUEUED - 1) // PER_MESSAGE + 1


def bounds() -> dict[str, int]:
    """The data set's last delivery, message and attempt ids: what a run adds is above."""
    return {
        "delivery": FINISHED + QUEUED,
        "message": _messages(),
        "attempt": int(_scalar("SELECT coalesce(max(id), 0) FROM django_outbox_attempt")),
    }


def delete_added(marks: dict[str, int]) -> None:
    """Delete what runs added above ``marks`` (:func:`bounds`), keeping the data set."""
    for table, column, mark in (
        ("attempt", "id", "attempt"),
        ("delivery", "id", "delivery"),
        ("pendinginboxes", "message_id", "message"),
        ("message", "id", "message"),
    ):
        _execute(f"DELETE FROM django_outbox_{table} WHERE {column} > %s", [marks[mark]])


def sizes() -> dict[str, Any]:
    """Rows by state and the size on disk of the delivery tables with their indexes."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT state, count(*) FROM django_outbox_delivery GROUP BY state")
        states = dict(cursor.fetchall())
        cursor.execute(
            "SELECT relname, pg_total_relation_size(oid), pg_indexes_size(oid), reltuples "
            "FROM pg_class WHERE relname IN ('django_outbox_delivery', "
            "'django_outbox_attempt', 'django_outbox_message')"
        )
        tables = {
            name: {"total_mb": total / 2**20, "indexes_mb": idx / 2**20, "rows": int(rows)}
            for name, total, idx, rows in cursor.fetchall()
        }
    return {"states": states, "tables": tables}
