"""Baselines measured in the same run: the naive design and the bare sign-and-POST loop.

``naive``: one Celery task per inbox (``bench.naive_task``), as a first implementation
does it, on a worker with the README's concurrency (2 prefork processes); timed from
the first ``send_task`` (one broker publish per inbox, as that design pays) to the
last task done.  Also the usual first fix (key cached, keep-alive session).

``bare``: no queue, no database: two processes, each with a few threads looping over
their share of the inboxes, signing with the package's own ``sign_headers`` (RSA-2048,
draft-cavage) and POSTing with ``http.client`` on keep-alive connections (the cheapest
plain client; ``requests`` costs three times as much CPU per POST here, see the
components scenario).  This is the ceiling a queued design is compared with (targets:
70% of its rate, and a worker CPU per delivery at most 1.3 times its own, measured as
the process CPU time of the two processes while they loop).
"""

from __future__ import annotations

import hashlib
import multiprocessing
import threading
import time
from typing import Any

from bench.common import ACTOR, Env, activity, log, reset_state
from bench.figures import machine_busy, summary, wait_quiet
from bench.processes import Farm, Worker

ED_ACTOR = "https://demo.example/users/edna"
BARE_PROCESSES = 2
BARE_THREADS = 2
CONTENT_TYPE = "application/activity+json"


def _sender(actor: str = ACTOR) -> tuple[str, str, bytes]:
    """(key id, private key PEM, body) of a benchmark actor."""
    import json

    from testproject.demo.keys import resolve

    key = resolve(actor)
    assert key is not None
    body = json.dumps(activity(), separators=(",", ":")).encode()
    return key.key_id, key.private_key_pem, body


# --------------------------------------------------------------------- bare -----
def _bare_process(
    urls: list[str], threads: int, key_id: str, pem: str, body: bytes, go: Any, out: Any
) -> None:
    """One bare process: ``threads`` threads sign and POST their share of ``urls``.

    Each thread keeps one ``http.client`` keep-alive connection per host: the
    cheapest plain way to POST from Python, so that this is a ceiling.
    """
    import http.client
    from urllib.parse import urlsplit

    from django_outbox.sending.keys import SenderKey, load_private_key
    from django_outbox.signing import Scheme, sign_headers

    key = SenderKey(key_id, pem)
    load_private_key(pem)  # parse once before the clock starts, as a worker would
    digest = hashlib.sha256(body).digest()
    accepted = [0] * threads

    def loop(index: int) -> None:
        connections: dict[str, http.client.HTTPConnection] = {}
        for url in urls[index::threads]:
            parts = urlsplit(url)
            headers = sign_headers(
                Scheme.CAVAGE,
                key,
                method="POST",
                url=url,
                body=body,
                content_type=CONTENT_TYPE,
                body_sha256=digest,
            )
            conn = connections.get(parts.netloc)
            if conn is None:
                conn = connections[parts.netloc] = http.client.HTTPConnection(
                    parts.netloc, timeout=30
                )
            conn.request("POST", parts.path, body=body, headers=headers)
            response = conn.getresponse()
            response.read()
            accepted[index] += 200 <= response.status < 300
        for conn in connections.values():
            conn.close()

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    go.wait(60)
    cpu0 = time.process_time()
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(600)
    out.put((sum(accepted), time.process_time() - cpu0))


def bare_once(urls: list[str], processes: int, threads: int, actor: str) -> dict[str, Any]:
    """One timed bare run over ``urls``."""
    key_id, pem, body = _sender(actor)
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(
            target=_bare_process, args=(urls[i::processes], threads, key_id, pem, body, go, out)
        )
        for i in range(processes)
    ]
    for proc in procs:
        proc.start()
    time.sleep(2.0)  # let the spawned interpreters import and parse the key
    busy = wait_quiet()
    busy0, total0 = machine_busy()
    t0 = time.monotonic()
    go.set()
    ends = [out.get(timeout=600) for _ in procs]
    elapsed = time.monotonic() - t0
    accepted, cpu = sum(n for n, _ in ends), sum(c for _, c in ends)
    busy1, total1 = machine_busy()
    for proc in procs:
        proc.join(30)
    return {
        "rate": accepted / elapsed,
        "accepted": accepted,
        "elapsed_s": elapsed,
        "cpu_ms_per_delivery": 1000 * cpu / max(1, accepted),
        "machine_busy_fraction": (busy1 - busy0) / max(1e-9, total1 - total0),
        "busy_before": busy,
    }


