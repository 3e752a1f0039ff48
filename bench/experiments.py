"""What-if experiments (``run.py --only experiments``; not in the default full run).

Each variant changes one setting of the worker and measures how fast a worker drains 20,000
pre-queued deliveries to 200 instant hosts, signed with Ed25519 so that the package's
own overhead, not RSA, dominates.  Reported per variant: deliveries/s, worker CPU per
delivery, and that CPU split by thread (the engine's event loop, the recorder, Celery's
main thread), from ``/proc/<pid>/task`` and thread names given by ``py-spy dump``.
The figures size the recommendations in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.common import PYTHON, Env, activity, log, reset_state, wait_settled
from bench.figures import machine_busy, wait_quiet
from bench.processes import Farm, Worker

ED_ACTOR = "https://demo.example/users/edna"
HOSTS = 200
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("as shipped", {}),
    ("breakers off (OUTBOX_BREAKER_THRESHOLD=0)", {"OUTBOX_BREAKER_THRESHOLD": 0}),
    ("OUTBOX_CONCURRENCY=64", {"OUTBOX_CONCURRENCY": 64}),
    ("OUTBOX_CONCURRENCY=16", {"OUTBOX_CONCURRENCY": 16}),
]


def thread_cpu(pids: list[int]) -> dict[str, float]:
    """CPU seconds of the workers' threads, grouped by Python thread name."""
    spy = shutil.which("py-spy") or str(Path(PYTHON).with_name("py-spy"))
    groups: collections.Counter[str] = collections.Counter()
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            dump = subprocess.run(
                [spy, "dump", "-j", "-p", str(pid)], capture_output=True, text=True, timeout=30
            ).stdout
            names = {t["os_thread_id"]: t.get("thread_name") or "?" for t in json.loads(dump)}
        except (OSError, ValueError, subprocess.SubprocessError):
            names = {}
        for task in Path(f"/proc/{pid}/task").iterdir():
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            name = re.sub(r"-\d+$", "-N", names.get(int(task.name), "other"))
            groups[name] += (int(fields[11]) + int(fields[12])) / tick
    return dict(groups)


def one(env: Env, farm: Farm, per_host: int, settings: dict[str, Any]) -> dict:
    """Drain ``per_host`` x 200 pre-queued deliveries with one variant of the worker."""
    from django_outbox import outbox
    from django_outbox.sending.fanout import expand

    reset_state(env)
    message = outbox.send(ED_ACTOR, activity(0), farm.inboxes(per_host))
    assert message is not None
    expand(message.pk)
    total = per_host * HOSTS
    busy = wait_quiet()
    with Worker(env, settings) as worker:
        t0, (b0, all0) = time.time(), machine_busy()
        result = wait_settled(total, 300)
        b1, all1 = machine_busy()
        delivered = result["counts"].get("delivered", 0)
        cpu = worker.cpu_seconds()
        threads = thread_cpu(worker.pids()[1:])
    elapsed = (result["last_finished"] or time.time()) - t0
    return {
        "rate": delivered / elapsed if elapsed > 0 else 0.0,
        "delivered": delivered,
        "worker_cpu_ms_per_delivery": 1000 * cpu / max(1, delivered),
        "threads_ms_per_delivery": {
            k: 1000 * v / max(1, delivered) for k, v in sorted(threads.items())
        },
        "machine_busy_fraction": (b1 - b0) / max(1e-9, all1 - all0),
        "busy_before": busy,
    }


def run(env: Env, quick: bool) -> dict[str, Any]:
    """Every variant once (twice for the first, as a check of the noise)."""
    per_host = 20 if quick else 100
    out: dict[str, Any] = {"deliveries": per_host * HOSTS, "variants": {}}
    with Farm(env, HOSTS) as farm:
        for i, (label, settings) in enumerate(VARIANTS):
            runs = [one(env, farm, per_host, settings) for _ in range(2 if i == 0 else 1)]
            for figures in runs:
                log(
                    f"{label}: {figures['rate']:.0f}/s, worker "
                    f"{figures['worker_cpu_ms_per_delivery']:.2f} ms CPU/delivery "
                    f"{ {k: round(v, 2) for k, v in figures['threads_ms_per_delivery'].items()} }"
                )
            out["variants"][label] = {"settings": settings, "runs": runs}
    reset_state(env)
    return out
