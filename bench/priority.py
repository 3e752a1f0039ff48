"""Priority: a one-inbox send issued while a 30,000-inbox fan-out is being delivered.

One ``send`` to 30,000 inboxes (200 hosts answering 202 at once, so the worker is
CPU-bound, the hardest case), then 50 one-inbox sends to a
separate recording inbox (its own process), one at a time, 0.1 s apart, starting once
the worker has expanded the fan-out (all its deliveries are rows and Celery messages).  Latency =
the inbox's ``time.time()`` when it read the request minus ``time.time()`` just
before ``send``.  The bulk deliveries still waiting (not final) are counted before
each send, to show that the fan-out really was in the way.

A control round (a third of the fan-out, one send, so that it ends in reasonable
time) starts the worker with the queues in the other order
(``-Q outbox,outbox.priority``): with kombu's ``queue_order_strategy=priority`` the
first queue named is drained first, so the priority send's Celery message waits
behind the fan-out's.  Since priority-lane deliveries run on a loop of their own and a
task waiting for room takes due priority deliveries from the database every 50 ms,
the send usually arrives soon even then: the round shows how much the queue order
still matters, not a failure.

A last round tries the layout recommended for large servers: the bulk worker consumes
``outbox`` only and a second, one-process worker consumes ``outbox.priority``.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from bench.common import ACTOR, FINAL, README_QUEUES, Env, activity, log, reset_state, state_counts
from bench.figures import percentile, summary, wait_quiet
from bench.processes import Farm, RecordingInbox, Worker

HOSTS = 200


def _wait_expanded(message_id: int, timeout: float) -> float | None:
    """Wait until the worker has written (and published) every delivery of the fan-out.

    Until then the ``outbox`` queue can run dry between two slices of the expansion,
    and a priority message would be served in the gap whatever the queue order.
    Returns the seconds waited, None if ``timeout`` passed.
    """
    from django_outbox.models import PendingInboxes

    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if not PendingInboxes.objects.filter(message_id=message_id).exists():
            return time.monotonic() - started
        time.sleep(0.1)
    return None


def one_round(
    env: Env,
    farm: Farm,
    inbox: RecordingInbox,
    bulk: int,
    sends: int,
    gap: float,
    queues: str,
    timeout: float,
    dedicated: bool = False,
) -> dict[str, Any]:
    """Start a worker, launch the fan-out, time ``sends`` one-inbox sends during it.

    ``dedicated`` also starts a second worker, ``-Q outbox.priority -c 1``, the layout
    recommended for a large server.
    """
    from django_outbox import outbox

    reset_state(env)
    latencies: list[float] = []
    backlog: list[int] = []
    lost = 0
    extra = Worker(env, queues="outbox.priority", concurrency=1) if dedicated else None
    with Worker(env, queues=queues) as worker, extra or contextlib.nullcontext():
        busy = wait_quiet()
        message = outbox.send(ACTOR, activity(0), farm.inboxes(bulk // HOSTS))
        assert message is not None
        expanded = _wait_expanded(message.pk, 120)
        stamp = time.time_ns()
        for i in range(sends):
            counts = state_counts()
            backlog.append(bulk - sum(counts.get(s, 0) for s in FINAL))
            path = f"/inbox/p{stamp}-{i}"
            t0 = time.time()
            outbox.send(ACTOR, activity(10_000 + i), [f"{inbox.url}/p{stamp}-{i}"])
            received = inbox.wait_for(path, timeout)
            if received is None:
                lost += 1
                log(f"priority send {i} not received within {timeout}s")
            else:
                latencies.append(received - t0)
            time.sleep(gap)
        peak = worker.peak_rss_mb()
    return {
        "queues": queues + (" + a second worker -Q outbox.priority -c 1" if dedicated else ""),
        "latencies_s": latencies,
        "not_received": lost,
        "bulk_waiting_at_send": backlog,
        "p50_s": percentile(latencies, 50) if latencies else None,
        "p99_s": percentile(latencies, 99) if latencies else None,
        "max_s": max(latencies) if latencies else None,
        "min_bulk_waiting": min(backlog) if backlog else 0,
        "expanded_after_s": expanded,
        "worker_peak_rss_mb": peak,
        "busy_before": busy,
    }


def run(env: Env, quick: bool) -> dict[str, Any]:
    """Rounds with the README's queue order, and one control round reversed."""
    bulk = 10_000 if quick else 30_000
    sends = 10 if quick else 50
    rounds = 1 if quick else 2
    out: dict[str, Any] = {"bulk": bulk, "sends": sends, "rounds": []}
    with Farm(env, HOSTS) as farm, RecordingInbox(env) as inbox:
        for i in range(rounds):
            figures = one_round(env, farm, inbox, bulk, sends, 0.1, README_QUEUES, 30)
            log(
                f"priority round {i + 1}/{rounds}: p50 {figures['p50_s']:.3f}s p99 "
                f"{figures['p99_s']:.3f}s, bulk waiting >= {figures['min_bulk_waiting']}"
            )
            out["rounds"].append(figures)
        layout = one_round(env, farm, inbox, bulk, sends, 0.1, "outbox", 30, dedicated=True)
        log(
            f"priority, dedicated priority worker: p50 {layout['p50_s']:.3f}s "
            f"p99 {layout['p99_s']:.3f}s, bulk waiting >= {layout['min_bulk_waiting']}"
        )
        out["dedicated"] = layout
        control = one_round(env, farm, inbox, bulk // 3, 1, 0.0, "outbox,outbox.priority", 120)
        control["bulk"] = bulk // 3
        log(f"priority control (reversed -Q): {control['latencies_s']}")
        out["control"] = control
    pooled = [x for r in out["rounds"] for x in r["latencies_s"]]
    out["pooled"] = {
        "n": len(pooled),
        "p50_s": percentile(pooled, 50) if pooled else None,
        "p99_s": percentile(pooled, 99) if pooled else None,
        "max_s": max(pooled) if pooled else None,
    }
    out["p50_s"] = summary([r["p50_s"] for r in out["rounds"] if r["p50_s"] is not None])
    out["p99_s"] = summary([r["p99_s"] for r in out["rounds"] if r["p99_s"] is not None])
    return out
