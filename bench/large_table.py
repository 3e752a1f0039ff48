"""``large-table``: the cpu-bound run on PostgreSQL with two weeks of rows already there.

``run.py --only large-table`` (not in the full run: building the rows takes minutes the
first time; ``python -m bench.large_table --build`` writes them beforehand, without the
benchmark lock, for they are not timed).  On :mod:`bench.large_rows`' data set
(10,000,000 finished deliveries with their history and messages, 1,000,000 queued),
in one session:

- ``EXPLAIN (ANALYZE, BUFFERS)`` of the claim and of the queries that find claimable
  rows (:mod:`bench.plans`), saved to ``bench/results/large-table-plans.txt``;
- the cpu-bound run (20,000 deliveries to 200 instant hosts, RSA-2048) on the empty
  tables of ``outbox_bench``, on the large ones, and on the large ones while another
  process prunes finished rows among the oldest :data:`PRUNED` (:mod:`bench.pruner`,
  the sweeper's prune pass after pass), round after round, with the claim and record
  statement times per delivery from ``pg_stat_statements``, and rows pruned per
  second (the pruned rows are written again before the next session);
- ``send()`` to 100,000 inboxes on empty and on large tables, interleaved, and the
  expansion of its rows a worker does next.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from bench import fanout, large_rows
from bench.common import (
    LOG_DIR,
    PYTHON,
    RESULTS_DIR,
    ROOT,
    Env,
    Tables,
    database_env,
    log,
    reset_services,
    reset_state,
    services_env,
    setup_django,
)
from bench.figures import QUIET_WAIT, summary
from bench.nodes import statements_available
from bench.plans import store_plans
from bench.plans import text as plans_text
from bench.processes import Farm
from bench.throughput import Shape, cpu_shape, one_run


@contextlib.contextmanager
def using(env: Env) -> Iterator[None]:
    """This process's Django connection on ``env``'s database for the block."""
    from django.db import connection

    name = env.database_url.rsplit("/", 1)[1]
    previous = connection.settings_dict["NAME"]
    connection.close()
    connection.settings_dict["NAME"] = name
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict["NAME"] = previous


def prepare(env: Env) -> dict[str, Any]:
    """Migrate the large database and write the data set unless it is there; its
    bounds and sizes (and the seconds the build took, when it ran)."""
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    figures: dict[str, Any] = {}
    if not large_rows.current():
        log(f"large-table: writing the data set ({large_rows.VERSION})")
        figures["build_s"] = round(large_rows.build(), 1)
        log(f"large-table: data set written in {figures['build_s']}s")
    return {**figures, "bounds": large_rows.bounds(), **large_rows.sizes()}


# ------------------------------------------------------------------ the runs -----
#: The oldest finished deliveries made older than the retention period for the prune
#: (with ``--quick``, a tenth).
PRUNED = 3_000_000
#: Inboxes of the ``send()`` runs (with ``--quick``, a tenth).
SEND_TO = 100_000
PLANS = RESULTS_DIR / "large-table-plans.txt"


def _canary(reset: Callable[[Env], None]) -> Callable[[Env], None]:
    """``reset``, then the broker's canary put back: the runs measure steady delivery,
    not the recovery from a lost broker that an emptied Redis would start."""

    def reset_keeping_canary(env: Env) -> None:
        from django_outbox.broker.publish import restore_canary
        from django_outbox.models import Lane

        reset(env)
        restore_canary(Lane.values)

    return reset_keeping_canary


def large_tables(marks: dict[str, int], also: Callable[[], None] = lambda: None) -> Tables:
    """The large tables as a run finds them: what earlier runs added deleted (and
    ``also`` run after that)."""

    def reset(env: Env) -> None:
        large_rows.delete_added(marks)
        reset_services(env)
        also()

    return Tables(_canary(reset), after=marks["delivery"])


def table_counters() -> dict[str, float]:
    """The delivery table's row counters (``pg_stat_user_tables``)."""
    from django.db import connection

    columns = ("n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_tup_del", "n_dead_tup")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(columns)} FROM pg_stat_user_tables "
            "WHERE relname = 'django_outbox_delivery'"
        )
        return dict(zip(columns, map(float, cursor.fetchone()), strict=True))


