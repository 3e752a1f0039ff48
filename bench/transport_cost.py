"""CPU per POST of the package's transport, next to bare clients, on loopback.

``python -m bench.transport_cost [--posts N] [--threads T] [--repeats R]``

Starts ``python -m testproject.inbox_servers`` out of process (hosts answering 202 at
once on 127.0.0.2...), then, in this process, POSTs a 1.2 KB body with signed-looking
headers to them with each client in turn, one at a time and ``T`` at once (each of
the ``T`` on hosts of its own, so that no host sees more than one request at a time).
Per client and mode it prints the medians over ``R`` repeats of the process CPU time
per POST (``time.process_time``: every thread) and of the rate.  The clients,
interleaved within each repeat:

* ``Transport``: the package's transport, ``T`` coroutines on one event loop, as in
  a worker process (``Transport on uvloop``: the same on uvloop's loop);
* ``urllib3 pool``: a bare urllib3 connection pool per host, ``T`` threads;
* ``http.client``: one keep-alive connection per host and thread (the bare loop's).

Loopback only, bounded loops; no database or Redis needed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
BODY = b'{"type":"Create","object":{"content":"' + b"x" * 1150 + b'"}}'
#: One POST: ``post(url, headers)``; a client factory gives one per thread.
Post = Callable[[str, dict[str, str]], int]


def signed_headers(url: str) -> dict[str, str]:
    """Headers the size of a draft-cavage signed request (not a valid signature)."""
    return {
        "Host": urlsplit(url).netloc,
        "Date": "Wed, 02 Dec 2026 15:00:00 GMT",
        "Digest": "SHA-256=" + "A" * 43 + "=",
        "Content-Type": "application/activity+json",
        "Signature": 'keyId="https://demo.example/users/alice#main-key",algorithm="rsa-sha256",'
        'headers="(request-target) host date digest content-type",signature="' + "B" * 344 + '"',
    }


def urllib3_client() -> Callable[[], Post]:
    """A bare urllib3 pool per host, shared by the threads."""
    import urllib3

    manager = urllib3.PoolManager(num_pools=1024, maxsize=4, retries=False)

    def factory() -> Post:
        def post(url: str, headers: dict[str, str]) -> int:
            response = manager.request("POST", url, body=BODY, headers=headers, redirect=False)
            return int(response.status)

        return post

    return factory


def http_client_client() -> Callable[[], Post]:
    """One http.client keep-alive connection per host in each thread."""

    def factory() -> Post:
        connections: dict[str, tuple[http.client.HTTPConnection, str]] = {}

        def post(url: str, headers: dict[str, str]) -> int:
            hit = connections.get(url)
            if hit is None:
                parts = urlsplit(url)
                conn = http.client.HTTPConnection(parts.netloc, timeout=30)
                hit = connections[url] = (conn, parts.path)
            conn, path = hit
            conn.request("POST", path, body=BODY, headers=headers)
            response = conn.getresponse()
            response.read()
            return response.status

        return post

    return factory


def run_transport(
    urls: list[str], posts: int, at_once: int, event_loop: str = "asyncio"
) -> tuple[float, float]:
    """``posts`` POSTs by the package's transport, ``at_once`` coroutines on one loop
    (``event_loop``: asyncio's or uvloop's, as ``OUTBOX_EVENT_LOOP`` says)."""
    from django_outbox.transport import Transport
    from django_outbox.transport.loops import loop_factory

    per_task = posts // at_once
    headers = {url: signed_headers(url) for url in urls}
    mine = [urls[t::at_once] for t in range(at_once)]
    transport = Transport(user_agent="bench/1", allowed_networks=["127.0.0.0/8"])

    async def task(targets: list[str], count: int) -> None:
        for i in range(count):
            url = targets[i % len(targets)]
            if (await transport.post(url, headers[url], BODY)).status != 202:
                raise RuntimeError(f"unexpected status from {url}")

    async def everything(count: int) -> None:
        await asyncio.gather(*(task(targets, count) for targets in mine))

    loop = loop_factory(event_loop)()
    try:
        loop.run_until_complete(everything(1))  # connections opened outside the measure
        cpu, wall = time.process_time(), time.perf_counter()
        loop.run_until_complete(everything(per_task))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        transport.close()
        loop.close()
    done = per_task * at_once
    return cpu / done, done / wall


def run_once(
    factory: Callable[[], Post], urls: list[str], posts: int, threads: int
) -> tuple[float, float]:
    """``posts`` POSTs over ``threads`` threads: (CPU seconds per POST, POSTs per second)."""
    per_thread = posts // threads
    headers = {url: signed_headers(url) for url in urls}
    mine = [urls[t::threads] for t in range(threads)]
    start = threading.Barrier(threads + 1)
    failures: list[BaseException] = []

    def work(t: int) -> None:
        try:
            post, targets = factory(), mine[t]
            for url in targets:  # connections opened outside the measure
                post(url, headers[url])
            start.wait()
            for i in range(per_thread):
                url = targets[i % len(targets)]
                if post(url, headers[url]) != 202:
                    raise RuntimeError(f"unexpected status from {url}")
        except threading.BrokenBarrierError:
            pass  # another thread failed before the start
        except BaseException as exc:
            failures.append(exc)
            start.abort()

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        start.wait()
    cpu, wall = time.process_time(), time.perf_counter()
    for worker in workers:
        worker.join()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if failures:
        raise failures[0]
    done = per_thread * threads
    return cpu / done, done / wall


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print a table of medians."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--posts", type=int, default=2000, help="POSTs per client and mode")
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--only", help="comma-separated client names to time")
    options = parser.parse_args(argv)
    if options.hosts < options.threads:
        parser.error("--hosts must be at least --threads (one thread per host at a time)")
    sys.path.insert(0, str(ROOT))
    clients: dict[str, Callable[[], Callable[[], Post]] | None] = {
        "Transport": None,  # not threads: see run_transport
        "Transport on uvloop": None,
        "urllib3 pool": urllib3_client,
        "http.client": http_client_client,
    }
    if options.only:
        wanted = options.only.split(",")
        clients = {name: make for name, make in clients.items() if name in wanted}
    server = subprocess.Popen(
        [sys.executable, "-m", "testproject.inbox_servers", "--count", str(options.hosts)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        urls = json.loads(server.stdout.readline())["urls"]
        modes = {"1 at a time": 1, f"{options.threads} at once": options.threads}
        factories = {name: make() if make else None for name, make in clients.items()}
        figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for repeat in range(options.repeats):
            for mode, threads in modes.items():
                for name, factory in factories.items():
                    if factory is None:
                        loop = "uvloop" if name.endswith("uvloop") else "asyncio"
                        figure = run_transport(urls, options.posts, threads, loop)
                    else:
                        figure = run_once(factory, urls, options.posts, threads)
                    figures.setdefault((name, mode), []).append(figure)
            print(f"repeat {repeat + 1}/{options.repeats} done", file=sys.stderr, flush=True)
    finally:
        server.terminate()
        server.wait(30)
    print(f"{'client':<24} {'mode':<11} {'CPU us/POST (min-max)':>22} {'POSTs/s':>8}  medians")
    for (name, mode), runs in figures.items():
        cpus = [run[0] * 1e6 for run in runs]
        cpu = f"{statistics.median(cpus):.0f} ({min(cpus):.0f}-{max(cpus):.0f})"
        rate = statistics.median(run[1] for run in runs)
        print(f"{name:<24} {mode:<11} {cpu:>22} {rate:>8.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
