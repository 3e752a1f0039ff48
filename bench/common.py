"""Shared helpers of the benchmarks: services, out-of-process servers and workers, progress.

Everything a scenario starts runs in its own process (inbox servers, workers), so the
orchestrator's GIL is shared with nobody.  The benchmarks use their own PostgreSQL
database (``outbox_bench``) and Redis database number (``9``) on the servers that
``scripts/services`` runs, so a test run at the same time is not disturbed.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

#: Where the code runs from: the repository, or a snapshot of it (``run.py`` copies
#: ``django_outbox/``, ``testproject/`` and ``bench/`` at the start of a run so that
#: edits made meanwhile in the shared tree do not change the code under test).
ROOT = Path(__file__).resolve().parent.parent
#: The repository: services script, results, docs and run directory.
REPO = Path(os.environ.get("BENCH_REPO", ROOT))
PYTHON = sys.executable
RUN_DIR = REPO / ".run" / "bench"
LOG_DIR = RUN_DIR / "logs"
RESULTS_DIR = REPO / "bench" / "results"
BENCH_DB = "outbox_bench"
BENCH_REDIS_DB = 9
ACTOR = "https://demo.example/users/alice"
README_QUEUES = "outbox.priority,outbox"

#: Worker settings of every scenario unless it says otherwise: the package defaults
#: except a short stop timeout, so that stopping a worker between runs is quick, and
#: ``DEBUG=False`` as in production (testproject's ``DEBUG=True`` keeps the last 9,000
#: SQL queries of each connection in memory and wraps every cursor).
BASE_WORKER_SETTINGS: dict[str, Any] = {"OUTBOX_STOP_TIMEOUT": 3, "DEBUG": False}


def activity(n: int = 0) -> dict[str, Any]:
    """A Create/Note of about 1 KB, as a typical post serialises."""
    note = {
        "id": f"https://demo.example/users/alice/statuses/{n}",
        "type": "Note",
        "attributedTo": ACTOR,
        "content": "<p>" + "Benchmark post with some text. " * 24 + "</p>",
        "to": ["https://www.w3.org/ns/activitystreams#Public"],
        "cc": [f"{ACTOR}/followers"],
    }
    return {
        "@context": "https://www.w3.org/ns/activitystreams",
        "id": f"{note['id']}/activity",
        "type": "Create",
        "actor": ACTOR,
        "object": note,
        "to": note["to"],
        "cc": note["cc"],
    }


# ------------------------------------------------------------------ services -----
@dataclass(frozen=True)
class Env:
    """Where the benchmarks' database and Redis are, and the Celery broker if not Redis."""

    database_url: str
    redis_url: str
    broker_url: str = ""

    def process_env(self, settings: dict[str, Any] | None = None) -> dict[str, str]:
        """The environment of a worker or helper process on the benchmark services."""
        env = dict(os.environ)
        env.pop("OUTBOX_BROKER_URL", None)
        env.update(
            DATABASE_URL=self.database_url,
            REDIS_URL=self.redis_url,
            OUTBOX_RUN_DIR=str(RUN_DIR),
            DJANGO_SETTINGS_MODULE="testproject.settings",
            PYTHONPATH=str(ROOT),
            OUTBOX_SETTINGS_JSON=json.dumps(settings or {}),
        )
        if self.broker_url:
            env["OUTBOX_BROKER_URL"] = self.broker_url
        return env


def _with_path(url: str, path: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


_LOCK: list[Any] = []
#: The benchmarks' lock, one for the machine (``BENCH_LOCK`` to move it).
LOCK_FILE = Path(os.environ.get("BENCH_LOCK", "/tmp/django_outbox-bench.lock"))


def _lock_machine(wait: float = 1800.0) -> None:
    """Hold :data:`LOCK_FILE` for the life of this process: one benchmark at a time.

    Two benchmarks at once would share the bench database (each empties it before its
    runs) and the 2 cores; the second waits for the first (at most ``wait`` seconds).
    The lock is the machine's, not the tree's: benchmarks run from other work trees
    (each with its own services) still share the cores.
    """
    import fcntl

    if _LOCK:
        return
    handle = LOCK_FILE.open("w")
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"another benchmark holds {LOCK_FILE}") from None
            if not _LOCK:
                log("another benchmark is running; waiting for it to finish")
                _LOCK.append(None)
            time.sleep(2)
    _LOCK[:] = [handle]


def start_services() -> Env:
    """Start (or reuse) Redis and PostgreSQL with ``scripts/services``; make the bench DB.

    Takes the benchmark lock first (see :func:`_lock_machine`).
    """
    _lock_machine()
    return services_env()


def services_env() -> Env:
    """Start (or reuse) the services and make the bench DB, without the benchmark lock
    (for what is not timed, such as writing a data set)."""
    exported = _services_start()
    env = Env(exported["DATABASE_URL"], _with_path(exported["REDIS_URL"], f"/{BENCH_REDIS_DB}"))
    return database_env(env, BENCH_DB)


def database_env(env: Env, name: str) -> Env:
    """``env`` on the database ``name`` of the same server, created if missing."""
    import psycopg

    with psycopg.connect(_with_path(env.database_url, "/postgres"), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f"CREATE DATABASE {name}")
    return replace(env, database_url=_with_path(env.database_url, "/" + name))


def start_rabbitmq() -> str:
    """Start (or reuse) the RabbitMQ of ``scripts/services``; its ``amqp://`` URL."""
    return _services_start("rabbitmq")["RABBITMQ_URL"]


