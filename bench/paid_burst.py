"""A burst to one per-message host: what its held deliveries cost the worker.

``python -m bench.paid_burst [--runs N]`` sends 150 activities as fast as ``send``
goes, each to one host that charges per message (known to, as after a first run)
through a fake node that takes 200 ms per payment, and to one free host.  More
deliveries reach the paid host at once than it has slots
(``MAX_PARALLEL_PER_HOST``) or the worker has payment threads, so the claims hold
some, and a held delivery comes back on a countdown message.  Reported per run,
until every delivery is in: the worker's CPU, PostgreSQL's and Redis's, the task
messages published (Redis ``LPUSH`` calls, ``send``'s 150 included), the holds
recorded, and the paid host's rate (its deliveries over the time from the first
``send`` to its last).  Before 22906ec, each countdown message that found its
delivery held again by a newer claim retried it once more, so the messages for one
delivery grew with its holds.  Results go to ``bench/results/paid_burst.json``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.common import RESULTS_DIR, Env, activity, log, setup_django, start_services
from bench.figures import machine, save_json, summary, wait_quiet
from bench.paid_hosts import (
    PRICE_MSAT,
    SLOW_HOST,
    SLOW_PAYMENT,
    payments_setting,
    reset_payments,
)
from bench.processes import Farm, PaidFarm, Worker, services_cpu_seconds

MESSAGES = 150


def _pushes(env: Env) -> int:
    """``LPUSH`` calls the benchmark's Redis has served: one per task message."""
    import redis

    stats = redis.Redis.from_url(env.redis_url).info("commandstats")
    return int(stats.get("cmdstat_lpush", {}).get("calls", 0))


def one_run(env: Env, paid: PaidFarm, urls: list[str], paid_host: str) -> dict[str, Any]:
    """One burst on a fresh worker, the paid host known to charge per message; the
    sends run with the worker's settings, as a site's web processes do."""
    from django.db.models import Max, Sum
    from django.test import override_settings

    from django_outbox import outbox
    from django_outbox.models import Attempt, Delivery
    from django_outbox.payments.models import PaymentAttempt

    reset_payments(env, {paid_host})
    settings = {"OUTBOX_PAYMENTS": payments_setting(paid)}
    with Worker(env, settings) as worker:
        wait_quiet()
        cpu, services, pushes = worker.cpu_seconds(), services_cpu_seconds(), _pushes(env)
        started = time.time()
        with override_settings(**settings):
            for n in range(MESSAGES):
                outbox.send("https://demo.example/users/alice", activity(n), urls)
        deadline = time.monotonic() + 300
        done = Delivery.objects.filter(state="delivered")
        while done.count() < MESSAGES * len(urls) and time.monotonic() < deadline:
            time.sleep(0.1)
        figures = {
            "worker_cpu_s": worker.cpu_seconds() - cpu,
            "services_cpu_s": services_cpu_seconds() - services,
            "messages_published": _pushes(env) - pushes,
        }
    rows = Delivery.objects.filter(host=paid_host)
    last = rows.filter(state="delivered").aggregate(last=Max("finished_at"))["last"]
    holds = Attempt.objects.filter(host=paid_host, held=True).aggregate(n=Sum("times"))["n"]
    return {
        **figures,
        "delivered": done.count(),
        "paid_delivered": rows.filter(state="delivered").count(),
        "payments": PaymentAttempt.objects.filter(paid_at__isnull=False).count(),
        "holds": holds or 0,
        "paid_rate": MESSAGES / (last.timestamp() - started) if last else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the burst ``--runs`` times and save the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="bursts, each on a fresh worker")
    options = parser.parse_args(argv)
    env = start_services()
    setup_django(env)
    slow = PaidFarm(env, 1, price_msat=PRICE_MSAT, first=SLOW_HOST, pay_delay=SLOW_PAYMENT)
    runs = []
    with Farm(env, 1) as free, slow as paid:
        urls = [paid.urls[0], free.urls[0]]
        paid_host = paid.urls[0].split("//", 1)[1].split(":", 1)[0]
        for i in range(options.runs):
            figures = one_run(env, paid, urls, paid_host)
            log(f"paid-burst run {i + 1}/{options.runs}: {figures}")
            runs.append(figures)
    results: dict[str, Any] = {"machine": machine(), "messages": MESSAGES, "runs": runs}
    for key in ("worker_cpu_s", "services_cpu_s", "messages_published", "holds", "paid_rate"):
        results[key] = summary([run[key] for run in runs])
    save_json(RESULTS_DIR / "paid_burst.json", results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
