"""What one paid delivery costs the machine, measured alone rather than inferred from a fan-out.

``python -m bench.paid_alone [--messages N] [--repeats R] [--call-times]`` sends ``N``
activities (600 by default) to two inboxes, one free host and the per-message host
behind the 200 ms node of ``paid_hosts.py``'s ``1-paid-slow-node`` (host known), and the
same activities to the free host alone; the runs alternate, ``R`` pairs (3).  A paid
delivery's cost is the difference of each component's CPU (the worker, PostgreSQL and
Redis, the paid farm, the rest of the machine) over ``N``.

Why: ``1-paid-slow-node`` infers the cost of its 150 paid deliveries from two runs of
15,000 free ones, so a run-to-run spread of a few per cent of the whole becomes several
milliseconds per paid delivery; here most of what is measured is the paid path.  The
figure still includes what the paid farm and the node cost this machine, which a site's
real node and inboxes do not.  Results go to ``bench/results/paid_alone.json``.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from bench.common import RESULTS_DIR, log, setup_django, start_services
from bench.figures import machine, save_json
from bench.paid_hosts import PRICE_MSAT, SLOW_HOST, SLOW_PAYMENT, one_run, payments_setting
from bench.processes import Farm, PaidFarm

#: The CPU components of a run, as :func:`~bench.paid_hosts.one_run` reports them.
COMPONENTS = ("worker", "services", "paid_farm", "free_farm", "bench", "foreign", "machine")


def per_paid(alone: dict[str, Any], paid: dict[str, Any], count: int) -> dict[str, float]:
    """Milliseconds of CPU per paid delivery, component by component: what the run with
    the paid host used beyond the run without it, over its ``count`` paid deliveries."""
    return {
        name: 1000 * (paid[f"{name}_cpu_s"] - alone[f"{name}_cpu_s"]) / count for name in COMPONENTS
    }


def main(argv: list[str] | None = None) -> int:
    """Run the pairs and save the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=600, help="activities per run")
    parser.add_argument("--repeats", type=int, default=3, help="pairs of runs")
    parser.add_argument("--call-times", action="store_true", help="time the worker's calls")
    options = parser.parse_args(argv)
    env = start_services()
    setup_django(env)
    slow = PaidFarm(env, 1, price_msat=PRICE_MSAT, first=SLOW_HOST, pay_delay=SLOW_PAYMENT)
    pairs: list[dict[str, Any]] = []
    with Farm(env, 1) as free, slow as node:
        settings = {"OUTBOX_PAYMENTS": payments_setting(node)}
        paid_hosts = {SLOW_HOST}
        for i in range(options.repeats):
            runs = {
                label: one_run(
                    env,
                    (free, node),
                    urls,
                    hosts,
                    options.messages,
                    settings,
                    wait_paid=bool(hosts),
                    known=True,
                    call_times=options.call_times,
                )
                for label, urls, hosts in (
                    ("free", [free.urls[0]], set()),
                    ("paid", [free.urls[0], *node.urls], paid_hosts),
                )
            }
            cost = per_paid(runs["free"], runs["paid"], options.messages)
            log(f"paid-alone pair {i + 1}/{options.repeats}: ms per paid delivery {cost}")
            pairs.append({"ms_per_paid": cost, **runs})
    medians = {
        name: statistics.median(pair["ms_per_paid"][name] for pair in pairs) for name in COMPONENTS
    }
    results = {"machine": machine(), "messages": options.messages, "medians": medians}
    save_json(RESULTS_DIR / "paid_alone.json", {**results, "pairs": pairs})
    log(f"paid-alone medians, ms of CPU per paid delivery: {medians}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
