"""Dead servers: healthy throughput with 10% of the hosts silent, and requests per silent host.

``python -m bench.silent_hosts [--quick]`` runs the same workload twice on a fresh
worker with the README's command and the package defaults (breaker: 10 failures, 60 s
cool-off, per host; read timeout 10 s): once with every host answering 202 at once,
once with a tenth of the hosts accepting connections and never answering.  Reported:
the healthy hosts' delivery rate in both runs (delivered to healthy hosts / time from
the first ``send`` to the last healthy delivery) and the requests each silent host got
(attempts spent on its deliveries; a held delivery spends none) within the run, which
is shorter than one cool-off.  Results go to ``bench/results/silent_hosts.json``.
"""

from __future__ import annotations

import argparse
import subprocess
import time
from typing import Any

from bench.common import (
    PYTHON,
    RESULTS_DIR,
    ROOT,
    Env,
    Farm,
    Worker,
    _read_json_line,
    activity,
    log,
    machine,
    reset_state,
    save_json,
    setup_django,
    start_services,
    summary,
)


class SilentFarm(Farm):
    """A :class:`Farm` in which ``fraction`` of the hosts never answer."""

    def __init__(self, env: Env, count: int, fraction: float) -> None:
        super().__init__(env, count)
        self.fraction = fraction
        self.silent: set[str] = set()

    def __enter__(self) -> SilentFarm:
        args = ["--count", str(self.count), "--silent-fraction", str(self.fraction)]
        self._proc = subprocess.Popen(
            [PYTHON, "-m", "testproject.inbox_servers", *args, "--first-address", self.first],
            stdout=subprocess.PIPE,
            stderr=self._log.open("w"),
            text=True,
            cwd=ROOT,
            env=self.env.process_env(),
            start_new_session=True,
        )
        started = _read_json_line(self._proc, 120)
        self.urls, self.silent = started["urls"], set(started["silent"])
        return self


def _host(url: str) -> str:
    return url.split("//", 1)[1].split("/", 1)[0].split(":", 1)[0]


def one_run(env: Env, hosts: int, fraction: float, messages: int) -> dict[str, Any]:
    """One run; figures for the healthy and the silent hosts."""
    from django.db.models import Max, Min, Sum

    from django_outbox import outbox
    from django_outbox.models import Delivery

    reset_state(env)
    with SilentFarm(env, hosts, fraction) as farm, Worker(env, {}):
        silent_hosts = {_host(url) for url in farm.silent}
        healthy_total = messages * (hosts - len(silent_hosts))
        started = time.time()
        for n in range(messages):
            outbox.send("https://demo.example/users/alice", activity(n), farm.inboxes(1))
        healthy = Delivery.objects.exclude(host__in=silent_hosts)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if healthy.filter(state="delivered").count() >= healthy_total:
                break
            time.sleep(0.25)
        done = healthy.filter(state="delivered").aggregate(last=Max("finished_at"))["last"]
        elapsed = (done.timestamp() if done else time.time()) - started
        per_host = (
            Delivery.objects.filter(host__in=silent_hosts)
            .values("host")
            .annotate(requests=Sum("attempts"), first=Min("created_at"))
        )
        requests = [row["requests"] for row in per_host]
        held = Delivery.objects.filter(host__in=silent_hosts, last_error__startswith="held")
        figures = {
            "healthy_rate": healthy.filter(state="delivered").count() / elapsed,
            "elapsed_s": elapsed,
            "silent_hosts": len(silent_hosts),
            "silent_requests_max": max(requests, default=0),
            "silent_requests_mean": sum(requests) / len(requests) if requests else 0.0,
            "held_deliveries": held.count(),
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
    hosts, messages = 200, (10 if options.quick else 30)
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