def _services_start(*services: str) -> dict[str, str]:
    """``scripts/services start SERVICES...``: the variables it exports."""
    out = subprocess.run(
        [str(REPO / "scripts" / "services"), "start", *services],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        cwd=REPO,
    ).stdout
    return dict(
        line.removeprefix("export ").split("=", 1)
        for line in out.splitlines()
        if line.startswith("export ")
    )


def setup_django(env: Env) -> None:
    """Configure this process for the benchmark services and migrate the bench DB."""
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    os.environ.update(
        {k: v for k, v in env.process_env({"DEBUG": False}).items() if k != "PYTHONPATH"},
    )
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django
    from django.core.management import call_command

    django.setup()
    # Celery's loader may have put the working directory first on sys.path.
    while str(ROOT) in sys.path:
        sys.path.remove(str(ROOT))
    sys.path.insert(0, str(ROOT))
    import django_outbox

    if not Path(django_outbox.__file__).is_relative_to(ROOT):
        raise RuntimeError(f"django_outbox imported from {django_outbox.__file__}, not {ROOT}")
    call_command("migrate", verbosity=0, interactive=False)


@dataclass(frozen=True)
class Tables:
    """Where a run's rows go: how its tables are made ready, and the last delivery id
    of the rows already there (0: the run starts on empty tables)."""

    reset: Callable[[Env], None]
    after: int = 0


def reset_state(env: Env) -> None:
    """Empty the outbox tables and the bench Redis DB (broker queues, cache, breakers).

    The history is named: its link to the deliveries has no database constraint
    (migration 0012), so ``CASCADE`` does not reach it."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE django_outbox_attempt, django_outbox_delivery, django_outbox_message "
            "RESTART IDENTITY CASCADE"
        )
    reset_services(env)


#: Emptied tables: what every scenario but ``large-table`` runs on.
EMPTY = Tables(reset_state)


def reset_services(env: Env) -> None:
    """Empty the bench Redis DB (broker queues, cache, breakers) and the RabbitMQ lanes,
    and forget this process's signature schemes: what a run starts without."""
    import redis

    from django_outbox.signing.schemes import forget_local

    redis.Redis.from_url(env.redis_url).flushdb()
    purge_rabbitmq(env.broker_url)
    forget_local()


def broker_connection(broker_url: str) -> Any:
    """A kombu connection to ``broker_url`` with the README's transport options for it."""
    from kombu import Connection

    options = {"confirm_publish": True} if broker_url.startswith("amqp") else {}
    return Connection(broker_url, transport_options=options)


def purge_rabbitmq(broker_url: str) -> None:
    """Empty the lanes when ``broker_url`` is RabbitMQ's (Redis's are flushed with DB 9)."""
    if not broker_url.startswith("amqp"):
        return
    with broker_connection(broker_url) as connection:
        for lane in ("outbox.priority", "outbox", "outbox.low"):
            channel = connection.channel()
            # A lane never declared closes the channel: nothing to purge there.
            with contextlib.suppress(Exception):
                channel.queue_purge(lane)
            with contextlib.suppress(Exception):
                channel.close()


def state_counts(after: int = 0) -> dict[str, int]:
    """How many deliveries with ids above ``after`` are in each state (one query)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT state, count(*) FROM django_outbox_delivery WHERE id > %s GROUP BY state",
            [after],
        )
        return {state: count for state, count in cursor.fetchall()}


def last_finished(after: int = 0) -> float | None:
    """Unix time of the latest ``finished_at`` among the deliveries with ids above
    ``after``, if any."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT max(finished_at) FROM django_outbox_delivery WHERE id > %s", [after])
        (value,) = cursor.fetchone()
    return None if value is None else float(value.timestamp())


FINAL = ("delivered", "refused", "skipped", "failed")


def wait_settled(total: int, timeout: float, poll: float = 0.25, after: int = 0) -> dict[str, Any]:
    """Poll the database until ``total`` deliveries (of those with ids above ``after``)
    are final or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    counts: dict[str, int] = {}
    while time.monotonic() < deadline:
        counts = state_counts(after)
        if sum(counts.get(s, 0) for s in FINAL) >= total:
            break
        time.sleep(poll)
    done = sum(counts.get(s, 0) for s in FINAL)
    return {"counts": counts, "complete": done >= total, "last_finished": last_finished(after)}


def snapshot() -> tuple[Path, str]:
    """Copy the code under test to ``RUN_DIR/code-<time>``; (its path, a description).

    The description names the commit and, when ``django_outbox/`` differs from it, a
    short hash of the uncommitted diff, so that results say what they measured.
    """
    import hashlib
    import shutil

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, cwd=REPO
        ).stdout.strip()

    for old in sorted(RUN_DIR.glob("code-*"))[:-2]:  # keep the last two
        shutil.rmtree(old, ignore_errors=True)
    target = RUN_DIR / f"code-{time.strftime('%Y%m%d-%H%M%S')}"
    target.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "results", "*.pyc")
    for name in ("django_outbox", "testproject", "bench"):
        shutil.copytree(REPO / name, target / name, ignore=ignore)
    diff = git("diff", "HEAD", "--", "django_outbox")
    described = git("rev-parse", "--short", "HEAD")
    if diff:
        described += f" + uncommitted changes (diff {hashlib.sha1(diff.encode()).hexdigest()[:8]})"
    return target, described


def log(message: str) -> None:
    """Progress on stderr."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
