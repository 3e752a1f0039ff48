"""Dead servers: healthy throughput with 10% of the hosts silent, and requests per silent host.

``python -m bench.silent_hosts [--quick]`` runs the same workload twice on a fresh
worker with the README's command and the package defaults (breaker: 10 failures, 60 s
cool-off, per host; read timeout 10 s): once with every host answering 202 at once,
once with a tenth of the hosts accepting connections and never answering.  Reported:
the healthy hosts' delivery rate in both runs (delivered to healthy hosts / time from
the first ``send`` to the last healthy delivery) and the requests each silent host got
(counted where they arrive) within the first cool-off after the first ``send``.
Results go to ``bench/results/silent_hosts.json``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.common import RESULTS_DIR, Env, activity, log, reset_state, setup_django, start_services
from bench.figures import machine, save_json, summary
from bench.processes import Worker

#: The package's default breaker cool-off, the window requests are counted in.
COOL_OFF = 60.0


def one_run(env: Env, hosts: int, fraction: float, messages: int) -> dict[str, Any]:
    """One run; figures for the healthy and the silent hosts.

    The inbox servers run in this process (``ServerFarm``) so that each silent host's
    requests can be counted where they arrive; the orchestrator only sleeps and polls
    meanwhile.  The silent variant keeps watching for one cool-off after the start.
    """
    from django.db.models import Max

    from django_outbox import outbox
    from django_outbox.models import Delivery
    from testproject.inbox_servers import ServerFarm

    reset_state(env)
    with ServerFarm(hosts, silent_fraction=fraction) as farm, Worker(env, {}):
        urls = farm.urls()
        silent_hosts = {server.host for server in farm.silent}
        healthy_total = messages * (hosts - len(silent_hosts))
        started = time.time()
        for n in range(messages):
            outbox.send("https://demo.example/users/alice", activity(n), urls)
        healthy = Delivery.objects.exclude(host__in=silent_hosts)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if healthy.filter(state="delivered").count() >= healthy_total:
                break
            time.sleep(0.25)
        done = healthy.filter(state="delivered").aggregate(last=Max("finished_at"))["last"]
        elapsed = (done.timestamp() if done else time.time()) - started
        if silent_hosts:
            time.sleep(max(0.0, started + COOL_OFF - time.time()))
        per_host = [
            sum(1 for r in server.requests() if r.received_at - started < COOL_OFF)
            for server in farm.silent
        ]
        figures = {
            "healthy_rate": healthy_total / elapsed if done else 0.0,
            "elapsed_s": elapsed,
            "silent_hosts": len(silent_hosts),
            "silent_requests_first_cool_off_max": max(per_host, default=0),
            "silent_requests_first_cool_off_mean": sum(per_host) / len(per_host)
            if per_host
            else 0.0,
            "held_deliveries": Delivery.objects.filter(
                host__in=silent_hosts, last_error__startswith="held"
            ).count(),
        }
    log(f"silent-hosts fraction={fraction}: {figures}")
    return figures


def main(argv: list[str] | None = None) -> int:
    """Run both variants ``repeats`` times and save the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one run each, fewer messages")
    options = parser.parse_args(argv)
    env = start_services()
    setup_django(env)
    hosts, messages = 1000, (10 if options.quick else 30)
    repeats = 1 if options.quick else 2
    results: dict[str, Any] = {"machine": machine(), "hosts": hosts, "messages": messages}
    for label, fraction in (("all-healthy", 0.0), ("10%-silent", 0.1)):
        runs = [one_run(env, hosts, fraction, messages) for _ in range(repeats)]
        results[label] = {"rate": summary([r["healthy_rate"] for r in runs]), "runs": runs}
    save_json(RESULTS_DIR / "silent_hosts.json", results)
    ratio = results["10%-silent"]["rate"]["median"] / results["all-healthy"]["rate"]["median"]
    log(f"healthy throughput with 10% silent hosts: {ratio:.0%} of the all-healthy run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
