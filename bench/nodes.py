"""Nodes: 1, 2 and 4 worker nodes sharing PostgreSQL and the broker (``--only nodes``).

What grows as workers are added on more machines is the contention on what they share:
the claim (one ``UPDATE ... RETURNING`` per Celery message) and the recorder's outcome
``UPDATE``s on one table, and the broker.  Each run drains 20,000 deliveries (100
activities' worth: one inbox on each of 200 hosts answering 202 at once, RSA-2048) with
N separate ``celery -A testproject worker -n nodeK@%h -c 1`` processes, as N machines
would run them.  Each node has one pool process so that the runs compare like with like:
one delivering process per node, and 2 nodes use the machine's 2 cores; with the README's
default ``-c`` (one process per core) 4 nodes would be 8 processes on 2 cores.  On
this machine throughput cannot double; what the run shows is whether the cost of a
delivery (worker CPU, PostgreSQL CPU and statement time) stays flat as nodes are added.

The rows and their ``deliver`` messages are written before the nodes start (the
messages recorded, not published), every node is started and ready, and then the
messages are published at once: t0 is just before that publish, the end the last
``finished_at``.  Each size runs on Redis (the README's Celery settings for it) and on
RabbitMQ (``scripts/services start rabbitmq``; ``confirm_publish``), the database and
Redis (caches, breakers) being the same.

Per delivery it reports: worker CPU (every node's processes), PostgreSQL CPU (the
postmaster and every backend, exited ones included), PostgreSQL's own ``active_time``
and transactions for the bench database (``pg_stat_database``, read after the nodes
stopped, when their backends have flushed their counters), and, where the server loads
``pg_stat_statements`` (``scripts/services`` does), the execution time and calls of the
claim, the outcome writes and the rest; the broker's CPU too.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import (
    ACTOR,
    REPO,
    Env,
    activity,
    broker_connection,
    log,
    purge_rabbitmq,
    reset_state,
    start_rabbitmq,
    wait_settled,
)
from bench.figures import load_average, summary, wait_quiet
from bench.processes import Farm, Worker, cpu_seconds, process_tree

HOSTS = 200
SIZES = (1, 2, 4)
Message = tuple[str, tuple[Any, ...], str, float | None]

#: Statements by what they do, matched on pg_stat_statements' normalised text.
CLASSES: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("bench", lambda q: "GROUP BY state" in q or "max(finished_at)" in q or "pg_stat" in q),
    ("claim", lambda q: "SET state = $1, claimed_by = $2, lease_until" in q),
    ("record", lambda q: q.lstrip().upper().startswith(("UPDATE", "INSERT"))),
    ("other", lambda q: True),
)


class _Recorder:
    """A dispatch publisher that keeps the messages instead of sending them."""

    def __init__(self) -> None:
        self.sent: list[Message] = []

    @contextlib.contextmanager
    def connect(self) -> Iterator[Callable[[str, tuple[Any, ...], str, float | None], None]]:
        def send(name: str, args: tuple[Any, ...], queue: str, countdown: float | None) -> None:
            self.sent.append((name, args, queue, countdown))

        yield send


def prepare(env: Env, farm: Farm, per_host: int) -> list[Message]:
    """Write ``per_host`` x 200 deliveries; their ``deliver`` messages, not yet sent."""
    from django_outbox import outbox
    from django_outbox.broker.publish import DELIVER, use_publisher
    from django_outbox.sending.fanout import expand

    reset_state(env)
    recorder = _Recorder()
    with use_publisher(recorder):
        message = outbox.send(ACTOR, activity(0), farm.inboxes(per_host))
        assert message is not None
        expand(message.pk)
    return [sent for sent in recorder.sent if sent[0] == DELIVER]


def publish(broker_url: str, messages: list[Message]) -> None:
    """Send ``messages`` to the broker at ``broker_url`` on one producer."""
    from celery import current_app

    with broker_connection(broker_url) as connection:
        producer = current_app.amqp.Producer(connection)
        for name, args, queue, countdown in messages:
            current_app.send_task(name, args, queue=queue, countdown=countdown, producer=producer)


# ---------------------------------------------------------------- postgresql -----
def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def postgres_cpu(postmaster: int) -> float:
    """CPU seconds of the server: the postmaster, its live children and reaped ones."""
    fields = _stat(postmaster)
    reaped = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    return reaped + sum(cpu_seconds(pid) for pid in process_tree(postmaster))


def postmaster_pid() -> int:
    """The postmaster of the bench database's server (the parent of our backend)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (backend,) = cursor.fetchone()
    return int(_stat(backend)[1])


