"""Helpers for the chaos tests: worker pools, farms that count requests, waiting.

The chaos tests run their own ``celery worker`` processes against a private broker
(tests/support/chaos_servers.py, or tests/support/rabbitmq.py), so that they can
flush it, stop it and kill workers without touching the session's worker or
anybody else's queues, on the test database, and deliver to loopback
:class:`~testproject.inbox_servers.ServerFarm` hosts that record every request.
Duplicates are counted from those records.  No beat runs and no test sweeps:
every recovery is the workers' own.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import InterfaceError, OperationalError, connection
from django.db.models import Q

from django_outbox.models import LIVE_STATES, Delivery, DeliveryState
from testproject.inbox_servers import Behaviour, ServerFarm
from tests.support.workers import Worker

#: Settings of the chaos workers (merged over ``WORKER_SETTINGS``): the package's
#: defaults (lease, redispatch, retries, timeouts, heartbeats), without the signal
#: log (fewer writes).
CHAOS_SETTINGS: dict[str, Any] = {
    "OUTBOX_LEASE_SECONDS": 300,
    "OUTBOX_TOTAL_TIMEOUT": 30,
    "OUTBOX_RETRY_BASE": 30,
    "OUTBOX_RETRY_CAP": 8 * 3600,
    "OUTBOX_STOP_TIMEOUT": 10,
    "DEMO_LOG_SIGNALS": False,
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


def wait_until(predicate: Callable[[], Any], timeout: float, every: float = 0.05) -> Any:
    """Poll ``predicate`` (database errors count as false) until true, or fail."""
    deadline = time.monotonic() + timeout
    while True:
        value = db_safe(predicate)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s; deliveries: {db_safe(states)}")
        time.sleep(every)


def none_live(expected: int) -> bool:
    """Whether ``expected`` deliveries exist and none is live."""
    return (
        Delivery.objects.count() >= expected
        and not Delivery.objects.filter(state__in=LIVE_STATES).exists()
    )


def drive(expected: int, timeout: float) -> float:
    """Wait until ``expected`` deliveries exist and none is live, with nothing but the
    workers to move them (no sweep, no beat); returns the seconds it took."""
    started = time.monotonic()
    wait_until(lambda: none_live(expected), timeout, every=0.25)
    return round(time.monotonic() - started, 1)


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

    def counts(self, accepted_only: bool = False) -> Counter[str]:
        """Requests received per inbox URL (only those answered 2xx, if asked)."""
        return Counter(
            s.url(r.path)
            for s in self.servers
            for r in s.requests()
            if not accepted_only or 200 <= r.status < 300
        )

    def requests(self) -> int:
        return sum(s.request_count for s in self.servers)

    def tally(self, inboxes: Sequence[str], accepted_only: bool = False) -> Tally:
        """What ``inboxes`` received; with ``accepted_only``, counting only the requests
        answered 2xx (hosts that refuse a first try on purpose)."""
        counts = self.counts(accepted_only)
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


def report(name: str, **counts: Any) -> None:
    """Print one line of measurements (shown with ``pytest -s`` and in the -rA summary)."""
    print(f"[chaos] {name}: " + ", ".join(f"{k}={v}" for k, v in counts.items()), flush=True)
