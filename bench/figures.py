"""Figures: the machine a run is on, how busy it is, and summaries of repeated runs."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import REPO, log


def summary(values: Sequence[float]) -> dict[str, Any]:
    """Median, min and max of ``values`` (and the values)."""
    if not values:
        return {"median": None, "min": None, "max": None, "n": 0, "values": []}
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
        "values": list(values),
    }


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by nearest rank."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / tick, sum(fields[:8]) / tick


#: Longest wait for a quiet machine before each timed run (``run.py --quiet-wait``).
QUIET_WAIT = {"seconds": 120.0}


def wait_quiet(limit: float = 0.3, max_wait: float | None = None) -> float:
    """Wait (at most ``max_wait`` s) until the machine is under ``limit`` busy over 1 s.

    The 2 cores are shared with other people's test runs; starting a timed run while
    they are busy measures them, not us.  Returns the last busy fraction seen (what
    competed at the start of the run, recorded with the figures).
    """
    max_wait = QUIET_WAIT["seconds"] if max_wait is None else max_wait
    deadline = time.monotonic() + max_wait
    while True:
        busy0, total0 = machine_busy()
        time.sleep(1.0)
        busy1, total1 = machine_busy()
        busy = (busy1 - busy0) / max(1e-9, total1 - total0)
        if busy <= limit or time.monotonic() > deadline:
            if busy > limit:
                log(f"machine still {busy:.0%} busy after {max_wait:.0f}s; running anyway")
            return busy
        time.sleep(2.0)


def load_average() -> float:
    """The one-minute load average (2 cores: above 2 means something else competes)."""
    return os.getloadavg()[0]


def machine() -> dict[str, Any]:
    """Hardware and software versions, for the report."""
    import celery
    import django
    import kombu
    import redis
    import requests
    from django.db import connection

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem_kb = status_kb_meminfo("MemTotal")
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        pg_version = cursor.fetchone()[0]
    redis_version = redis.Redis.from_url(os.environ["REDIS_URL"]).info()["redis_version"]
    commit = (
        os.environ.get("BENCH_COMMIT")
        or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
        ).stdout.strip()
    )
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "ram_gb": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "celery": celery.__version__,
        "kombu": kombu.__version__,
        "django": django.__version__,
        "requests": requests.__version__,
        "postgresql": pg_version,
        "redis": redis_version,
        "commit": commit,
    }


def status_kb_meminfo(name: str) -> int:
    """A ``/proc/meminfo`` field in kB."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    return 0


def save_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")