def bare(env: Env, quick: bool, actor: str = ACTOR, repeats: int = 3) -> dict[str, Any]:
    """The ceiling: 2 processes signing and POSTing 10,000 times to 200 instant hosts."""
    repeats, per_host = (1, 20) if quick else (repeats, 50)
    runs = []
    with Farm(env, 200) as farm:
        urls = farm.inboxes(per_host)
        for i in range(repeats):
            figures = bare_once(urls, BARE_PROCESSES, BARE_THREADS, actor)
            log(f"bare run {i + 1}/{repeats}: {figures['rate']:.0f} deliveries/s ({actor})")
            runs.append(figures)
    return {
        "processes": BARE_PROCESSES,
        "threads": BARE_THREADS,
        "actor": actor,
        "deliveries": len(urls),
        "rate": summary([r["rate"] for r in runs]),
        "runs": runs,
    }


def bare_ed25519(env: Env, quick: bool) -> dict[str, Any]:
    """The bare loop signing with Ed25519: two runs."""
    return bare(env, quick, ED_ACTOR, repeats=2)


# -------------------------------------------------------------------- naive -----
def naive_once(env: Env, urls: list[str], cached: bool, timeout: float) -> dict[str, Any]:
    """Send one naive task per inbox and wait until all are done (counted in Redis)."""
    import redis

    from testproject.celery import app

    key_id, pem, body = _sender()
    text = body.decode()
    client = redis.Redis.from_url(env.redis_url)
    reset_state(env)
    with Worker(env, queues="bench.naive", imports=["bench.naive_task"]) as worker:
        busy = wait_quiet()
        cpu0 = worker.cpu_seconds()
        t0 = time.time()
        for url in urls:
            app.send_task(
                "bench.naive_deliver", (url, text, key_id, pem, cached), queue="bench.naive"
            )
        enqueue = time.time() - t0
        deadline = time.monotonic() + timeout
        done = 0
        while time.monotonic() < deadline:
            done = int(client.get("bench:naive:done") or 0)
            if done >= len(urls):
                break
            time.sleep(0.25)
        last = float(client.get("bench:naive:last") or time.time())
        cpu = worker.cpu_seconds() - cpu0
    elapsed = last - t0
    return {
        "rate": done / elapsed if elapsed > 0 else 0.0,
        "done": done,
        "elapsed_s": elapsed,
        "enqueue_s": enqueue,
        "complete": done >= len(urls),
        "worker_cpu_ms_per_delivery": 1000 * cpu / max(1, done),
        "busy_before": busy,
    }


def naive(env: Env, quick: bool) -> dict[str, Any]:
    """Task per inbox, key parsed per task; and with key cached + keep-alive session."""
    repeats = 1 if quick else 3
    sizes = {"naive": 50 if quick else 200, "cached": 400 if quick else 2000}
    out: dict[str, Any] = {}
    with Farm(env, 200) as farm:
        for label, cached in (("naive", False), ("cached", True)):
            urls = farm.inboxes(-(-sizes[label] // 200))[: sizes[label]]
            runs = []
            for i in range(repeats):
                figures = naive_once(env, urls, cached, timeout=120)
                log(f"{label} run {i + 1}/{repeats}: {figures['rate']:.0f} deliveries/s")
                runs.append(figures)
            out[label] = {
                "deliveries": len(urls),
                "rate": summary([r["rate"] for r in runs]),
                "runs": runs,
            }
    return out
