"""The figure of ``docs/benchmarks.png``: throughput, send time, priority, memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(results: dict[str, Any], path: Path) -> None:
    """Four panels: throughput, send time, priority latencies, worker memory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = results["scenarios"]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    ax = axes[0][0]
    bars = [
        ("bare\nRSA", s.get("bare", {}).get("rate")),
        ("cpu-bound\nRSA", s.get("cpu-bound", {}).get("rate")),
        ("bare\nEd25519", s.get("bare-ed25519", {}).get("rate")),
        ("cpu-b.\nEd25519", s.get("cpu-bound-ed25519", {}).get("rate")),
        ("latency\nRSA", s.get("latency-bound", {}).get("rate")),
        ("latency\nEd25519", s.get("latency-bound-ed25519", {}).get("rate")),
        ("naive", s.get("naive", {}).get("naive", {}).get("rate")),
        ("task/inbox\ncached", s.get("naive", {}).get("cached", {}).get("rate")),
    ]
    bars = [(n, f) for n, f in bars if f and f.get("median") is not None]
    xs = range(len(bars))
    med = [f["median"] for _, f in bars]
    err = [[f["median"] - f["min"] for _, f in bars], [f["max"] - f["median"] for _, f in bars]]
    ax.bar(xs, med, yerr=err, capsize=4, color="#4c72b0")
    ax.set_xticks(list(xs), [n for n, _ in bars], fontsize=8)
    ax.axhline(1500, color="#c44e52", ls="--", lw=1, label="cpu-bound target 1,500/s")
    bare = s.get("bare", {}).get("rate") or {}
    if bare.get("median"):
        for share, style, scenario in ((0.70, "-.", "cpu"), (0.65, ":", "latency")):
            label = f"{share:.0%} of the bare RSA loop ({scenario}-bound target)"
            ax.axhline(share * bare["median"], color="#dd8452", ls=style, lw=1, label=label)
    ax.set_ylabel("deliveries/s (median, min-max)")
    ax.set_title("Throughput")
    ax.legend(fontsize=8)
    ax = axes[0][1]
    sizes = s.get("fanout", {}).get("sizes", {})
    if sizes:
        xs2 = [int(k) for k in sizes]
        ys = [v["send_ms"]["median"] for v in sizes.values()]
        lo = [v["send_ms"]["median"] - v["send_ms"]["min"] for v in sizes.values()]
        hi = [v["send_ms"]["max"] - v["send_ms"]["median"] for v in sizes.values()]
        ax.errorbar(xs2, ys, yerr=[lo, hi], marker="o", capsize=4, label="send() returns")
        ax.scatter(
            [10_000, 100_000],
            [50, 500],
            marker="_",
            s=400,
            color="#c44e52",
            label="targets",
            zorder=3,
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("inboxes")
        ax.set_ylabel("ms")
        ax.legend(fontsize=8)
    ax.set_title("Fan-out: time for outbox.send to return")
    ax = axes[1][0]
    prio = s.get("priority", {})
    for i, r in enumerate(prio.get("rounds", [])):
        lat = sorted(r["latencies_s"])
        if lat:
            ax.plot(
                [1000 * v for v in lat],
                [(k + 1) / len(lat) for k in range(len(lat))],
                label=f"round {i + 1}",
                drawstyle="steps-post",
            )
    dedicated = sorted(prio.get("dedicated", {}).get("latencies_s") or [])
    if dedicated:
        ax.plot(
            [1000 * v for v in dedicated],
            [(k + 1) / len(dedicated) for k in range(len(dedicated))],
            label="dedicated priority worker",
            drawstyle="steps-post",
            color="black",
        )
    ax.axvline(1000, color="#c44e52", ls="--", lw=1, label="target p99 1 s")
    ax.set_xscale("log")
    ax.set_xlabel("ms from send() to the inbox reading the request")
    ax.set_ylabel("fraction of sends")
    ax.set_title(f"Priority lane during a {prio.get('bulk', 0):,}-inbox fan-out")
    if prio:
        ax.legend(fontsize=8)
    ax = axes[1][1]
    for size, fig_ in s.get("memory", {}).get("sizes", {}).items():
        samples = fig_["samples"]
        ax.plot(
            [d for _, d, _ in samples], [r for _, _, r in samples], label=f"{int(size):,} queued"
        )
    ax.set_xlabel("deliveries done")
    ax.set_ylabel("worker RSS, MB (sum of processes)")
    ax.set_title("Worker memory while draining the queue")
    if s.get("memory"):
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
