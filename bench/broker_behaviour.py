"""How Redis and RabbitMQ hand out Celery messages: ``python -m bench.broker_behaviour``.

The facts behind docs/deployment.md's "Redis or RabbitMQ", measured with a Celery app
of this module's own (not the package): a task that sleeps 20 ms and appends its tag
to a file, a worker ``-c 1`` with prefetch 1 and late acks, on the Redis (DB 5) and
RabbitMQ that ``scripts/services`` runs.

1. **Queue order**: 2,000 bulk messages wait in ``bb.bulk``; the worker consumes
   ``bb.urgent`` and ``bb.bulk`` in both ``-Q`` orders; an urgent message is published
   20 times, and each time the bulk tasks that start between its publish and its own
   start are counted (not the one under way when it is published).  ``None``: it did not
   run within 30 s (and the case stops there).  On Redis with
   ``queue_order_strategy=priority`` and with kombu's default round robin; on RabbitMQ
   (which has no such option).
2. **Message priorities** (RabbitMQ): the same with one queue declared with
   ``x-max-priority=10``, bulk at priority 0 and the urgent message at 9.
3. **Redelivery**: a worker holding a message (late ack) is SIGKILLed while a second
   worker waits; seconds until the second runs it.  Redis with ``visibility_timeout``
   lowered to 20 s (the recommended 3,600 s would take an hour).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from celery import Celery
from kombu import Queue

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import PYTHON, RESULTS_DIR, ROOT, RUN_DIR, log
from bench.figures import save_json

BULK, URGENT, PRIORITY = "bb.bulk", "bb.urgent", "bb.priority"
LOG = Path(os.environ.get("BB_LOG", RUN_DIR / "broker_behaviour.log"))

app = Celery("bench.broker_behaviour", broker=os.environ.get("BB_BROKER", "memory://"))
app.conf.update(
    broker_transport_options=json.loads(os.environ.get("BB_OPTIONS", "{}")),
    worker_prefetch_multiplier=1,
    task_acks_late=True,
    task_default_queue=BULK,
    task_queues=[
        Queue(BULK),
        Queue(URGENT),
        Queue(PRIORITY, queue_arguments={"x-max-priority": 10}),
    ],
)


@app.task(name="bb.work")
def work(tag: str, hold: float = 0.02) -> None:
    """Note that ``tag`` ran (and in which process), then take ``hold`` seconds."""
    with LOG.open("a") as output:
        output.write(f"{tag} {os.getpid()} {time.time()}\n")
    time.sleep(hold)


def _tags() -> list[str]:
    return [line.split()[0] for line in LOG.read_text().splitlines() if line]


def _env(broker: str, options: dict[str, Any]) -> dict[str, str]:
    return {
        **os.environ,
        "BB_BROKER": broker,
        "BB_OPTIONS": json.dumps(options),
        "BB_LOG": str(LOG),
        "PYTHONPATH": str(ROOT),
    }


def _worker(broker: str, options: dict[str, Any], queues: str) -> subprocess.Popen[bytes]:
    command = [PYTHON, "-m", "celery", "-A", "bench.broker_behaviour", "worker", "-Q", queues]
    command += ["-c", "1", "-n", f"bb{time.time_ns()}@%h", "-l", "WARNING"]
    command += ["--without-mingle", "--without-gossip", "--without-heartbeat"]
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=_env(broker, options),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _stop(worker: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if worker.poll() is None:
        os.killpg(worker.pid, sig)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)


def _configure(broker: str, options: dict[str, Any]) -> None:
    """Point this process's app at ``broker`` and empty the queues."""
    app.conf.broker_url = broker
    app.conf.broker_transport_options = options
    app._pool = app.amqp._producer_pool = None  # connections to the previous broker
    with app.connection_for_write() as connection:
        for name in (BULK, URGENT, PRIORITY):
            channel = connection.channel()
            try:
                app.amqp.queues[name].bind(channel).declare()
                channel.queue_purge(name)
            finally:
                channel.close()
    LOG.parent.mkdir(parents=True, exist_ok=True)
    LOG.write_text("")


