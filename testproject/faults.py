"""Faults injected into real worker processes, for the partial-failure tests.

A worker started with the setting ``OUTBOX_TEST_FAULTS`` (a Redis URL) loads this app,
which wraps each function of :data:`POINTS` as the process starts.  A wrapped function
asks Redis, at each call, whether a fault is armed at its point (``tests/support/faults.py``
arms them from the test process): ``raise`` raises :class:`InjectedFault`, ``hang``
blocks for the armed number of seconds; each armed fault fires as many times as it was
armed for, across all worker processes.  Each firing is noted in Redis with the process,
the time, and how many deliveries were being sent at that moment, so that the test
knows when the fault struck and how many duplicates at-least-once may cost.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import time
from collections.abc import Callable
from typing import Any

from django.apps import AppConfig
from django.conf import settings

#: Point name -> the function it wraps (``module:attribute`` or ``module:Class.method``).
POINTS = {
    "key_resolver": "testproject.demo.keys:resolve",
    "gone": "testproject.demo.keys:gone",
    "signal_receiver": "testproject.faults:settled_receiver",
    "ledger": "django_outbox.payments.extension:record_payments",
    "store_payment": "django_outbox.payments.settling:store_now",
    "recorder_save": "django_outbox.worker.recorder:save_outcomes",
    "jobs_for": "django_outbox.worker.process:WorkerProcess.jobs_for",
    "recovery_broker": "django_outbox.upkeep.recovery_pass:canary_present",
    **{
        f"sweep:{step}": f"django_outbox.upkeep.sweeper:{function}"
        for step, function in {
            "expired": "fail_expired",
            "reclaimed": "reclaim_lapsed",
            "dispatched": "dispatch_due",
            "expanded": "expand_lost",
            "freed": "free_waiting",
            "signals": "resend_signals",
        }.items()
    },
    "sweep:payments": "django_outbox.payments.extension:resolve_payments",
}
PREFIX = "outbox:faults:"
FIRED = PREFIX + "fired"


class InjectedFault(RuntimeError):
    """The exception an armed ``raise`` fault raises."""


def _client() -> Any:
    import redis

    return redis.Redis.from_url(settings.OUTBOX_TEST_FAULTS)


def strike(point: str) -> None:
    """Fire the fault armed at ``point``, if one is (and has firings left)."""
    client = _client()
    armed = client.get(PREFIX + point)
    if armed is None or client.decr(PREFIX + point + ":left") < 0:
        return
    plan = json.loads(armed)
    from django_outbox.models import Delivery, DeliveryState

    try:
        sending = Delivery.objects.filter(state=DeliveryState.SENDING).count()
    except Exception:
        sending = -1
    note = {"point": point, "pid": os.getpid(), "at": time.time(), "sending": sending}
    client.rpush(FIRED, json.dumps(note))
    if plan["kind"] == "hang":
        time.sleep(plan["seconds"])
    else:
        raise InjectedFault(f"injected at {point}")


def settled_receiver(sender: type, **kwargs: Any) -> None:
    """A ``delivery_settled`` receiver of the application's (a fault point of its own)."""


def _wrap(function: Callable[..., Any], point: str) -> Callable[..., Any]:
    @functools.wraps(function)
    def faulty(*args: Any, **kwargs: Any) -> Any:
        strike(point)
        return function(*args, **kwargs)

    return faulty


def install() -> None:
    """Wrap every function of :data:`POINTS` (in this process)."""
    from testproject.demo import keys

    for point, target in POINTS.items():
        module_path, name = target.split(":")
        owner: Any = importlib.import_module(module_path)
        *classes, attribute = name.split(".")
        for class_name in classes:
            owner = getattr(owner, class_name)
        setattr(owner, attribute, _wrap(getattr(owner, attribute), point))
    keys.resolve.gone = keys.gone  # type: ignore[attr-defined]


class FaultsConfig(AppConfig):
    """Installs the fault points as the worker's Django starts."""

    name = "testproject.faults"
    label = "outbox_test_faults"

    def ready(self) -> None:
        from django_outbox.signals import delivery_settled

        install()
        delivery_settled.connect(
            lambda sender, **kwargs: settled_receiver(sender, **kwargs),
            weak=False,
            dispatch_uid="outbox-test-faults",
        )
