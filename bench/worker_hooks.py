"""Imported by benchmark workers (``-I bench.worker_hooks``): tells the bench when ready.

The benchmarks run workers at ``--loglevel=WARNING`` (no per-task log lines to pay
for), so the "ready." banner is not printed; this touches ``$BENCH_READY_FILE``
from Celery's ``worker_ready`` signal instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from celery.signals import worker_ready


@worker_ready.connect
def _ready(**kwargs: Any) -> None:
    path = os.environ.get("BENCH_READY_FILE")
    if path:
        Path(path).touch()