def counted_run(env: Env, farm: Farm, shape: Shape, tables: Tables) -> dict[str, Any]:
    """:func:`~bench.throughput.one_run` with statement times and PostgreSQL's CPU, and
    the delivery table's row versions written, per delivery."""
    before = table_counters()
    figures = one_run(env, farm, shape, {}, tables, statements=True)
    time.sleep(1.0)  # the worker's backends have exited and flushed their counters
    after = table_counters()
    per = max(1, figures["delivered"])
    figures["table_per_delivery"] = {k: (after[k] - before[k]) / per for k in after}
    return figures


def pruning_run(
    large: Env, farm: Farm, shape: Shape, marks: dict[str, int], pruned: int
) -> dict[str, Any]:
    """The cpu-bound run on the large tables while :mod:`bench.pruner` prunes finished
    deliveries among the first ``pruned``, starting just before the run's worker.

    The retention ends where delivery ``pruned + 1`` was created: every delivery after
    it finished later (the rows are in the order they were created), so that no row
    after ``pruned`` is deleted and :func:`~bench.large_rows.restore` can write them
    all again.  Besides the pruner's own passes, the deliveries it deleted from its
    start to the end of the run (counted just after it) give the rate while the worker
    ran.
    """
    from django.db import connection

    def first(sql: str) -> Any:
        with connection.cursor() as cursor:
            cursor.execute(sql, [pruned + 1])
            return cursor.fetchone()[0]

    count = "SELECT count(*) FROM django_outbox_delivery WHERE id < %s"
    first_kept = first("SELECT created_at FROM django_outbox_delivery WHERE id = %s")
    retention = time.time() - first_kept.timestamp()
    settings = {"OUTBOX_RETENTION_SECONDS": retention}
    log_file = LOG_DIR / f"pruner-{time.time_ns()}.log"
    pruner: list[subprocess.Popen[str]] = []
    window: list[tuple[float, int]] = []

    def start() -> None:
        large_rows.mark_pruned(pruned)
        window.append((time.time(), first(count)))
        pruner.append(
            subprocess.Popen(
                [PYTHON, "-m", "bench.pruner", "--seconds", "120"],
                stdout=log_file.open("w"),
                stderr=subprocess.STDOUT,
                text=True,
                cwd=ROOT,
                env=large.process_env(settings),
                start_new_session=True,
            )
        )
        deadline = time.monotonic() + 60
        while '"ready"' not in log_file.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)

    quiet = QUIET_WAIT["seconds"]
    QUIET_WAIT["seconds"] = 0.0  # the prune keeps the machine busy: that is the point
    try:
        figures = counted_run(large, farm, shape, large_tables(marks, also=start))
        window.append((time.time(), first(count)))
    finally:
        QUIET_WAIT["seconds"] = quiet
        ran_until = time.time()
        for proc in pruner:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    lines = [json.loads(line) for line in log_file.read_text().splitlines() if line.startswith("{")]
    passes = [line for line in lines if "rows" in line]
    seconds = sum(line["s"] for line in passes)
    deleted = next((line["deliveries"] for line in lines if "deliveries" in line), 0)
    (began, before), (ended, after) = window
    return {
        "run": figures,
        "with_worker_s": ended - began,
        "with_worker_deliveries": before - after,
        "with_worker_per_s": (before - after) / (ended - began),
        "retention_s": retention,
        "passes": passes,
        "prune_s": seconds,
        "rows_deleted": sum(line["rows"] for line in passes),
        "deliveries_deleted": deleted,
        "deliveries_per_s": deleted / seconds if seconds else 0.0,
        "rows_per_s": sum(line["rows"] for line in passes) / seconds if seconds else 0.0,
        "pruning_when_run_ended": bool(passes) and passes[-1]["t"] >= ran_until - 0.5,
    }


def send_runs(
    env: Env, large: Env, marks: dict[str, int], rounds: int, size: int
) -> dict[str, Any]:
    """``send()`` to ``size`` inboxes on empty and on large tables, interleaved (the
    expansion timed in the first round of each)."""
    given = fanout.inboxes(size)
    out: dict[str, list[dict[str, Any]]] = {"empty": [], "large": []}
    for i in range(rounds):
        out["empty"].append(fanout.one(env, given, with_expand=i == 0))
        with using(large):
            out["large"].append(
                fanout.one(large, given, with_expand=i == 0, tables=large_tables(marks))
            )
    return {
        name: {
            "send_ms": summary([r["send_ms"] for r in runs]),
            "expand_s": next(r["expand_s"] for r in runs if r["expand_s"] is not None),
            "runs": runs,
        }
        for name, runs in out.items()
    }