def statements_available() -> bool:
    """Whether pg_stat_statements is loaded (and its view created in the bench DB)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW shared_preload_libraries")
        if "pg_stat_statements" not in cursor.fetchone()[0]:
            return False
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return True


DATABASE_COLUMNS = (
    "xact_commit",
    "xact_rollback",
    "blks_hit",
    "blks_read",
    "tup_returned",
    "tup_fetched",
    "tup_inserted",
    "tup_updated",
    "active_time",
)


def database_counters() -> dict[str, float]:
    """The bench database's ``pg_stat_database`` counters (``active_time`` in ms)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(DATABASE_COLUMNS)} FROM pg_stat_database "
            "WHERE datname = current_database()"
        )
        return dict(zip(DATABASE_COLUMNS, map(float, cursor.fetchone()), strict=True))


def database_connections() -> int:
    """Sessions connected to the bench database now (this process's included)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def statement_classes() -> dict[str, dict[str, float]]:
    """Calls and execution ms of the bench database's statements, by class."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT query, calls, total_exec_time FROM pg_stat_statements "
            "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        rows = cursor.fetchall()
    out = {name: {"calls": 0.0, "ms": 0.0} for name, _ in CLASSES}
    for query, calls, ms in rows:
        name = next(name for name, matches in CLASSES if matches(query))
        out[name]["calls"] += calls
        out[name]["ms"] += ms
    return out


def reset_statements() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_statements_reset()")


# -------------------------------------------------------------------- a run -----
def broker_pid(env: Env, broker_url: str) -> int | None:
    """The broker server's process (Redis from INFO, RabbitMQ from its pid file)."""
    if broker_url.startswith("amqp"):
        folder = Path(os.environ.get("OUTBOX_SERVICES_DIR", REPO / ".run"))
        with contextlib.suppress(OSError, ValueError):
            return int((folder / "rabbitmq" / "rabbitmq.pid").read_text())
        return None
    import redis

    return int(redis.Redis.from_url(env.redis_url).info()["process_id"])


def one(env: Env, farm: Farm, broker_url: str, nodes: int, per_host: int) -> dict[str, Any]:
    """Drain ``per_host`` x 200 deliveries with ``nodes`` one-process worker nodes."""
    messages = prepare(env, farm, per_host)
    purge_rabbitmq(broker_url)
    total = per_host * HOSTS
    statements = statements_available()
    node_env = Env(env.database_url, env.redis_url, broker_url)
    workers = [Worker(node_env, concurrency=1, name=f"node{k + 1}-") for k in range(nodes)]
    busy = wait_quiet()
    load = load_average()
    postmaster = postmaster_pid()
    broker = broker_pid(env, broker_url)
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(nodes) as pool:
        for worker in workers:
            stack.push(worker.__exit__)
        list(pool.map(Worker.__enter__, workers))
        if statements:
            reset_statements()
        database0, pg0 = database_counters(), postgres_cpu(postmaster)
        workers0 = sum(w.cpu_seconds() for w in workers)
        broker0 = cpu_seconds(broker) if broker else 0.0
        t0 = time.time()
        publish(broker_url, messages)
        result = wait_settled(total, 300, poll=1.0)
        worker_cpu = sum(w.cpu_seconds() for w in workers) - workers0
        connections = database_connections() - 1  # not the bench's own
        broker_cpu = (cpu_seconds(broker) if broker else 0.0) - broker0
    time.sleep(1.0)  # the nodes' backends have exited and flushed their counters
    pg_cpu = postgres_cpu(postmaster) - pg0
    database = {k: v - database0[k] for k, v in database_counters().items()}
    delivered = result["counts"].get("delivered", 0)
    per = max(1, delivered)
    elapsed = (result["last_finished"] or time.time()) - t0
    figures: dict[str, Any] = {
        "rate": delivered / elapsed if elapsed > 0 else 0.0,
        "elapsed_s": elapsed,
        "delivered": delivered,
        "complete": result["complete"],
        "messages": len(messages),
        "connections": float(connections),
        "worker_cpu_ms": 1000 * worker_cpu / per,
        "postgres_cpu_ms": 1000 * pg_cpu / per,
        "broker_cpu_ms": 1000 * broker_cpu / per,
        "db_active_ms": database["active_time"] / per,
        "db_xacts": (database["xact_commit"] + database["xact_rollback"]) / per,
        "db_blocks": (database["blks_hit"] + database["blks_read"]) / per,
        "database": database,
        "busy_before": busy,
        "load_before": load,
    }
    if statements:
        classes = statement_classes()
        figures["statements"] = classes
        for name in ("claim", "record", "other"):
            figures[f"{name}_ms"] = classes[name]["ms"] / per
            figures[f"{name}_calls"] = classes[name]["calls"] / per
    return figures


