"""Run the benchmarks: ``/tmp/venv/bin/python bench/run.py [--quick] [--only NAME ...]``.

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
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import baselines, fanout, memory, priority, throughput
from bench.common import (
    RESULTS_DIR,
    Env,
    log,
    machine,
    save_json,
    setup_django,
    start_services,
)

Scenario = Callable[[Env, bool], dict[str, Any]]

SCENARIOS: dict[str, Scenario] = {
    "bare": baselines.bare,
    "cpu-bound": throughput.cpu_bound,
    "latency-bound": throughput.latency_bound,
    "naive": baselines.naive,
    "fanout": fanout.run,
    "priority": priority.run,
    "memory": memory.run,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen scenarios and save (and for a full run, report) the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one repeat")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=sorted(SCENARIOS),
        metavar="NAME",
        help=f"run only these: {', '.join(SCENARIOS)}",
    )
    parser.add_argument("--no-report", action="store_true", help="do not touch docs/")
    options = parser.parse_args(argv)
    names = options.only or list(SCENARIOS)
    path = RESULTS_DIR / ("quick.json" if options.quick else "full.json")
    results: dict[str, Any] = {}
    if options.only and path.exists():
        results = json.loads(path.read_text())
    started = time.monotonic()
    env = start_services()
    setup_django(env)
    results["machine"] = machine()
    results.setdefault("scenarios", {})
    results["quick"] = options.quick
    for name in names:
        log(f"scenario {name} ({'quick' if options.quick else 'full'})")
        began = time.monotonic()
        figures = SCENARIOS[name](env, options.quick)
        figures["duration_s"] = round(time.monotonic() - began, 1)
        figures["at"] = time.strftime("%Y-%m-%d %H:%M:%S")
        results["scenarios"][name] = figures
        save_json(path, results)
        log(f"scenario {name} took {figures['duration_s']}s")
    results["total_s"] = round(time.monotonic() - started, 1)
    save_json(path, results)
    log(f"results in {path} ({results['total_s']}s)")
    if not options.quick and not options.no_report:
        from bench import report

        report.write(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
