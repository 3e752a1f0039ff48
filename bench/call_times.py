"""Where a worker's CPU goes, function by function (``paid_hosts.py --call-times``).

Imported by a benchmark worker (``-I bench.call_times``), it wraps the functions named
in :data:`TARGETS` so that each call adds its calling thread's CPU time
(``time.thread_time``, so waiting on the database or the node counts nothing) and one
to a count.  Each process writes its totals to ``$BENCH_CALL_TIMES_DIR/<pid>.json``
every half second (a pool process ends without running exit hooks), and
:func:`gather` sums them.  Calls nested in other targets count in both.  The wrappers
cost a few microseconds a call: compare runs made with them only with each other.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: ``module:attribute`` or ``module:Class.method`` whose calls are timed, as the module
#: that calls them names them (a function imported by name is wrapped where it is used).
TARGETS = (
    "django_outbox.worker.attempt:sign_headers",
    "django_outbox.worker.recorder:apply_outcomes",
    "django_outbox.worker.recorder:publish_effects",
    "django_outbox.worker.claiming:_claim",
    "django_outbox.worker.claiming:_urgent_jobs",
    "django_outbox.payments.extension:payment_jobs",
    "django_outbox.payments.extension:PaidPush.record",
    "django_outbox.payments.claims:claim_lookup",
    "django_outbox.payments.paying:parse_challenge",
    "django_outbox.payments.paying:check_challenge",
    "django_outbox.payments.settling:store_now",
    "django_outbox.payments.settling:settle_open",
    "django_outbox.payments.clients.lnd:LndRestClient.lookup",
    "django_outbox.payments.clients.lnd:LndRestClient.pay",
    "django_outbox.payments.opening:open_attempt",
    "django_outbox.payments.opening:challenge_lookup",
    "django_outbox.payments.opening:insert",
    "django_outbox.payments.budget:lock_day",
    "django_outbox.payments.budget:reserve",
    "django_outbox.payments.budget:give_back",
    "django_outbox.payments.ledger:_settle",
    "django_outbox.payments.ledger:_released",
    "django_outbox.payments.attempt_statements:payable",
    "django_outbox.payments.attempt_statements:mark_paid",
    "django_outbox.payments.attempt_statements:mark_paid_as_read",
)
_totals: dict[str, list[float]] = {}
_writer: list[int] = []


def _write_every_half_second(folder: Path) -> None:
    while True:
        time.sleep(0.5)
        (folder / f"{os.getpid()}.json").write_text(json.dumps(_totals))


def _timed(label: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        if _writer != [os.getpid()]:  # first call in this process (a fork starts anew)
            _writer[:] = [os.getpid()]
            _totals.clear()
            folder = Path(os.environ["BENCH_CALL_TIMES_DIR"])
            threading.Thread(target=_write_every_half_second, args=(folder,), daemon=True).start()
        started = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            total = _totals.setdefault(label, [0, 0.0])
            total[0] += 1
            total[1] += time.thread_time() - started

    return timed


def install() -> None:
    """Wrap every function of :data:`TARGETS`."""
    for target in TARGETS:
        module_name, path = target.split(":")
        owner: Any = importlib.import_module(module_name)
        *outer, attribute = path.split(".")
        for name in outer:
            owner = getattr(owner, name)
        setattr(owner, attribute, _timed(path, getattr(owner, attribute)))


def gather(folder: Path) -> dict[str, dict[str, float]]:
    """The totals every process wrote to ``folder``: calls, and CPU milliseconds."""
    summed: dict[str, list[float]] = {}
    for path in folder.glob("*.json"):
        for label, (calls, seconds) in json.loads(path.read_text()).items():
            total = summed.setdefault(label, [0, 0.0])
            total[0] += calls
            total[1] += seconds
    return {
        label: {"calls": int(calls), "cpu_ms": round(1000 * seconds, 1)}
        for label, (calls, seconds) in sorted(summed.items())
    }


if "BENCH_CALL_TIMES_DIR" in os.environ:
    import django

    django.setup()
    install()
