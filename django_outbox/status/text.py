"""``outbox status`` as text: the snapshot, or one host, in a terminal's width."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from django_outbox.status.host_report import HostReport
from django_outbox.status.processes import ProcessStatus
from django_outbox.status.snapshot import RECENT, STATES, Snapshot
from django_outbox.status.timings import Quantiles


def seconds(value: float | None) -> str:
    """A duration for people: ``0.042s``, ``2m 31s``, ``3h 02m``, ``2d 4h``; ``-`` for none."""
    if value is None:
        return "-"
    if value < 10:
        return f"{value:.3g}s"
    whole = int(value)
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s" if whole >= 60 else f"{whole}s"
    if whole < 86400:
        return f"{whole // 3600}h {whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d {whole % 86400 // 3600}h"


def clock(moment: datetime | None) -> str:
    """A moment as ``YYYY-MM-DD HH:MM:SS`` UTC; ``-`` for none."""
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment else "-"


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """Columns padded to fit: the first left-aligned, numbers (the others) right-aligned."""
    cells = [list(header), *([_cell(value) for value in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return [
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in cells
    ]


def _cell(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return "-" if value is None else ("yes" if value else "no")
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _quantiles(label: str, found: Quantiles | None, source: str) -> str:
    if found is None:
        return f"{label}: no samples ({source})"
    return (
        f"{label}: p50 {seconds(found.p50)}  p90 {seconds(found.p90)}  "
        f"p99 {seconds(found.p99)}  ({found.samples:,} {source})"
    )


def render_snapshot(snapshot: Snapshot) -> str:
    """The whole snapshot, most urgent first: how far behind, then how fast, then who fails."""
    lines = [f"outbox status at {clock(snapshot.taken_at)} UTC (took {snapshot.took:.2f}s)", ""]
    rows = [
        [lane.lane, *(lane.counts[state] for state in STATES), lane.due, seconds(lane.oldest_due)]
        for lane in snapshot.lanes
    ]
    totals = snapshot.totals()
    rows.append(
        [
            "all lanes",
            *(totals[state] for state in STATES),
            sum(lane.due for lane in snapshot.lanes),
            seconds(snapshot.oldest_due),
        ]
    )
    lines += table(["lane", *STATES, "due", "oldest due"], rows)
    engine = snapshot.engine
    lines += [
        "",
        f"in flight: {totals['sending']:,} sending; engines: {engine[1]:,} requests under way "
        f"(at most {engine[2]:,}) in {engine[0]} worker processes",
        f"finished in the last {RECENT // 60} min: {snapshot.finished_recently:,} "
        f"({snapshot.per_second:,}/s)",
    ]
    if snapshot.per_minute:
        per_minute = "  ".join(
            f"{minute:%H:%M} {sum(counts.values()):,}" for minute, counts in snapshot.per_minute
        )
        lines.append(f"  per minute: {per_minute}")
    lines.append(_quantiles("send-to-settle", snapshot.settle, "latest finished deliveries"))
    lines.append(_quantiles("attempt time", snapshot.attempt, "latest attempts"))
    lines += [
        "",
        f"failing hosts: {snapshot.hosts_failing:,} ({snapshot.hosts_unavailable:,} unavailable)",
    ]
    if snapshot.failing:
        lines += table(
            ["host", "failed attempts (1h)", "last failure", "failure days", "unavailable since"],
            (
                [
                    h.host,
                    h.failures,
                    clock(h.last_failure),
                    h.failure_days,
                    clock(h.unavailable_since),
                ]
                for h in snapshot.failing
            ),
        )
    if snapshot.slowest:
        lines += ["", "slowest hosts (latest attempts):"]
        lines += table(
            ["host", "attempts", "p90", "slowest"],
            ([h.host, h.attempts, seconds(h.p90), seconds(h.slowest)] for h in snapshot.slowest),
        )
    lines += ["", *render_processes(snapshot.processes)]
    lines += ["", f"open breakers: {len(snapshot.breakers):,}"]
    if snapshot.breakers:
        lines += table(
            ["breaker", "failures", "open until", "probing"],
            ([b.key, b.failures, clock(b.open_until), b.probing] for b in snapshot.breakers),
        )
    lines += [f"problem: {problem}" for problem in snapshot.problems]
    return "\n".join(lines)


def render_host(report: HostReport) -> str:
    """One host: its deliveries, its health, its breaker and its latest failed attempts."""
    lines = [f"host {report.host}", ""]
    lines += table(
        ["", *STATES, "due", "oldest due"],
        [
            [
                "deliveries",
                *(report.counts[s] for s in STATES),
                report.due,
                seconds(report.oldest_due),
            ]
        ],
    )
    failing = report.failing
    if failing is None:
        lines.append("\nhealth: not failing (no Host row)")
    else:
        unavailable = clock(failing.unavailable_since) if failing.unavailable_since else "no"
        lines.append(
            f"\nhealth: failing since {clock(failing.first_failure_at)}, on "
            f"{failing.failure_days} days; unavailable: {unavailable}"
        )
        lines.append(f"reason: {failing.last_error or '-'}")
    pause = report.pause
    if pause is not None:
        end = f"until {clock(pause.until)}" if pause.until else "until resumed"
        lines.append(f"paused since {clock(pause.paused_at)}, {end}: {pause.reason or '-'}")
    breaker = report.breaker
    lines.append(
        "breaker: closed"
        if breaker is None
        else f"breaker: open until {clock(breaker.open_until)} after {breaker.failures} failures"
        + (", probe under way" if breaker.probing else "")
    )
    if report.recent is not None:
        recent = report.recent
        lines.append(
            f"latest attempts: {recent.attempts} (p90 {seconds(recent.p90)}, "
            f"slowest {seconds(recent.slowest)})"
        )
    lines += ["", f"attempt history (latest {len(report.history)}):" if report.history else ""]
    lines += (
        []
        if not report.history
        else table(
            ["at", "delivery", "attempt", "result", "status", "took", "scheme", "wait", "error"],
            (
                [
                    clock(a.at),
                    str(a.delivery_id),
                    f"{a.number}" + (f" held x{a.times}" if a.held else ""),
                    a.result,
                    a.status,
                    seconds(a.duration),
                    a.scheme or "-",
                    seconds(a.wait),
                    a.error[:60],
                ]
                for a in report.history
            ),
        )
    )
    lines += [f"problem: {problem}" for problem in report.problems]
    return "\n".join(lines)


def render_processes(processes: Sequence[ProcessStatus]) -> list[str]:
    """The worker processes' section: how many beat, who leads, and each one's state."""
    beating = [process for process in processes if process.beating]
    leaders = [process.name for process in beating if process.leader]
    if not beating:
        head = "worker processes: NONE is beating: nothing is being sent or recovered"
    else:
        led = f"leader {leaders[0]}" if leaders else "no leader yet"
        head = f"worker processes: {len(beating)} beating, {led}"
    rows = (
        [
            process.name,
            "leader" if process.leader else ("may not lead" if not process.can_lead else ""),
            f"{seconds(process.silent_for)} ago" + ("" if process.beating else " (dead)"),
            f"{process.backlog:,}",
            ", ".join(_ailing(process)) or "all well",
        ]
        for process in processes
    )
    return [head, *table(["process", "role", "last beat", "recorder backlog", "parts"], rows)]


def _ailing(process: ProcessStatus) -> list[str]:
    found = []
    for name in process.unwell:
        part = process.parts[name]
        state = "dead" if not part.get("alive", True) else f"stuck {seconds(part['busy_for'])}"
        doing = f" ({part['doing']})" if part.get("doing") else ""
        found.append(f"{name} {state}{doing}")
    return found
