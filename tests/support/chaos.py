"""Helpers for the chaos tests: a private broker, worker pools, farms that count requests.

The chaos tests run their own ``celery worker`` processes against a private
``redis-server`` (so that they can flush it, stop it and kill workers without
touching the session's worker or anybody else's queues), on the test
database, and deliver to loopback :class:`~testproject.inbox_servers.ServerFarm`
hosts that record every request.  Duplicates are counted from those records.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import os
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import InterfaceError, OperationalError, connection
from django.db.models import Q

from django_outbox.models import LIVE_STATES, Delivery, DeliveryState
from django_outbox.sweeper import sweep
from testproject.inbox_servers import Behaviour, ServerFarm
from tests.support.network import free_port
from tests.support.workers import Worker

#: Settings of the chaos workers (merged over ``WORKER_SETTINGS``): short leases so that
#: a killed worker's deliveries are reclaimed within seconds, retries within a second, no
#: signal log (fewer writes).  A worker starts a claimed delivery only in the first half
#: of such a short lease (worker.run_deliveries), and a loopback answer takes milliseconds,
#: so a live worker never outlasts its lease; the total timeout is long enough that no
#: answer times out under load (a timeout after the inbox got the request would be a
#: duplicate that no fault caused).
TOTAL_TIMEOUT = 3
LEASE = 8
CHAOS_SETTINGS: dict[str, Any] = {
    "OUTBOX_LEASE_SECONDS": LEASE,
    "OUTBOX_TOTAL_TIMEOUT": TOTAL_TIMEOUT,
    "OUTBOX_CONNECT_TIMEOUT": TOTAL_TIMEOUT,
    "OUTBOX_REDISPATCH_AFTER": 3,
    "OUTBOX_RETRY_BASE": 0.2,
    "OUTBOX_RETRY_CAP": 1.0,
    "OUTBOX_CONCURRENCY": 32,
    "OUTBOX_PER_HOST": 4,
    "OUTBOX_STOP_TIMEOUT": 3,
    "DEMO_LOG_SIGNALS": False,
}

#: The same, for the sweeper and ``send`` in the test process (``override_settings``).
IN_PROCESS_SETTINGS: dict[str, Any] = {
    key: CHAOS_SETTINGS[key]
    for key in (
        "OUTBOX_LEASE_SECONDS",
        "OUTBOX_REDISPATCH_AFTER",
        "OUTBOX_RETRY_BASE",
        "OUTBOX_RETRY_CAP",
    )
}

NOTE = {
    "@context": "https://www.w3.org/ns/activitystreams",
    "type": "Create",
    "id": "https://demo.example/notes/chaos",
}

DB_ERRORS = (OperationalError, InterfaceError)


# ----------------------------------------------------------------- processes ---
def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (``pgrep -P`` without pgrep)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[1]) == pid and fields[0] not in ("Z", "X"):
                found.append(int(entry.name))
    return sorted(found)


def group(pgid: int) -> list[int]:
    """Live processes in process group ``pgid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[3]) == pgid and fields[0] not in ("Z", "X"):
                found.append(int(entry.name))
    return found


def kill(pids: Iterable[int], sig: int = signal.SIGKILL, timeout: float = 10.0) -> None:
    """Send ``sig`` to each of ``pids`` and, for SIGKILL, wait until they are gone."""
    pids = list(pids)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    if sig == signal.SIGKILL:
        deadline = time.monotonic() + timeout
        while any(alive(pid) for pid in pids):
            if time.monotonic() > deadline:
                raise AssertionError(f"{pids} still alive {timeout}s after SIGKILL")
            time.sleep(0.01)


# ------------------------------------------------------------------- database ---
def db_safe(function: Callable[[], Any], default: Any = None) -> Any:
    """``function()``, or ``default`` when the database is away (the connection is dropped)."""
    try:
        return function()
    except DB_ERRORS:
        with contextlib.suppress(Exception):
            connection.close()
        return default


def claimed_by(pids: Iterable[int]) -> Q:
    """Rows claimed by any of ``pids`` (claim tokens are ``host:pid:n``)."""
    clauses = [Q(claimed_by__contains=f":{pid}:") for pid in pids]
    return functools.reduce(operator.or_, clauses, Q(pk__in=[]))