def run(env: Env, quick: bool) -> dict[str, Any]:
    """1, 2 and 4 nodes on Redis, then on RabbitMQ; two runs each (one with ``quick``)."""
    per_host = 25 if quick else 100
    repeats = 1 if quick else 2
    brokers = {"redis": env.redis_url, "rabbitmq": start_rabbitmq()}
    out: dict[str, Any] = {"deliveries": per_host * HOSTS, "hosts": HOSTS, "brokers": {}}
    with Farm(env, HOSTS) as farm:
        for broker, url in brokers.items():
            sizes: dict[str, Any] = {}
            for nodes in SIZES:
                runs = []
                for _ in range(repeats):
                    figures = one(env, farm, url, nodes, per_host)
                    log(
                        f"nodes {broker} x{nodes}: {figures['rate']:.0f}/s, worker "
                        f"{figures['worker_cpu_ms']:.2f} ms, PostgreSQL "
                        f"{figures['postgres_cpu_ms']:.2f} ms CPU, claim "
                        f"{figures.get('claim_ms', 0):.3f} ms, record "
                        f"{figures.get('record_ms', 0):.3f} ms per delivery"
                    )
                    runs.append(figures)
                sizes[str(nodes)] = {
                    "runs": runs,
                    **{
                        key: summary([r[key] for r in runs if key in r])
                        for key in runs[0]
                        if isinstance(runs[0][key], float)
                    },
                }
            out["brokers"][broker] = sizes
    reset_state(env)
    log("\n" + markdown(out))
    return out


COLUMNS = (
    ("rate", "deliveries/s", 0),
    ("worker_cpu_ms", "worker CPU ms", 2),
    ("postgres_cpu_ms", "PostgreSQL CPU ms", 3),
    ("db_active_ms", "PostgreSQL active ms", 3),
    ("claim_ms", "claim ms", 3),
    ("record_ms", "record ms", 3),
    ("other_ms", "other SQL ms", 3),
    ("db_xacts", "transactions", 3),
    ("broker_cpu_ms", "broker CPU ms", 3),
    ("connections", "PostgreSQL sessions", 0),
)


def markdown(results: dict[str, Any]) -> str:
    """The results as a table: medians per broker and number of nodes (per delivery)."""
    head = "| broker | nodes | " + " | ".join(label for _, label, _ in COLUMNS) + " |"
    lines = [head, "|---|---:|" + "---:|" * len(COLUMNS)]
    for broker, sizes in results["brokers"].items():
        for nodes, figures in sizes.items():
            cells = []
            for key, _, digits in COLUMNS:
                median = figures.get(key, {}).get("median")
                cells.append("-" if median is None else f"{median:,.{digits}f}")
            lines.append(f"| {broker} | {nodes} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
