"""Components: what each step of one delivery costs, one thread, no contention.

Not a target of its own: it explains the throughput figures.  Each step runs a few
thousand times in this process against the same services (the inbox farm out of
process); the table gives wall time and this thread's CPU time per delivery
(``time.thread_time``; for a round trip the wall time also holds the other side's
work).  Summing the CPU column gives what one delivery costs the worker at best;
the cpu-bound scenario's "worker CPU per delivery" can be compared with it.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.common import ACTOR, Env, activity, log, reset_state
from bench.figures import wait_quiet
from bench.processes import Farm

ED_ACTOR = "https://demo.example/users/edna"


def measure(step: Callable[[int], Any], count: int, per: int = 1) -> dict[str, float]:
    """Run ``step(i)`` for i < ``count``; microseconds per delivery (``per`` per call)."""
    step(0)  # warm up (connections, caches)
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    for i in range(count):
        step(i)
    wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
    return {"wall_us": 1e6 * wall / (count * per), "cpu_us": 1e6 * cpu / (count * per)}


def _concurrently(post: Callable[[int], Awaitable[Any]], count: int) -> dict[str, float]:
    """Wall and CPU time per call of ``count`` coroutines, 64 at a time on one event loop."""

    async def all_of_them() -> None:
        limit = asyncio.Semaphore(64)

        async def one(i: int) -> None:
            async with limit:
                await post(i)

        await asyncio.gather(*(one(i) for i in range(count)))

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(all_of_them())  # warm: connections opened
        wall0, cpu0 = time.perf_counter(), time.thread_time()
        loop.run_until_complete(all_of_them())
        wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
    finally:
        loop.close()
    return {"wall_us": 1e6 * wall / count, "cpu_us": 1e6 * cpu / count}


def run(env: Env, quick: bool) -> dict[str, Any]:
    """Time signing, the HTTP POST, breaker calls, claiming and saving outcomes."""
    import requests
    from django_redis import get_redis_connection

    from django_outbox.breakers import BreakerPolicy
    from django_outbox.breakers.redis_store import RedisBreakerStore
    from django_outbox.conf import conf
    from django_outbox.sending.validation import serialise_activity
    from django_outbox.signing import Scheme, sign_headers
    from django_outbox.signing.schemes import remember_here, remembered
    from django_outbox.transport import Transport
    from testproject.demo.keys import resolve

    n = 500 if quick else 3000
    reset_state(env)
    body = serialise_activity(activity(), conf.MAX_BODY_BYTES)
    digest = hashlib.sha256(body).digest()
    rsa, ed = resolve(ACTOR), resolve(ED_ACTOR)
    assert rsa is not None and ed is not None
    out: dict[str, Any] = {}
    with Farm(env, 200) as farm:
        urls = farm.inboxes(1)
        wait_quiet()

        def sign(key: Any) -> Callable[[int], Any]:
            def step(i: int) -> Any:
                return sign_headers(
                    Scheme.CAVAGE,
                    key,
                    method="POST",
                    url=urls[i % 200],
                    body=body,
                    content_type="application/activity+json",
                    body_sha256=digest,
                )

            return step

        out["sign, RSA-2048 (draft-cavage)"] = measure(sign(rsa), n)
        out["sign, Ed25519"] = measure(sign(ed), n)
        headers = sign(rsa)(0)
        transport = Transport(user_agent="bench", allowed_networks=["127.0.0.0/8"])
        out["POST, package Transport (keep-alive, 64 at once on one loop)"] = _concurrently(
            lambda i: transport.post(urls[i % 200], headers_for(urls[i % 200], headers), body), n
        )
        session = requests.Session()
        out["POST, plain requests.Session (keep-alive)"] = measure(
            lambda i: session.post(
                urls[i % 200], data=body, headers=headers_for(urls[i % 200], headers)
            ),
            n,
        )
        out["POST, http.client keep-alive (the bare loop's)"] = measure(
            _http_client_post(urls, body), n
        )
        policy = BreakerPolicy()

        def breaker(trust_for: float) -> Callable[[int], None]:
            store = RedisBreakerStore(lambda: get_redis_connection("default"), trust_for=trust_for)

            def step(i: int) -> None:
                key = f"host{i % 200}"
                admission = store.admit(key, policy)
                store.record(key, policy, failed=False, admission=admission)

            return step

        out["breaker admit + record, untrusted host (2 Redis EVALSHA)"] = measure(breaker(0.0), n)
        out["breaker admit + record, trusted host (process memory)"] = measure(breaker(5.0), n)
        for url in urls:
            remember_here(url, Scheme.CAVAGE)
        out["scheme lookup (process memo)"] = measure(lambda i: remembered(urls[i % 200]), n)
        out.update(_database_steps(farm, 3 if quick else 6))
    reset_state(env)
    for name, fig in out.items():
        log(f"{name}: {fig['wall_us']:.0f} us wall, {fig['cpu_us']:.0f} us CPU per delivery")
    return {"steps": out}


def _database_steps(farm: Farm, batches: int) -> dict[str, dict[str, float]]:
    """Claiming 50 ids per task, saving 500 outcomes per recorder batch, publishing."""
    from django_outbox import outbox
    from django_outbox.broker.publish import publish
    from django_outbox.models import Delivery
    from django_outbox.store.claim_rows import load_messages, new_token
    from django_outbox.store.transitions import claim
    from django_outbox.values.claimed import ClaimedRow, MessageData
    from django_outbox.values.outcomes import AttemptResult, Outcome
    from django_outbox.worker.recorder import apply_outcomes, publish_effects

    totals = {"claim": [0.0, 0.0], "save": [0.0, 0.0], "publish": [0.0, 0.0]}
    count = 0
    inboxes = farm.inboxes(3)[:500]
    for b in range(batches + 1):
        message = outbox.send(ACTOR, activity(b), inboxes)
        assert message is not None
        ids = list(Delivery.objects.filter(message=message).values_list("id", flat=True))
        data = load_messages([message.pk])[message.pk]
        token = new_token()
        claimed: list[ClaimedRow] = []

        def save(claimed: list[ClaimedRow] = claimed, data: MessageData = data) -> None:
            outcomes = [Outcome(row, data, AttemptResult.DELIVERED, status=202) for row in claimed]
            publish_effects(apply_outcomes(outcomes))

        steps: dict[str, Callable[[], Any]] = {
            "claim": lambda ids=ids, token=token, claimed=claimed: [
                claimed.extend(claim(ids[k : k + 50], token)) for k in range(0, len(ids), 50)
            ],
            "save": save,
            "publish": lambda ids=ids: publish({"outbox": ids}),
        }
        for name, step in steps.items():
            wall0, cpu0 = time.perf_counter(), time.thread_time()
            step()
            if b:  # the first batch warms up
                totals[name][0] += time.perf_counter() - wall0
                totals[name][1] += time.thread_time() - cpu0
        count += len(ids) if b else 0
    names = {
        "claim": "claim, 50 ids per task (UPDATE + SELECT)",
        "save": "save outcomes, 500 per recorder batch",
        "publish": "publish, 50 ids per deliver message",
    }
    return {
        names[k]: {"wall_us": 1e6 * w / count, "cpu_us": 1e6 * c / count}
        for k, (w, c) in totals.items()
    }


def _http_client_post(urls: list[str], body: bytes) -> Callable[[int], Any]:
    """A step POSTing with http.client on one keep-alive connection per host."""
    import http.client
    from urllib.parse import urlsplit

    connections: dict[str, http.client.HTTPConnection] = {}

    def step(i: int) -> int:
        parts = urlsplit(urls[i % len(urls)])
        conn = connections.get(parts.netloc)
        if conn is None:
            conn = connections[parts.netloc] = http.client.HTTPConnection(parts.netloc, timeout=30)
        conn.request("POST", parts.path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status

    return step


def headers_for(url: str, signed: dict[str, str]) -> dict[str, str]:
    """The signed headers with the Host of ``url`` (the signature itself is not checked)."""
    from urllib.parse import urlsplit

    return {**signed, "Host": urlsplit(url).netloc}