def in_flight(pids: Iterable[int] | None = None) -> int:
    """Deliveries in ``sending`` (claimed by one of ``pids`` if given)."""
    rows = Delivery.objects.filter(state=DeliveryState.SENDING)
    if pids is not None:
        rows = rows.filter(claimed_by(pids))
    return rows.count()


def delivered() -> int:
    return Delivery.objects.filter(state=DeliveryState.DELIVERED).count()


def states() -> Counter[str]:
    return Counter(Delivery.objects.values_list("state", flat=True))


def wait_until(
    predicate: Callable[[], Any], timeout: float, every: float = 0.05, sweeping: bool = True
) -> Any:
    """Poll ``predicate`` (database errors count as false) until true, or fail; meanwhile
    run the sweeper once a second, as beat would, unless ``sweeping`` is false."""
    deadline = time.monotonic() + timeout
    next_sweep = time.monotonic() + 1.0
    while True:
        value = db_safe(predicate)
        if value:
            return value
        now = time.monotonic()
        if now > deadline:
            raise AssertionError(f"timed out after {timeout}s; deliveries: {db_safe(states)}")
        if sweeping and now >= next_sweep:
            db_safe(sweep)
            next_sweep = now + 1.0
        time.sleep(every)


def drive(expected: int, timeout: float, every: float = 1.0) -> int:
    """Run the sweeper every ``every`` seconds until ``expected`` rows exist and none is
    live; returns the number of sweeps.  Tolerates the database being away."""
    deadline = time.monotonic() + timeout
    sweeps = 0
    while True:
        done = db_safe(
            lambda: (
                Delivery.objects.count() >= expected
                and not Delivery.objects.filter(state__in=LIVE_STATES).exists()
            ),
            False,
        )
        if done:
            return sweeps
        if time.monotonic() > deadline:
            raise AssertionError(
                f"not settled after {timeout}s ({sweeps} sweeps); deliveries: {db_safe(states)}"
            )
        db_safe(sweep)
        sweeps += 1
        time.sleep(every)


# ---------------------------------------------------------------------- farm ---
@dataclass(frozen=True)
class Tally:
    """What the inboxes received: requests, inboxes reached, duplicates, missing."""

    requests: int
    reached: int
    duplicates: int
    missing: int

    def __str__(self) -> str:
        return (
            f"{self.requests} requests to {self.reached} inboxes: "
            f"{self.duplicates} duplicates, {self.missing} inboxes never reached"
        )


class Farm:
    """``hosts`` loopback inbox hosts answering 202 at once, with many inbox paths each."""

    def __init__(self, hosts: int = 20, behaviour: Behaviour | None = None) -> None:
        self.farm = ServerFarm(hosts, behaviour=behaviour or Behaviour())

    def __enter__(self) -> Farm:
        self.farm.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.farm.stop()

    @property
    def servers(self) -> list[Any]:
        return self.farm.servers

    def inboxes(self, count: int) -> list[str]:
        """``count`` distinct inbox URLs, spread over the hosts round-robin."""
        per_host = -(-count // len(self.servers))
        urls = [s.url(f"/users/{n}/inbox") for n in range(per_host) for s in self.servers]
        return urls[:count]

    def counts(self) -> Counter[str]:
        """Requests received per inbox URL."""
        return Counter(s.url(r.path) for s in self.servers for r in s.requests())

    def requests(self) -> int:
        return sum(s.request_count for s in self.servers)

    def tally(self, inboxes: Sequence[str]) -> Tally:
        counts = self.counts()
        return Tally(
            requests=sum(counts.values()),
            reached=len(counts),
            duplicates=sum(n - 1 for n in counts.values()),
            missing=sum(1 for inbox in set(inboxes) if not counts[inbox]),
        )


# ------------------------------------------------------------------- workers ---
class Workers:
    """Chaos workers for one test, on the private broker; all stopped by :meth:`close`."""

    def __init__(self, broker_url: str) -> None:
        self.broker_url = broker_url
        self.started: list[Worker] = []

    def start(
        self, count: int = 1, extra: dict[str, Any] | None = None, concurrency: int = 2
    ) -> list[Worker]:
        """Start ``count`` workers at once (in parallel) and wait until each is ready."""
        merged = {**CHAOS_SETTINGS, "CELERY_BROKER_URL": self.broker_url, **(extra or {})}
        new = [Worker(merged, concurrency) for _ in range(count)]
        self.started.extend(new)  # before starting: close() stops those that did start
        with ThreadPoolExecutor(count) as pool:
            list(pool.map(Worker.start, new))
        return new

    def close(self) -> None:
        """Warm-stop every worker still running; SIGKILL whatever is left of their groups."""
        processes = [w.process for w in self.started if w.process is not None]
        running = [process for process in processes if process.poll() is None]
        for process in running:
            process.terminate()
        deadline = time.monotonic() + 20
        for process in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.1, deadline - time.monotonic()))
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
            # Each worker leads its own session: what is left in its group is ours.
            kill(group(process.pid))


