"""The demo's Celery worker: ``celery -A testproject worker -Q outbox.priority,outbox`` in
a process group of its own, with the demo's settings, stopped warm (SIGTERM) or killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

#: Settings of the worker (and of this process): quick retries so that the demo ends.
DEMO_SETTINGS: dict[str, Any] = {
    "OUTBOX_RETRY_BASE": 1.0,
    "OUTBOX_RETRY_CAP": 2.0,
    "OUTBOX_MAX_ATTEMPTS": 4,
    "OUTBOX_CONNECT_TIMEOUT": 1.0,
    "OUTBOX_TOTAL_TIMEOUT": 3.0,
    "OUTBOX_STOP_TIMEOUT": 3.0,
    "OUTBOX_BREAKER_COOL_OFF": 3.0,
}
QUEUES = "outbox.priority,outbox"
POLL = float(os.environ.get("DEMO_POLL", "0.1"))
QUIET = ("--without-heartbeat", "--without-mingle", "--without-gossip")


def _die_with_parent() -> None:
    """In the worker, before exec: get SIGTERM when the demo process dies (Linux)."""
    with suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Worker:
    """``celery -A testproject worker`` in a process group of its own."""

    def __init__(self, run_dir: Path, concurrency: int, extra: dict[str, Any]) -> None:
        self.log = run_dir / "worker.log"
        env = dict(os.environ)
        env.update(
            OUTBOX_RUN_DIR=str(run_dir),
            OUTBOX_SETTINGS_JSON=json.dumps({**DEMO_SETTINGS, **broker_overrides(), **extra}),
            DJANGO_SETTINGS_MODULE="testproject.settings",
            PYTHONPATH=os.pathsep.join(
                p for p in (str(settings.BASE_DIR), env.get("PYTHONPATH", "")) if p
            ),
        )
        if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
            env["OUTBOX_SQLITE"] = str(settings.DATABASES["default"]["NAME"])
        self.command = [
            "celery",
            "-A",
            "testproject",
            "worker",
            "-Q",
            QUEUES,
            "-c",
            str(concurrency),
        ]
        self.process = subprocess.Popen(
            [sys.executable, "-m", *self.command, "--loglevel=INFO", *QUIET],
            cwd=os.getcwd(),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if b" ready." in self.log.read_bytes():
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        tail = self.log.read_text(errors="replace")[-3000:]
        raise CommandError(f"the worker did not start (log {self.log}):\n{tail}")

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 30.0) -> int | None:
        """Warm shutdown (SIGTERM), then SIGKILL to its process group if it hangs."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        return self.process.returncode


def broker_overrides() -> dict[str, Any]:
    """The filesystem transport polls its folder once a second by default, and a
    worker with all its prefetch slots taken waits a whole poll for the next message:
    ask it to look more often."""
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {})
    if not settings.CELERY_BROKER_URL.startswith("filesystem:") or "polling_interval" in options:
        return {}
    return {"CELERY_BROKER_TRANSPORT_OPTIONS": {**options, "polling_interval": POLL}}
