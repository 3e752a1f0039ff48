"""Run the benchmarks: ``.venv/bin/python bench/run.py [--quick] [--only NAME ...]``.

Copies ``django_outbox/``, ``testproject/`` and ``bench/`` to ``.run/bench/code-*`` and
runs that copy (others may edit the tree meanwhile; ``--no-snapshot`` runs in place).
Starts (or reuses) Redis and PostgreSQL with ``scripts/services``, uses the database
``outbox_bench`` and Redis DB 9, runs each scenario in turn (one at a time: the
machine has 2 cores) and writes ``bench/results/full.json`` (``quick.json`` with
``--quick``).  A full run also rewrites the generated part of ``docs/benchmarks.md``
and ``docs/benchmarks.png``.  ``--only`` reruns some scenarios and merges them into
the existing results.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import (
    baselines,
    components,
    experiments,
    fanout,
    large_table,
    memory,
    nodes,
    priority,
    throughput,
)
from bench.common import (
    REPO,
    RESULTS_DIR,
    Env,
    log,
    setup_django,
    snapshot,
    start_rabbitmq,
    start_services,
)
from bench.figures import QUIET_WAIT, machine, save_json

Scenario = Callable[[Env, bool], dict[str, Any]]

SCENARIOS: dict[str, Scenario] = {
    "bare": baselines.bare,
    "bare-ed25519": baselines.bare_ed25519,
    "cpu-bound": throughput.cpu_bound,
    "cpu-bound-ed25519": throughput.cpu_bound_ed25519,
    "latency-bound": throughput.latency_bound,
    "latency-bound-ed25519": throughput.latency_bound_ed25519,
    "naive": baselines.naive,
    "fanout": fanout.run,
    "priority": priority.run,
    "memory": memory.run,
    "components": components.run,
}
#: Run only when named with --only (they take minutes and size recommendations).
OPTIONAL: dict[str, Scenario] = {
    "experiments": experiments.run,
    "nodes": nodes.run,
    "large-table": large_table.run,
    "cpu-bound-uvloop": throughput.cpu_bound_uvloop,
    "latency-bound-uvloop": throughput.latency_bound_uvloop,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen scenarios and save (and for a full run, report) the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one repeat")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=sorted({**SCENARIOS, **OPTIONAL}),
        metavar="NAME",
        help=f"run only these: {', '.join({**SCENARIOS, **OPTIONAL})}",
    )
    parser.add_argument("--no-report", action="store_true", help="do not touch docs/")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=120.0,
        help="seconds to wait, before each timed run, for the machine to be idle (default 120)",
    )
    parser.add_argument(
        "--no-snapshot",
        action="store_true",
        help="run the code in place instead of a copy taken at the start",
    )
    parser.add_argument(
        "--broker",
        choices=("redis", "rabbitmq"),
        default="redis",
        help="the Celery broker of every scenario (default redis; rabbitmq starts one with "
        "scripts/services and writes *-rabbitmq.json, leaving docs/ alone)",
    )
    options = parser.parse_args(argv)
    if not options.no_snapshot and "BENCH_REPO" not in os.environ:
        code, described = snapshot()
        log(f"running a snapshot of the code: {code} ({described})")
        env = {**os.environ, "BENCH_REPO": str(REPO), "BENCH_COMMIT": described}
        args = [sys.executable, str(code / "bench" / "run.py"), *(argv or sys.argv[1:])]
        os.chdir(code)  # Celery puts the working directory first on sys.path
        os.execve(sys.executable, args, env)
    QUIET_WAIT["seconds"] = options.quiet_wait
    names = options.only or list(SCENARIOS)
    suffix = "" if options.broker == "redis" else f"-{options.broker}"
    path = RESULTS_DIR / (("quick" if options.quick else "full") + suffix + ".json")
    results: dict[str, Any] = {}
    if options.only and path.exists():
        results = json.loads(path.read_text())
    started = time.monotonic()
    env = start_services()
    if options.broker == "rabbitmq":
        env = replace(env, broker_url=start_rabbitmq())
    setup_django(env)
    results["broker"] = options.broker
    results["machine"] = machine()
    results.setdefault("scenarios", {})
    results["quick"] = options.quick
    for name in names:
        log(f"scenario {name} ({'quick' if options.quick else 'full'})")
        began = time.monotonic()
        figures = {**SCENARIOS, **OPTIONAL}[name](env, options.quick)
        figures["duration_s"] = round(time.monotonic() - began, 1)
        figures["commit"] = results["machine"]["commit"]
        figures["at"] = time.strftime("%Y-%m-%d %H:%M:%S")
        results["scenarios"][name] = figures
        save_json(path, results)
        log(f"scenario {name} took {figures['duration_s']}s")
    if not options.only:
        results["total_s"] = round(time.monotonic() - started, 1)
    save_json(path, results)
    log(f"results in {path} ({results.get('total_s', '-')}s)")
    if not options.quick and not options.no_report and options.broker == "redis":
        from bench import report

        report.write(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