def pool_pids(workers: Iterable[Worker]) -> list[int]:
    """The pool (child) processes of ``workers``."""
    return [pid for worker in workers for pid in children(worker.pid)]


def busiest(pids: Sequence[int]) -> int:
    """The one of ``pids`` holding the most deliveries in ``sending`` (first if none)."""
    return max(pids, key=lambda pid: (in_flight([pid]), -pids.index(pid)))


# -------------------------------------------------------------------- broker ---
class RedisServer:
    """A private ``redis-server`` (no persistence) that tests may flush, stop and restart."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        self.binary = binary
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self) -> RedisServer:
        log = (self.directory / "redis.log").open("ab")
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
                "--maxclients",
                "1000",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(Exception):
                if self.client().ping():
                    return self
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server (SIGTERM; nothing is saved)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    # The same faults on either broker (tests/support/rabbitmq.py has RabbitMQ's).
    def running(self) -> bool:
        """Whether the server runs."""
        return self.process is not None and self.process.poll() is None

    def flush(self) -> None:
        """``FLUSHALL``: every message, queued, unacknowledged or waiting, is gone."""
        self.client().flushall()

    def clear(self, queues: Iterable[str]) -> None:
        """Empty the broker between tests (``FLUSHALL``)."""
        self.flush()

    def queued(self, queues: Iterable[str]) -> int:
        """Messages waiting in ``queues`` (not those a worker took)."""
        client = self.client()
        return sum(int(client.llen(queue)) for queue in queues)

    def close(self) -> None:
        """Stop the server at the end of the session."""
        self.stop()


@contextlib.contextmanager
def publishing_to(url: str) -> Iterator[None]:
    """Make this process's Celery app publish to the broker at ``url`` meanwhile."""
    from django_outbox.tasks import deliver

    app = deliver.app
    amqp = app.amqp
    saved = (app.conf.get("broker_write_url"), app._pool, amqp._producer_pool)
    app.conf["broker_write_url"] = url
    app._pool = None
    amqp._producer_pool = None
    try:
        yield
    finally:
        # kombu keeps one pool per broker URL for the whole process: leave it open.
        app.conf["broker_write_url"], app._pool, amqp._producer_pool = saved


# ---------------------------------------------------------------- postgresql ---
def pg_ctl() -> str | None:
    """The newest ``pg_ctl`` binary on this machine."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    return str(found[-1]) if found else shutil.which("pg_ctl")


def restart_postgres() -> float:
    """Restart the test database's server (``pg_ctl restart -m fast``); returns seconds taken.

    The data directory is asked of the server itself; the server runs as
    ``postgres`` when we are root (as ``scripts/services`` starts it).
    """
    with connection.cursor() as cursor:
        cursor.execute("SHOW data_directory")
        data = cursor.fetchone()[0]
    connection.close()
    binary = pg_ctl()
    assert binary, "pg_ctl not found"
    log = Path(data).parent / "pg.log"  # scripts/services keeps its log beside the data
    command = [binary, "-D", data, "-m", "fast", "-w", "-t", "60", "restart"]
    if log.exists():
        command[1:1] = ["-l", str(log)]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    started = time.monotonic()
    subprocess.run(
        command,
        cwd="/",
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=90,
    )
    return time.monotonic() - started


def report(name: str, **counts: Any) -> None:
    """Print one line of measurements (shown with ``pytest -s`` and in the -rA summary)."""
    print(f"[chaos] {name}: " + ", ".join(f"{k}={v}" for k, v in counts.items()), flush=True)
