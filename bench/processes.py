"""Out-of-process helpers of the benchmarks: inbox farms, the recording inbox, workers.

Each runs in its own process group (``start_new_session``), is stopped with SIGTERM
and, if it does not stop in time, SIGKILL of that group (one the benchmark started).
Memory and CPU are read from ``/proc``.  Re-exported by :mod:`bench.common`.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from bench.common import BASE_WORKER_SETTINGS, LOG_DIR, PYTHON, README_QUEUES, ROOT, RUN_DIR, Env


def _read_json_line(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    """The first line of ``proc``'s stdout as JSON, waiting at most ``timeout``."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise TimeoutError(f"no output from {proc.args!r} within {timeout}s")
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"{proc.args!r} exited with {proc.wait(5)} before printing")
    return json.loads(line)  # type: ignore[no-any-return]


def _start_server(
    env: Env, module: str, args: list[str], timeout: float, stderr: Any = None
) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """Start ``python -m module args`` in its own session; it and the JSON line it prints."""
    proc = subprocess.Popen(
        [PYTHON, "-m", module, *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        cwd=ROOT,
        env=env.process_env(),
        start_new_session=True,
    )
    return proc, _read_json_line(proc, timeout)


def _stop(proc: subprocess.Popen[Any], grace: float) -> None:
    """SIGTERM ``proc``; after ``grace`` seconds SIGKILL its process group (ours)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


class Farm:
    """``python -m testproject.inbox_servers``: ``count`` loopback hosts in one process."""

    module = "testproject.inbox_servers"

    def __init__(self, env: Env, count: int, *, delay: float = 0.0, first: str = "127.0.0.2"):
        self.env, self.count, self.delay, self.first = env, count, delay, first
        self.urls: list[str] = []
        self.ready: dict[str, Any] = {}
        self.requests = 0
        self.summary: dict[str, Any] = {}
        self._log = LOG_DIR / f"farm-{count}-{time.time_ns()}.log"
        self._proc: subprocess.Popen[str] | None = None

    def args(self) -> list[str]:
        """The server module's command-line arguments."""
        count, delay = str(self.count), str(self.delay)
        return ["--count", count, "--delay", delay, "--first-address", self.first]

    def __enter__(self) -> Self:
        self._proc, self.ready = _start_server(
            self.env, self.module, self.args(), 120, stderr=self._log.open("w")
        )
        self.urls = self.ready["urls"]
        return self

    def inboxes(self, per_host: int) -> list[str]:
        """``per_host`` distinct inbox URLs on each host (``/inbox/<n>``), host-interleaved."""
        return [f"{url}/{n}" for n in range(per_host) for url in self.urls]

    def cpu_seconds(self) -> float:
        """CPU seconds the farm process has used so far."""
        return cpu_seconds(self._proc.pid) if self._proc else 0.0

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            _stop(self._proc, 15)
            lines = self._log.read_text().strip().splitlines()
            try:
                self.summary = json.loads(lines[-1]) if lines else {}
                self.requests = int(self.summary.get("requests", 0))
            except (ValueError, KeyError, AttributeError):
                self.requests = -1


class PaidFarm(Farm):
    """``python -m bench.paid_farm``: ``count`` hosts charging ``price_msat`` per message
    (``mode`` ``"per-message"``) or per token, reusable for its lifetime (``"per-token"``),
    and the fake LND that pays them (``ready["lnd_url"]``, ``ready["lnd_macaroon_hex"]``),
    each payment taking ``pay_delay`` seconds; ``summary`` has the payments the node
    made once it stopped."""

    module = "bench.paid_farm"

    def __init__(
        self,
        env: Env,
        count: int,
        *,
        price_msat: int = 1_000,
        first: str = "127.0.3.2",
        mode: str = "per-message",
        pay_delay: float = 0.0,
    ) -> None:
        super().__init__(env, count, first=first)
        self.price_msat, self.mode, self.pay_delay = price_msat, mode, pay_delay

    def args(self) -> list[str]:
        """The paid farm's command-line arguments."""
        return [
            "--count",
            str(self.count),
            "--price-msat",
            str(self.price_msat),
            "--first-address",
            self.first,
            "--mode",
            self.mode,
            "--pay-delay",
            str(self.pay_delay),
        ]


class RecordingInbox:
    """``python -m bench.recording_inbox``: one host reporting each request's receive time."""

    def __init__(self, env: Env, host: str = "127.0.1.2") -> None:
        self.env, self.host = env, host
        self.url = ""
        self._proc: subprocess.Popen[str] | None = None
        self.received: dict[str, float] = {}

    def __enter__(self) -> RecordingInbox:
        self._proc, ready = _start_server(
            self.env, "bench.recording_inbox", ["--host", self.host], 30
        )
        self.url = ready["url"]
        return self

    def wait_for(self, path: str, timeout: float) -> float | None:
        """The receive time (time.time() in the server) of ``path``, waiting up to ``timeout``."""
        assert self._proc is not None and self._proc.stdout is not None
        deadline = time.monotonic() + timeout
        while path not in self.received:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._proc.stdout], [], [], left)[0]:
                return None
            line = self._proc.stdout.readline()
            if not line:
                return None
            record = json.loads(line)
            self.received[record["path"]] = record["t"]
        return self.received[path]

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            _stop(self._proc, 10)


