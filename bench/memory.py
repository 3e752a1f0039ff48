"""Memory: the worker's peak RSS with 10,000 and with 100,000 deliveries queued.

The deliveries (one fan-out to 200 hosts answering 202 at once) are written and
published before the worker starts (``fanout.expand`` run in this process), so the
whole backlog sits in Redis and PostgreSQL when it starts.  The worker (README
command, 2 prefork processes) then makes the same 10,000 deliveries in both runs (all
of the first backlog, a tenth of the second; draining 100,000 would take minutes on
this machine), and is stopped; RSS is sampled every 0.5 s.
Peak = sum of ``VmHWM`` over the main process and its pool children at the end (pages
shared after fork count once per process, so this over-counts; ``Pss`` is given too).
Each size runs once (the 100,000 run takes over a minute).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.common import ACTOR, FINAL, Env, activity, log, reset_state, state_counts
from bench.figures import wait_quiet
from bench.processes import Farm, Worker

HOSTS = 200
#: Deliveries made in each run: the same work whatever the queue depth.
WORK = 10_000


def pss_mb(pids: list[int]) -> float:
    """Sum of proportional set sizes (shared pages split between sharers), in MB."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def one(env: Env, farm: Farm, size: int, timeout: float) -> dict[str, Any]:
    """Queue ``size`` deliveries, then run a worker through them, sampling its memory."""
    from django_outbox import outbox
    from django_outbox.sending.fanout import expand

    reset_state(env)
    message = outbox.send(ACTOR, activity(0), farm.inboxes(size // HOSTS))
    assert message is not None
    expand(message.pk)
    busy = wait_quiet()
    samples: list[tuple[float, int, float]] = []
    with Worker(env) as worker:
        start_rss = worker.rss_mb()
        t0 = time.monotonic()
        delivered = 0
        while time.monotonic() - t0 < timeout:
            counts = state_counts()
            delivered = counts.get("delivered", 0)
            samples.append((round(time.monotonic() - t0, 2), delivered, round(worker.rss_mb(), 1)))
            if sum(counts.get(s, 0) for s in FINAL) >= min(size, WORK):
                break
            time.sleep(0.5)
        peak = worker.peak_rss_mb()
        pss = pss_mb(worker.pids())
        processes = len(worker.pids())
    at_10k = next((rss for _, done, rss in samples if done >= 10_000), None)
    return {
        "queued": size,
        "delivered": delivered,
        "complete": delivered >= min(size, WORK),
        "elapsed_s": samples[-1][0] if samples else 0.0,
        "processes": processes,
        "start_rss_mb": start_rss,
        "peak_rss_mb": peak,
        "pss_end_mb": pss,
        "rss_at_10k_delivered_mb": at_10k,
        "samples": samples,
        "busy_before": busy,
    }


def run(env: Env, quick: bool) -> dict[str, Any]:
    """The two queue depths, once each."""
    sizes = (3_000, 30_000) if quick else (10_000, 100_000)
    out: dict[str, Any] = {"sizes": {}}
    with Farm(env, HOSTS) as farm:
        for size in sizes:
            figures = one(env, farm, size, timeout=300)
            log(
                f"memory {size}: peak {figures['peak_rss_mb']:.0f} MB "
                f"(start {figures['start_rss_mb']:.0f} MB, Pss {figures['pss_end_mb']:.0f} MB), "
                f"{figures['delivered']} delivered in {figures['elapsed_s']:.0f}s"
            )
            out["sizes"][str(size)] = figures
    small, large = (out["sizes"][str(s)]["peak_rss_mb"] for s in sizes)
    out["growth_mb"] = large - small
    reset_state(env)
    return out