def run(env: Env, quick: bool) -> dict[str, Any]:
    """Plans, the interleaved cpu-bound runs, the run during a prune, ``send()``."""
    large = database_env(env, large_rows.DATABASE)
    rounds = 1 if quick else 3
    shape = replace(cpu_shape(quick), repeats=rounds)
    statements_available()
    with using(large):
        out = prepare(large)
        marks = out["bounds"]
        statements_available()
        plans = store_plans(100)
        PLANS.write_text(plans_text(plans))
        out["plans"] = {title: [plan for _, plan in found] for title, found in plans.items()}
    log(f"large-table: plans in {PLANS}")
    empty = Tables(_canary(reset_state))
    runs: dict[str, list[dict[str, Any]]] = {"empty": [], "large": []}
    with Farm(env, shape.hosts) as farm:
        tenth = 10 if quick else 1
        prunes: list[dict[str, Any]] = []
        for i in range(rounds):
            runs["empty"].append(counted_run(env, farm, shape, empty))
            with using(large):
                runs["large"].append(counted_run(large, farm, shape, large_tables(marks)))
                prunes.append(pruning_run(large, farm, shape, marks, PRUNED // tenth))
            log(
                f"large-table round {i + 1}/{rounds}: empty {runs['empty'][-1]['rate']:.0f}/s, "
                f"large {runs['large'][-1]['rate']:.0f}/s, large while pruning "
                f"{prunes[-1]['run']['rate']:.0f}/s ({prunes[-1]['with_worker_per_s']:.0f} "
                "deliveries pruned a second)"
            )
        out["send"] = send_runs(env, large, marks, rounds, SEND_TO // tenth)
    out["prune"] = {
        "with_worker_per_s": summary([p["with_worker_per_s"] for p in prunes]),
        "rate": summary([p["run"]["rate"] for p in prunes]),
        "runs": prunes,
    }
    out["cpu_bound"] = {
        name: {"rate": summary([r["rate"] for r in found]), "runs": found}
        for name, found in runs.items()
    }
    with using(large):
        large_rows.delete_added(marks)
    reset_state(env)
    log("\n" + markdown(out))
    return out


#: The per-delivery columns of :func:`markdown`, by key: heading and decimals.
COLUMNS = {
    "worker_cpu_ms_per_delivery": ("worker CPU ms", 2),
    "postgres_cpu_ms": ("PostgreSQL CPU ms", 3),
    "claim_ms": ("claim ms", 4),
    "record_ms": ("record ms", 4),
    "other_ms": ("other SQL ms", 4),
}


def markdown(out: dict[str, Any]) -> str:
    """The cpu-bound runs as a table (medians per delivery), then the prune and ``send()``."""
    runs = {
        "empty tables": out["cpu_bound"]["empty"]["runs"],
        "11 million rows": out["cpu_bound"]["large"]["runs"],
        "11 million rows, a prune running": [p["run"] for p in out["prune"]["runs"]],
    }
    head = "| tables | deliveries/s, runs | " + " | ".join(h for h, _ in COLUMNS.values()) + " |"
    lines = [head, "|---|---|" + "---:|" * len(COLUMNS)]
    for name, found in runs.items():
        rates = ", ".join(f"{r['rate']:,.0f}" for r in found)
        cells = [
            f"{summary([r[k] for r in found])['median']:.{d}f}" for k, (_, d) in COLUMNS.items()
        ]
        lines.append(f"| {name} | {rates} | " + " | ".join(cells) + " |")
    for prune in out["prune"]["runs"]:
        lines.append(
            f"prune: {prune['deliveries_deleted']:,} deliveries ({prune['rows_deleted']:,} rows "
            f"with their history) in {prune['prune_s']:.1f} s: {prune['deliveries_per_s']:,.0f} "
            f"deliveries/s, {prune['rows_per_s']:,.0f} rows/s; while the worker ran: "
            f"{prune['with_worker_deliveries']:,} in {prune['with_worker_s']:.1f} s, "
            f"{prune['with_worker_per_s']:,.0f} deliveries/s"
        )
    for name, send in out["send"].items():
        ms = send["send_ms"]
        lines.append(
            f"send() on {name} tables: {ms['median']:.0f} ms ({ms['min']:.0f}-{ms['max']:.0f}), "
            f"expansion {send['expand_s']:.2f} s"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``--build``: write (or check) the data set, untimed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="store_true", help="write the data set and stop")
    options = parser.parse_args(argv)
    if not options.build:
        parser.error("the scenario runs with bench/run.py --only large-table")
    env = database_env(services_env(), large_rows.DATABASE)
    setup_django(env)
    log(f"large-table: {prepare(env)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