def _wait(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def overtaking(
    broker: str, options: dict[str, Any], queues: str, rounds: int, priorities: bool = False
) -> list[int | None]:
    """Bulk tasks started between publishing each urgent task and its start."""
    _configure(broker, options)
    bulk, urgent = (PRIORITY, PRIORITY) if priorities else (BULK, URGENT)
    extra = {"priority": 0} if priorities else {}
    with app.producer_or_acquire() as producer:
        for _ in range(2000):
            work.apply_async(("b",), queue=bulk, producer=producer, **extra)
    worker = _worker(broker, options, queues)
    counts: list[int | None] = []
    try:
        if not _wait(lambda: len(_tags()) >= 5, 60):
            raise RuntimeError(f"the worker ran nothing on {broker}")
        for n in range(rounds):
            before = _tags().count("b")
            work.apply_async((f"u{n}",), queue=urgent, **({"priority": 9} if priorities else {}))
            if _wait(lambda n=n: f"u{n}" in _tags(), 30):
                tags = _tags()
                counts.append(tags[: tags.index(f"u{n}")].count("b") - before)
            else:
                counts.append(None)  # starved: the next ones would wait behind it
                break
            time.sleep(0.1)
    finally:
        _stop(worker)
    return counts


def redelivery(broker: str, options: dict[str, Any], limit: float) -> float | None:
    """Seconds from SIGKILLing the worker that holds a message to another running it."""
    _configure(broker, options)
    first = _worker(broker, options, BULK)
    second: subprocess.Popen[bytes] | None = None
    try:
        work.apply_async(("held", 3600.0), queue=BULK)
        if not _wait(lambda: "held" in _tags(), 60):
            raise RuntimeError(f"the held task never ran on {broker}")
        second = _worker(broker, options, BULK)
        time.sleep(5)  # ready and waiting
        killed = time.time()
        _stop(first, signal.SIGKILL)
        if not _wait(lambda: _tags().count("held") >= 2, limit):
            return None
        again = [line.split() for line in LOG.read_text().splitlines() if line][1:]
        return float(next(fields[2] for fields in again if fields[0] == "held")) - killed
    finally:
        _stop(first, signal.SIGKILL)
        if second is not None:
            _stop(second, signal.SIGKILL)


def _summary(counts: list[int | None]) -> str:
    ran = [c for c in counts if c is not None]
    if not ran:
        return "never ran within 30 s"
    starved = ", then one never ran within 30 s" if None in counts else ""
    return f"{min(ran)}-{max(ran)} bulk tasks first (mean {statistics.mean(ran):.1f}){starved}"


def main() -> int:
    """Run the three experiments on both brokers; print and save the figures."""
    from bench.common import start_rabbitmq, start_services

    env = start_services()
    redis = env.redis_url.rsplit("/", 1)[0] + "/5"
    rabbitmq = start_rabbitmq()
    rounds = 20
    forward, reverse = f"{URGENT},{BULK}", f"{BULK},{URGENT}"
    strict = {"queue_order_strategy": "priority"}
    cases: list[tuple[str, Any]] = [
        ("redis priority, urgent first", lambda: overtaking(redis, strict, forward, rounds)),
        ("redis priority, urgent last", lambda: overtaking(redis, strict, reverse, rounds)),
        ("redis round robin", lambda: overtaking(redis, {}, forward, rounds)),
        ("rabbitmq, urgent first", lambda: overtaking(rabbitmq, {}, forward, rounds)),
        ("rabbitmq, urgent last", lambda: overtaking(rabbitmq, {}, reverse, rounds)),
        (
            "rabbitmq, one queue with x-max-priority",
            lambda: overtaking(rabbitmq, {}, PRIORITY, rounds, priorities=True),
        ),
    ]
    results: dict[str, Any] = {"overtaking": {}, "redelivery_s": {}}
    for label, case in cases:
        counts = case()
        results["overtaking"][label] = counts
        log(f"{label}: {_summary(counts)}")
    for label, url, options in (
        ("rabbitmq", rabbitmq, {}),
        ("redis, visibility_timeout 20 s", redis, {"visibility_timeout": 20}),
    ):
        seconds = redelivery(url, options, 300)
        results["redelivery_s"][label] = seconds
        shown = "not within 300 s" if seconds is None else f"{seconds:.1f}s"
        log(f"redelivery after SIGKILL, {label}: {shown}")
    save_json(RESULTS_DIR / "broker_behaviour.json", results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
