"""What the attempt history and the metrics add to saving a batch of outcomes.

``python bench/history_cost.py [--batches 20]``

Saves batches of 500 outcomes with :func:`~django_outbox.worker.recorder.apply_outcomes`
on PostgreSQL (the ``outbox_status_bench`` database of ``bench/status_command.py``), as
the recorder does, and reports CPU and wall microseconds per outcome for:

- deliveries that succeed at the first attempt (the cpu-bound benchmark's case: no
  history row is written), with the metrics on and off;
- failed attempts (one history row each), with the history written and not.

Compare the differences with the cpu-bound scenario's worker CPU per delivery
(``bench/run.py --only cpu-bound``) for the share of a delivery's cost.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from unittest import mock

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS_DIR, Env, _with_path, log, setup_django, start_services
from bench.figures import save_json
from bench.status_command import DATABASE

BATCH = 500


def one_batch(result: str) -> tuple[float, float]:
    """Claim and save one batch of ``BATCH`` outcomes; (wall, CPU) seconds of the save."""
    from django.utils import timezone

    from django_outbox import outbox
    from django_outbox.models import Delivery
    from django_outbox.store.claim_rows import load_messages, new_token
    from django_outbox.store.transitions import claim
    from django_outbox.values.outcomes import AttemptResult, Outcome
    from django_outbox.worker.recorder import apply_outcomes

    inboxes = [f"https://h{i % 50}.example/users/{time.monotonic_ns()}/{i}" for i in range(BATCH)]
    message = outbox.send("https://demo.example/users/alice", {"type": "Create"}, inboxes)
    assert message is not None
    ids = list(Delivery.objects.filter(message=message).values_list("id", flat=True))
    Delivery.objects.filter(id__in=ids).update(next_attempt_at=timezone.now())
    rows = claim(ids, new_token())
    data = load_messages([message.pk])[message.pk]
    kind = AttemptResult(result)
    status = 202 if kind is AttemptResult.DELIVERED else 503
    outcomes = [
        Outcome(row, data, kind, status, "" if status == 202 else "HTTP 503", None, None,
                time.time(), 0.02, ("draft-cavage",), "")
        for row in rows
    ]  # fmt: skip
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    apply_outcomes(outcomes)
    return time.perf_counter() - wall0, time.thread_time() - cpu0


def variant(result: str, batches: int, patches: Sequence[Any]) -> dict[str, float]:
    """Microseconds per outcome over ``batches`` batches (after one to warm up)."""
    with ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        one_batch(result)
        wall = cpu = 0.0
        for _ in range(batches):
            w, c = one_batch(result)
            wall, cpu = wall + w, cpu + c
    outcomes = batches * BATCH
    return {"wall_us": round(1e6 * wall / outcomes, 1), "cpu_us": round(1e6 * cpu / outcomes, 1)}


def main(argv: Sequence[str] | None = None) -> int:
    """Measure each variant, alternating them so that the machine's load falls on all."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args(argv)
    env = start_services()
    setup_django(Env(_with_path(env.database_url, "/" + DATABASE), env.redis_url))
    from django.test import override_settings

    no_history = mock.patch("django_outbox.store.transitions.save_history", return_value=0)
    variants: dict[str, Callable[[], dict[str, float]]] = {
        "delivered, metrics on": lambda: variant("delivered", options.batches, []),
        "delivered, metrics off": lambda: variant(
            "delivered", options.batches, [override_settings(OUTBOX_METRICS=False)]
        ),
        "failed, history written": lambda: variant("retry", options.batches, []),
        "failed, no history": lambda: variant("retry", options.batches, [no_history]),
    }
    found: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for _ in range(options.rounds):
        for name, run in variants.items():
            found[name].append(run())
    best = {name: min(runs, key=lambda r: r["cpu_us"]) for name, runs in found.items()}
    for name, figures in best.items():
        log(f"{name:26} {figures['cpu_us']:7.1f} us CPU  {figures['wall_us']:7.1f} us wall")
    save_json(RESULTS_DIR / "history_cost.json", {"per_outcome": best, "batch": BATCH})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
