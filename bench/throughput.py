"""Throughput scenarios: ``cpu-bound`` (instant 202s) and ``latency-bound`` (100 ms answers).

``cpu-bound`` signs with the demo actor's RSA-2048 key; ``cpu-bound-ed25519`` repeats it
with an Ed25519 key, to show the package's own overhead once signing is cheap.

Each run: empty tables and broker, start a fresh worker with the README's command
(``celery -A testproject worker -Q outbox.priority,outbox``, default concurrency = 2
prefork processes), call ``outbox.send`` for each activity back to back, and poll the
database until every delivery is final.  Deliveries/s = delivered rows / (latest
``finished_at`` - the time just before the first ``send``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from bench.common import ACTOR, EMPTY, Env, Tables, activity, log, wait_settled
from bench.figures import machine_busy, summary, wait_quiet
from bench.nodes import postgres_cpu, postmaster_pid, reset_statements, statement_classes
from bench.processes import Farm, Worker


@dataclass(frozen=True)
class Shape:
    """A throughput workload: ``messages`` activities, each to one inbox per host."""

    hosts: int
    delay: float
    messages: int
    repeats: int
    timeout: float
    actor: str = ACTOR

    @property
    def total(self) -> int:
        """Deliveries per run."""
        return self.hosts * self.messages


def one_run(
    env: Env,
    farm: Farm,
    shape: Shape,
    settings: dict[str, Any],
    tables: Tables = EMPTY,
    statements: bool = False,
) -> dict[str, Any]:
    """One timed run on a fresh worker; returns its figures (with the claim and record
    statement times per delivery when ``statements``, from ``pg_stat_statements``, and
    PostgreSQL's CPU per delivery)."""
    from django_outbox import outbox

    tables.reset(env)
    inboxes = farm.inboxes(1)
    with Worker(env, settings) as worker:
        busy = wait_quiet()
        if statements:
            reset_statements()
            postmaster = postmaster_pid()
            postgres_before = postgres_cpu(postmaster)
        cpu_before, (busy0, total0) = worker.cpu_seconds(), machine_busy()
        t0 = time.time()
        for n in range(shape.messages):
            outbox.send(shape.actor, activity(n), inboxes)
        sent = time.time() - t0
        result = wait_settled(shape.total, shape.timeout, after=tables.after)
        if statements:
            postgres = postgres_cpu(postmaster) - postgres_before
        busy1, total1 = machine_busy()
        cpu = worker.cpu_seconds() - cpu_before
        peak = worker.peak_rss_mb()
    delivered = result["counts"].get("delivered", 0)
    elapsed = (result["last_finished"] or time.time()) - t0
    measured = {}
    if statements:
        measured = {
            **statement_times(delivered),
            "postgres_cpu_ms": 1000 * postgres / max(1, delivered),
        }
    return {
        **measured,
        "rate": delivered / elapsed if elapsed > 0 else 0.0,
        "elapsed_s": elapsed,
        "send_calls_s": sent,
        "delivered": delivered,
        "counts": result["counts"],
        "complete": result["complete"],
        "worker_cpu_ms_per_delivery": 1000 * cpu / max(1, delivered),
        "machine_busy_fraction": (busy1 - busy0) / max(1e-9, total1 - total0),
        "worker_peak_rss_mb": peak,
        "busy_before": busy,
    }


def statement_times(delivered: int) -> dict[str, float]:
    """Execution ms per delivery of the claim, the outcome writes and the rest, since the
    last :func:`~bench.nodes.reset_statements`."""
    classes = statement_classes()
    return {f"{name}_ms": classes[name]["ms"] / max(1, delivered) for name in classes}


def run(
    env: Env, shape: Shape, settings: dict[str, Any] | None = None, label: str = ""
) -> dict[str, Any]:
    """``shape.repeats`` runs against one farm; the rate summary and every run."""
    runs = []
    with Farm(env, shape.hosts, delay=shape.delay) as farm:
        for i in range(shape.repeats):
            figures = one_run(env, farm, shape, settings or {})
            log(
                f"{label} run {i + 1}/{shape.repeats}: {figures['rate']:.0f} deliveries/s "
                f"({figures['delivered']}/{shape.total} in {figures['elapsed_s']:.1f}s, "
                f"worker {figures['worker_cpu_ms_per_delivery']:.2f} ms CPU/delivery)"
            )
            runs.append(figures)
    return {
        "shape": shape.__dict__,
        "settings": settings or {},
        "rate": summary([r["rate"] for r in runs]),
        "runs": runs,
        "farm_requests": farm.requests,
    }


ED_ACTOR = "https://demo.example/users/edna"


def cpu_shape(quick: bool) -> Shape:
    """100 activities x 200 hosts answering 202 at once: 20,000 deliveries, three runs."""
    return Shape(200, 0.0, messages=10 if quick else 100, repeats=1 if quick else 3, timeout=300)


def _latency_shape(quick: bool) -> Shape:
    """10 activities x 1,000 hosts answering after 100 ms: 10,000 deliveries, two runs."""
    return Shape(1000, 0.1, messages=2 if quick else 10, repeats=1 if quick else 2, timeout=300)


def cpu_bound(env: Env, quick: bool) -> dict[str, Any]:
    """20,000 deliveries to 200 hosts answering at once, signed with RSA-2048."""
    return run(env, cpu_shape(quick), label="cpu-bound")


def cpu_bound_ed25519(env: Env, quick: bool) -> dict[str, Any]:
    """The same signed with Ed25519 (several times cheaper than RSA-2048): two runs."""
    shape = replace(cpu_shape(quick), repeats=1 if quick else 2, actor=ED_ACTOR)
    return run(env, shape, label="cpu-bound-ed25519")


def latency_bound(env: Env, quick: bool) -> dict[str, Any]:
    """10,000 deliveries to 1,000 hosts answering after 100 ms, signed with RSA-2048."""
    return run(env, _latency_shape(quick), label="latency-bound")


def latency_bound_ed25519(env: Env, quick: bool) -> dict[str, Any]:
    """The latency-bound run signed with Ed25519, whose cheaper signing leaves more CPU."""
    return run(env, replace(_latency_shape(quick), actor=ED_ACTOR), label="latency-bound-ed25519")


#: The engine's loops on uvloop (``pip install 'django-outbox[uvloop]'``).
UVLOOP = {"OUTBOX_EVENT_LOOP": "uvloop"}


def cpu_bound_uvloop(env: Env, quick: bool) -> dict[str, Any]:
    """The cpu-bound run with the workers' engines on uvloop."""
    return run(env, cpu_shape(quick), settings=UVLOOP, label="cpu-bound-uvloop")


def latency_bound_uvloop(env: Env, quick: bool) -> dict[str, Any]:
    """The latency-bound run with the workers' engines on uvloop."""
    return run(env, _latency_shape(quick), settings=UVLOOP, label="latency-bound-uvloop")