def _children(pid: int) -> list[int]:
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        found: list[int] = []
        for task in tasks:
            text = (task / "children").read_text().split()
            found.extend(int(p) for p in text)
        return found
    except OSError:
        return []


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        todo.extend(_children(current))
    return pids


def status_kb(pid: int, name: str) -> int:
    """A ``/proc/<pid>/status`` field in kB (0 if the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def services_cpu_seconds() -> float:
    """CPU seconds used so far by this tree's PostgreSQL (postmaster and backends) and
    Redis, as ``scripts/services`` runs them (0 for what is not running)."""
    total = 0.0
    for pidfile in (
        RUN_DIR.parent / "pg" / "postmaster.pid",
        RUN_DIR.parent / "redis" / "redis.pid",
    ):
        try:
            pid = int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        total += sum(cpu_seconds(p) for p in process_tree(pid))
    return total


@dataclass
class Worker:
    """A ``celery -A testproject worker`` subprocess on the benchmark services."""

    env: Env
    settings: dict[str, Any] = field(default_factory=dict)
    queues: str = README_QUEUES
    concurrency: int | None = None
    imports: Sequence[str] = ()
    name: str = "worker"
    extra_env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    log: Path = field(default_factory=lambda: LOG_DIR / f"worker-{time.time_ns()}.log")

    def __enter__(self) -> Worker:
        ready = RUN_DIR / f"ready-{time.time_ns()}"
        env = self.env.process_env({**BASE_WORKER_SETTINGS, **self.settings})
        env["BENCH_READY_FILE"] = str(ready)
        env.update(self.extra_env)
        cmd = [PYTHON, "-m", "celery", "-A", "testproject", "worker", "-Q", self.queues]
        cmd += ["--loglevel=WARNING", "-I", ",".join(["bench.worker_hooks", *self.imports])]
        cmd += ["--without-mingle", "--without-gossip", "--without-heartbeat"]
        # A node name of its own: two workers of one name cannot share a RabbitMQ.
        cmd += ["-n", f"{self.name}{time.time_ns()}@%h"]
        if self.concurrency:
            cmd += ["-c", str(self.concurrency)]
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.05)
        ready.unlink()
        return self

    def pids(self) -> list[int]:
        """The worker's main process and its pool children."""
        return process_tree(self.proc.pid) if self.proc else []

    def peak_rss_mb(self) -> float:
        """Sum of VmHWM (peak resident set) over the worker's processes, in MB."""
        return sum(status_kb(p, "VmHWM") for p in self.pids()) / 1024

    def rss_mb(self) -> float:
        """Sum of VmRSS over the worker's processes, in MB."""
        return sum(status_kb(p, "VmRSS") for p in self.pids()) / 1024

    def cpu_seconds(self) -> float:
        """User + system CPU time used so far by the worker's live processes."""
        return sum(cpu_seconds(p) for p in self.pids())

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is not None:
            _stop(self.proc, 30)
