"""``celery worker`` processes on the test database, started and stopped by the tests.

A :class:`Worker` is one ``celery -A testproject worker`` subprocess with the
README's queues and settings of its own.  A :class:`WorkerFactory` starts them
and stops every one it started; it also keeps the shared worker that most
integration tests use, which a test that needs the queues to itself stops
(:meth:`WorkerFactory.stop_shared`) and the next test that asks for it starts
again.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings

from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
_NODES = itertools.count(1)

#: Worker settings: short retries and leases so that tests finish quickly.
WORKER_SETTINGS: dict[str, Any] = {
    "OUTBOX_RETRY_BASE": 0.5,
    "OUTBOX_RETRY_CAP": 2.0,
    "OUTBOX_LEASE_SECONDS": 30,
    "OUTBOX_TOTAL_TIMEOUT": 5,
    "OUTBOX_CONCURRENCY": 32,
    "OUTBOX_PER_HOST": 4,
    "OUTBOX_STOP_TIMEOUT": 3,
    "OUTBOX_SENDER_GONE_STATUSES": [401],
    "OUTBOX_HOSTS_REFRESH": 0,
    "DEMO_LOG_SIGNALS": True,
}


def postgres() -> bool:
    """Whether the tests run on PostgreSQL."""
    return str(settings.DATABASES["default"]["ENGINE"]).endswith("postgresql")


def rabbitmq() -> bool:
    """Whether the tests' Celery broker is RabbitMQ (``OUTBOX_BROKER_URL=amqp://...``)."""
    return str(settings.CELERY_BROKER_URL).startswith(("amqp://", "amqps://", "pyamqp://"))


def worker_env(extra: dict[str, Any] | None = None) -> dict[str, str]:
    """The environment of a worker process using this session's test database."""
    env = dict(os.environ)
    db = settings.DATABASES["default"]
    if postgres():
        env["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    else:
        env.pop("DATABASE_URL", None)
        env["OUTBOX_SQLITE"] = str(db["NAME"])
    env["OUTBOX_SETTINGS_JSON"] = json.dumps({**WORKER_SETTINGS, **(extra or {})})
    env["PYTHONPATH"] = str(ROOT)
    return env


class Worker:
    """A ``celery worker`` subprocess with the README's queues; :meth:`start` runs it."""

    def __init__(self, extra: dict[str, Any] | None = None, concurrency: int = 2) -> None:
        self.extra = dict(extra or {})
        self.concurrency = concurrency
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None

    @property
    def pid(self) -> int:
        """The main process's id (the worker must have been started)."""
        assert self.process is not None, "the worker was never started"
        return self.process.pid

    def running(self) -> bool:
        """Whether the worker's main process runs."""
        return self.process is not None and self.process.poll() is None

    def start(self) -> Worker:
        """Start a new process (and log) and wait until Celery says it is ready."""
        assert not self.running(), "already running"
        log = Path(settings.RUN_DIR) / f"worker-{os.getpid()}-{time.monotonic_ns()}.log"
        self.log_path = log
        with log.open("w") as output:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "testproject",
                    "worker",
                    "-Q",
                    "outbox.priority,outbox,outbox.low",
                    "-c",
                    str(self.concurrency),
                    # A node name of its own: on RabbitMQ two workers of one name fight
                    # over one exclusive remote-control queue and the second dies.
                    "-n",
                    f"test{os.getpid()}-{next(_NODES)}@%h",
                    "--loglevel=INFO",
                    "--without-heartbeat",
                    "--without-mingle",
                    "--without-gossip",
                ],
                cwd=ROOT,
                env=worker_env(self.extra),
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process = self.process
        wait_for(lambda: b"ready." in log.read_bytes() or process.poll() is not None, 60)
        if process.poll() is not None:
            raise RuntimeError(f"the worker did not start:\n{log.read_text()}")
        return self

    def log(self) -> str:
        """What the worker wrote so far."""
        return self.log_path.read_text() if self.log_path is not None else ""

    def stop(self) -> None:
        """Warm shutdown, then a kill if it takes too long."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class WorkerFactory:
    """Starts workers, and stops every one it started when closed.

    ``shared()`` is the session's worker with :data:`WORKER_SETTINGS`, started
    on first use and again after :meth:`stop_shared`.
    """

    def __init__(self) -> None:
        self.started: list[Worker] = []
        self._shared = Worker()

    def start(self, extra: dict[str, Any] | None = None, concurrency: int = 2) -> Worker:
        """A new worker with ``extra`` settings, started and ready."""
        worker = Worker(extra, concurrency)
        self.started.append(worker)
        return worker.start()

    def shared(self) -> Worker:
        """The shared worker, started if it is not running."""
        if not self._shared.running():
            self._shared.start()
        return self._shared

    def stop_shared(self) -> None:
        """Stop the shared worker, so that a test's own workers alone take the queues."""
        self._shared.stop()

    def close(self) -> None:
        """Stop the shared worker and every worker started here."""
        for worker in [self._shared, *self.started]:
            worker.stop()
        self.started.clear()
