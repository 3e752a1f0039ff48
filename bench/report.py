"""Write the generated part of ``docs/benchmarks.md`` and ``docs/benchmarks.png``.

Only the text between the ``<!-- bench:begin -->`` and ``<!-- bench:end -->`` markers
is replaced, so the hand-written analysis around it stays.  Run by ``bench/run.py``
after a full run, or alone: ``python -m bench.report [bench/results/full.json]``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import REPO, RESULTS_DIR

DOC = REPO / "docs" / "benchmarks.md"
PLOT = REPO / "docs" / "benchmarks.png"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
COMMAND = ".venv/bin/python bench/run.py"

Row = tuple[str, dict[str, Any] | None, str, str, Callable[[float], bool] | None]


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "/s":
        return f"{value:,.0f}"
    if unit == "ms":
        return f"{value:.2f}" if value < 1 else f"{value:,.1f}" if value < 100 else f"{value:,.0f}"
    if unit == "x":
        return f"{value:.2f}"
    if unit == "s":
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    if unit == "%":
        return f"{value:.0f}%"
    return f"{value:,.1f}"


def _stat(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {"median": median, "min": ordered[0], "max": ordered[-1], "n": len(ordered)}


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """Run-by-run percentage a/b (median, min, max)."""
    if not a or not b or not a.get("values") or not b.get("values"):
        return None
    return _stat([100 * x / y for x, y in zip(a["values"], b["values"], strict=False)])


def _cpu(scenarios: dict[str, Any], key: str, field: str) -> dict[str, Any]:
    """Median, min and max of ``field`` over the runs of scenario ``key`` (with the values)."""
    values = [r[field] for r in scenarios.get(key, {}).get("runs", []) if field in r]
    return {**_stat(values), "values": values} if values else {}


def rows(results: dict[str, Any]) -> list[Row]:
    """(what, summary, unit, target text, target check) for each line of the table."""
    s = results["scenarios"]
    out: list[Row] = []

    def add(what: str, fig: Any, unit: str, target: str = "", check: Any = None) -> None:
        if fig:
            out.append((what, fig, unit, target, check))

    rate = {
        k: s.get(k, {}).get("rate")
        for k in (
            "bare",
            "bare-ed25519",
            "cpu-bound",
            "cpu-bound-ed25519",
            "latency-bound",
            "latency-bound-ed25519",
        )
    }
    add("bare sign+POST loop, 2 processes, RSA-2048 (ceiling)", rate["bare"], "/s")
    add("bare sign+POST loop, 2 processes, Ed25519 (ceiling)", rate["bare-ed25519"], "/s")
    naive = s.get("naive", {})
    add(
        "naive: Celery task per inbox, key parsed each time",
        naive.get("naive", {}).get("rate"),
        "/s",
    )
    add(
        "task per inbox, key cached + keep-alive session", naive.get("cached", {}).get("rate"), "/s"
    )
    for key, bare, what, share in (
        (
            "cpu-bound",
            "bare",
            "**cpu-bound**: 20,000 deliveries, 200 hosts, instant 202, RSA-2048",
            "cpu-bound as % of the bare loop (RSA, run i / run i)",
        ),
        (
            "cpu-bound-ed25519",
            "bare-ed25519",
            "cpu-bound signed with Ed25519",
            "cpu-bound Ed25519 as % of the Ed25519 bare loop",
        ),
    ):
        add(what, rate[key], "/s", ">= 1,500", lambda v: v >= 1500)
        add(share, _ratio(rate[key], rate[bare]), "%", ">= 70%", lambda v: v >= 70)
    for key, bare, label in (
        ("cpu-bound", "bare", "RSA"),
        ("cpu-bound-ed25519", "bare-ed25519", "Ed25519"),
    ):
        worker = _cpu(s, key, "worker_cpu_ms_per_delivery")
        ceiling = _cpu(s, bare, "cpu_ms_per_delivery")
        add(f"worker CPU per delivery, cpu-bound {label}", worker, "ms")
        add(f"bare loop CPU per delivery, {label}", ceiling, "ms")
        if worker and ceiling:
            pairs = zip(worker["values"], ceiling["values"], strict=False)
            times = _stat([w / c for w, c in pairs])
            add(f"worker CPU / bare loop CPU, {label}", times, "x", "<= 1.3", lambda v: v <= 1.3)
    for key, what in (
        ("latency-bound", "**latency-bound**: 10,000 deliveries, 1,000 hosts answering in 100 ms"),
        ("latency-bound-ed25519", "latency-bound signed with Ed25519"),
    ):
        add(what, rate[key], "/s", ">= 2,000", lambda v: v >= 2000)
    add(
        "latency-bound as % of the bare loop (RSA, run i / run i)",
        _ratio(rate["latency-bound"], rate["bare"]),
        "%",
        ">= 65% (or 2,000/s)",
        lambda v: v >= 65,
    )
    targets = {"10000": ("< 50 ms", 50.0), "100000": ("< 500 ms", 500.0)}
    sizes = s.get("fanout", {}).get("sizes", {})
    for size, fig in sizes.items():
        text, limit = targets.get(size, ("", None))
        check = (lambda v, lim=limit: v < lim) if limit else None
        add(
            f"**`send`** to {int(size):,} inboxes (returns: committed + published)",
            fig["send_ms"],
            "ms",
            text,
            check,
        )
        add(f"... of which checking the {int(size):,} inbox URLs", fig["validate_ms"], "ms")
    for size, fig in s.get("fanout", {}).get("recipients", {}).items():
        text, limit = targets.get(size, ("", None))
        check = (lambda v, lim=limit: v < lim) if limit else None
        add(
            f"**`send`** to {int(size):,} recipients, ten per shared inbox "
            f"({fig['targets']:,} deliveries)",
            fig["send_ms"],
            "ms",
            text,
            check,
        )
        add("... of which collapsing them to checked inbox URLs", fig["validate_ms"], "ms")
    for size, fig in sizes.items():
        if int(size) > 500 and fig["expand_s"].get("n"):
            add(
                f"expansion of {int(size):,} rows (a worker's job, timed in-process)",
                fig["expand_s"],
                "s",
            )
    prio = s.get("priority")
    if prio:
        add(
            f"**priority**: 1-inbox send during a {prio['bulk']:,} fan-out, p50 (per round)",
            prio["p50_s"],
            "s",
        )
        add(
            f"priority: p99 of {prio['sends']} sends (per round), README worker command",
            prio["p99_s"],
            "s",
            "< 1 s",
            lambda v: v < 1.0,
        )
        if prio.get("dedicated", {}).get("p99_s") is not None:
            d = prio["dedicated"]
            add(
                "priority, + dedicated worker `-Q outbox.priority -c 1`: p50",
                _stat([d["p50_s"]]),
                "s",
            )
            add(
                "priority, + dedicated worker `-Q outbox.priority -c 1`: p99",
                _stat([d["p99_s"]]),
                "s",
                "< 1 s",
                lambda v: v < 1.0,
            )
        control = prio.get("control", {})
        if control.get("latencies_s"):
            add(
                f"control: worker `-Q outbox,outbox.priority`, {control.get('bulk', 0):,} fan-out",
                _stat(control["latencies_s"]),
                "s",
                "queues reversed: for comparison",
            )
    memory = s.get("memory")
    if memory:
        for size, fig in memory["sizes"].items():
            add(
                f"**worker peak RSS** (sum of VmHWM), {int(size):,} queued",
                _stat([fig["peak_rss_mb"]]),
                "MB",
            )
        add(
            "growth from 10k to 100k queued",
            _stat([memory["growth_mb"]]),
            "MB",
            "<= 20 MB",
            lambda v: abs(v) <= 20,
        )
        drains = [
            f["delivered"] / f["elapsed_s"] for f in memory["sizes"].values() if f["elapsed_s"]
        ]
        add(
            "drain rate: 10,000 deliveries, rows written beforehand (memory runs, RSA)",
            _stat(drains) if drains else None,
            "/s",
        )
    return out


def components_table(results: dict[str, Any]) -> str:
    """Per-step costs, if the components scenario ran."""
    steps = results["scenarios"].get("components", {}).get("steps")
    if not steps:
        return ""
    lines = ["| step (one thread, per delivery) | wall µs | CPU µs |", "|---|---:|---:|"]
    lines += [f"| {k} | {v['wall_us']:,.0f} | {v['cpu_us']:,.0f} |" for k, v in steps.items()]
    return "\n".join(lines)


def experiments_table(results: dict[str, Any]) -> str:
    """What-if variants, if ``--only experiments`` ran."""
    exp = results["scenarios"].get("experiments")
    if not exp:
        return ""
    lines = [
        f"| variant ({exp['deliveries']:,} pre-queued, Ed25519) | deliveries/s | "
        "worker CPU ms/delivery | engine loop | recorder | main thread |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, v in exp["variants"].items():
        for r in v["runs"]:
            t = r["threads_ms_per_delivery"]
            lines.append(
                f"| {label} | {r['rate']:,.0f} | {r['worker_cpu_ms_per_delivery']:.2f} | "
                f"{t.get('outbox-engine', 0):.2f} | {t.get('outbox-recorder', 0):.2f} | "
                f"{t.get('MainThread', 0):.2f} |"
            )
    return "\n".join(lines)


def table(results: dict[str, Any]) -> str:
    """The markdown results table."""
    lines = [
        "| measurement | median | min | max | unit | n | target | met |",
        "|---|---:|---:|---:|---|---:|---|---|",
    ]
    for what, fig, unit, target, check in rows(results):
        if not fig or fig.get("median") is None:
            continue
        met = "" if check is None else ("yes" if check(fig["median"]) else "**no**")
        lines.append(
            f"| {what} | {_fmt(fig['median'], unit)} | {_fmt(fig['min'], unit)} | "
            f"{_fmt(fig['max'], unit)} | {'deliveries/s' if unit == '/s' else unit} | "
            f"{fig.get('n', 1)} | {target} | {met} |"
        )
    return "\n".join(lines)


def machine_table(m: dict[str, Any], scenarios: dict[str, Any] | None = None) -> str:
    """The machine and versions (and the commit each scenario measured)."""
    by_commit: dict[str, list[str]] = {}
    for name, fig in (scenarios or {}).items():
        by_commit.setdefault(fig.get("commit", m["commit"]), []).append(name)
    commits = (
        "; ".join(
            f"{c}" if len(by_commit) == 1 else f"{c} ({', '.join(names)})"
            for c, names in by_commit.items()
        )
        or m["commit"]
    )
    items = [
        ("CPU", f"{m['cpu']}, {m['nproc']} cores (`nproc`), shared by everything below"),
        ("RAM", f"{m['ram_gb']} GB"),
        ("Python", m["python"]),
        ("Celery / kombu", f"{m['celery']} / {m['kombu']}"),
        ("Django", m["django"]),
        ("requests", m["requests"]),
        ("PostgreSQL", m["postgresql"]),
        ("Redis", m["redis"]),
        ("django_outbox", commits),
    ]
    return "\n".join(["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in items)])


def generated(results: dict[str, Any]) -> str:
    """The generated block of the document."""
    return "\n\n".join(
        [
            BEGIN,
            f"Results of `{COMMAND}` (full run, {results.get('total_s', 0) / 60:.1f} min "
            "including the waits for a quiet machine, "
            f"finished {max(v.get('at', '') for v in results['scenarios'].values())}). "
            "Raw figures, every run: `bench/results/full.json`.",
            "### Machine\n\n" + machine_table(results["machine"], results["scenarios"]),
            "### Results\n\n" + table(results),
            "![Throughput, send time, priority latency and worker memory](benchmarks.png)",
            *_optional("Cost of each step", components_table(results)),
            *_optional("What-if experiments (`--only experiments`)", experiments_table(results)),
            END,
        ]
    )


def _optional(title: str, body: str) -> list[str]:
    return [f"### {title}\n\n{body}"] if body else []


def write(results: dict[str, Any]) -> None:
    """Replace the generated block in docs/benchmarks.md and redraw the plot."""
    from bench.plot import plot

    plot(results, PLOT)
    block = generated(results)
    text = DOC.read_text() if DOC.exists() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    DOC.write_text(head + block + tail)


if __name__ == "__main__":
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS_DIR / "full.json"
    write(json.loads(source.read_text()))
