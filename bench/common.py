"""Shared helpers of the benchmarks: services, out-of-process servers and workers, progress.

Everything a scenario starts runs in its own process (inbox servers, workers), so the
orchestrator's GIL is shared with nobody.  The benchmarks use their own PostgreSQL
database (``outbox_bench``) and Redis database number (``9``) on the servers that
``scripts/services`` runs, so a test run at the same time is not disturbed.
"""

from __future__ import annotations

import json
import os
import platform
import select
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

#: Where the code runs from: the repository, or a snapshot of it (``run.py`` copies
#: ``django_outbox/``, ``testproject/`` and ``bench/`` at the start of a run so that
#: edits made meanwhile in the shared tree do not change the code under test).
ROOT = Path(__file__).resolve().parent.parent
#: The repository: services script, results, docs and run directory.
REPO = Path(os.environ.get("BENCH_REPO", ROOT))
PYTHON = sys.executable
RUN_DIR = REPO / ".run" / "bench"
LOG_DIR = RUN_DIR / "logs"
RESULTS_DIR = REPO / "bench" / "results"
BENCH_DB = "outbox_bench"
BENCH_REDIS_DB = 9
ACTOR = "https://demo.example/users/alice"
README_QUEUES = "outbox.priority,outbox"

#: Worker settings of every scenario unless it says otherwise: the package defaults
#: except a short stop timeout, so that stopping a worker between runs is quick, and
#: ``DEBUG=False`` as in production (testproject's ``DEBUG=True`` keeps the last 9,000
#: SQL queries of each connection in memory and wraps every cursor).
BASE_WORKER_SETTINGS: dict[str, Any] = {"OUTBOX_STOP_TIMEOUT": 3, "DEBUG": False}


def activity(n: int = 0) -> dict[str, Any]:
    """A Create/Note of about 1 KB, as a typical post serialises."""
    note = {
        "id": f"https://demo.example/users/alice/statuses/{n}",
        "type": "Note",
        "attributedTo": ACTOR,
        "content": "<p>" + "Benchmark post with some text. " * 24 + "</p>",
        "to": ["https://www.w3.org/ns/activitystreams#Public"],
        "cc": [f"{ACTOR}/followers"],
    }
    return {
        "@context": "https://www.w3.org/ns/activitystreams",
        "id": f"{note['id']}/activity",
        "type": "Create",
        "actor": ACTOR,
        "object": note,
        "to": note["to"],
        "cc": note["cc"],
    }


# ------------------------------------------------------------------ services -----
@dataclass(frozen=True)
class Env:
    """Where the benchmarks' database and Redis are."""

    database_url: str
    redis_url: str

    def process_env(self, settings: dict[str, Any] | None = None) -> dict[str, str]:
        """The environment of a worker or helper process on the benchmark services."""
        env = dict(os.environ)
        env.update(
            DATABASE_URL=self.database_url,
            REDIS_URL=self.redis_url,
            OUTBOX_RUN_DIR=str(RUN_DIR),
            DJANGO_SETTINGS_MODULE="testproject.settings",
            PYTHONPATH=str(ROOT),
            OUTBOX_SETTINGS_JSON=json.dumps(settings or {}),
        )
        return env


def _with_path(url: str, path: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


_LOCK: list[Any] = []


def _lock_machine(wait: float = 1800.0) -> None:
    """Hold ``RUN_DIR/bench.lock`` for the life of this process: one benchmark at a time.

    Two benchmarks at once would share the bench database (each empties it before its
    runs) and the 2 cores; the second waits for the first (at most ``wait`` seconds).
    """
    import fcntl

    if _LOCK:
        return
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    handle = (RUN_DIR / "bench.lock").open("w")
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise RuntimeError("another benchmark holds .run/bench/bench.lock") from None
            if not _LOCK:
                log("another benchmark is running; waiting for it to finish")
                _LOCK.append(None)
            time.sleep(2)
    _LOCK[:] = [handle]


def start_services() -> Env:
    """Start (or reuse) Redis and PostgreSQL with ``scripts/services``; make the bench DB.

    Takes the benchmark lock first (see :func:`_lock_machine`).
    """
    _lock_machine()
    out = subprocess.run(
        [str(REPO / "scripts" / "services"), "start"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        cwd=REPO,
    ).stdout
    exported = dict(
        line.removeprefix("export ").split("=", 1)
        for line in out.splitlines()
        if line.startswith("export ")
    )
    admin_url = exported["DATABASE_URL"]
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (BENCH_DB,)
        ).fetchone()
        if not exists:
            conn.execute(f"CREATE DATABASE {BENCH_DB}")
    return Env(
        database_url=_with_path(admin_url, "/" + BENCH_DB),
        redis_url=_with_path(exported["REDIS_URL"], f"/{BENCH_REDIS_DB}"),
    )


def setup_django(env: Env) -> None:
    """Configure this process for the benchmark services and migrate the bench DB."""
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    os.environ.update(
        {k: v for k, v in env.process_env({"DEBUG": False}).items() if k != "PYTHONPATH"},
    )
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django
    from django.core.management import call_command

    django.setup()
    # Celery's loader may have put the working directory first on sys.path.
    while str(ROOT) in sys.path:
        sys.path.remove(str(ROOT))
    sys.path.insert(0, str(ROOT))
    import django_outbox

    if not Path(django_outbox.__file__).is_relative_to(ROOT):
        raise RuntimeError(f"django_outbox imported from {django_outbox.__file__}, not {ROOT}")
    call_command("migrate", verbosity=0, interactive=False)


def reset_state(env: Env) -> None:
    """Empty the outbox tables and the bench Redis DB (broker queues, cache, breakers)."""
    import redis
    from django.db import connection

    from django_outbox.schemes import forget_local

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE django_outbox_delivery, django_outbox_message RESTART IDENTITY CASCADE"
        )
    redis.Redis.from_url(env.redis_url).flushdb()
    forget_local()


def state_counts() -> dict[str, int]:
    """How many deliveries are in each state (one query)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT state, count(*) FROM django_outbox_delivery GROUP BY state")
        return {state: count for state, count in cursor.fetchall()}


def last_finished() -> float | None:
    """Unix time of the latest ``finished_at`` among the deliveries, if any."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT max(finished_at) FROM django_outbox_delivery")
        (value,) = cursor.fetchone()
    return None if value is None else float(value.timestamp())


FINAL = ("delivered", "refused", "skipped", "failed")


def wait_settled(total: int, timeout: float, poll: float = 0.25) -> dict[str, Any]:
    """Poll the database until ``total`` deliveries are final or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    counts: dict[str, int] = {}
    while time.monotonic() < deadline:
        counts = state_counts()
        if sum(counts.get(s, 0) for s in FINAL) >= total:
            break
        time.sleep(poll)
    done = sum(counts.get(s, 0) for s in FINAL)
    return {"counts": counts, "complete": done >= total, "last_finished": last_finished()}


# ------------------------------------------------------------- subprocesses -----
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

    def __init__(self, env: Env, count: int, *, delay: float = 0.0, first: str = "127.0.0.2"):
        self.env, self.count, self.delay, self.first = env, count, delay, first
        self.urls: list[str] = []
        self.requests = 0
        self._log = LOG_DIR / f"farm-{count}-{time.time_ns()}.log"
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Farm:
        args = ["--count", str(self.count), "--delay", str(self.delay), "--first-address"]
        self._proc = subprocess.Popen(
            [PYTHON, "-m", "testproject.inbox_servers", *args, self.first],
            stdout=subprocess.PIPE,
            stderr=self._log.open("w"),
            text=True,
            cwd=ROOT,
            env=self.env.process_env(),
            start_new_session=True,
        )
        self.urls = _read_json_line(self._proc, 120)["urls"]
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
                self.requests = int(json.loads(lines[-1])["requests"]) if lines else 0
            except (ValueError, KeyError):
                self.requests = -1


class RecordingInbox:
    """``python -m bench.recording_inbox``: one host reporting each request's receive time."""

    def __init__(self, env: Env, host: str = "127.0.1.2") -> None:
        self.env, self.host = env, host
        self.url = ""
        self._proc: subprocess.Popen[str] | None = None
        self.received: dict[str, float] = {}

    def __enter__(self) -> RecordingInbox:
        self._proc = subprocess.Popen(
            [PYTHON, "-m", "bench.recording_inbox", "--host", self.host],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=self.env.process_env(),
            start_new_session=True,
        )
        self.url = _read_json_line(self._proc, 30)["url"]
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


# ------------------------------------------------------------------ figures -----
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


def log(message: str) -> None:
    """Progress on stderr."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


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


def snapshot() -> tuple[Path, str]:
    """Copy the code under test to ``RUN_DIR/code-<time>``; (its path, a description).

    The description names the commit and, when ``django_outbox/`` differs from it, a
    short hash of the uncommitted diff, so that results say what they measured.
    """
    import hashlib
    import shutil

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, cwd=REPO
        ).stdout.strip()

    for old in sorted(RUN_DIR.glob("code-*"))[:-2]:  # keep the last two
        shutil.rmtree(old, ignore_errors=True)
    target = RUN_DIR / f"code-{time.strftime('%Y%m%d-%H%M%S')}"
    target.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "results", "*.pyc")
    for name in ("django_outbox", "testproject", "bench"):
        shutil.copytree(REPO / name, target / name, ignore=ignore)
    diff = git("diff", "HEAD", "--", "django_outbox")
    described = git("rev-parse", "--short", "HEAD")
    if diff:
        described += f" + uncommitted changes (diff {hashlib.sha1(diff.encode()).hexdigest()[:8]})"
    return target, described


def save_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")
