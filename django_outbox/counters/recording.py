"""Counting what a worker process does, and writing it to the shared store.

The recorder thread calls :func:`record_batch` once a batch of outcomes is
saved: the batch is added up in a :class:`~django_outbox.counters.tally.Tally`
(a few dictionary updates per delivery) and merged into the process's pending
sums.  A daemon thread writes those to the :mod:`store <django_outbox.counters.shared>`
every :data:`FLUSH_EVERY` seconds, with the engine's thread usage, so that the
sending threads and the recorder never wait for Redis.  Sums that could not be
written are kept and written with the next ones.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django_outbox.conf import conf
from django_outbox.counters.shared import WINDOW, configured_metrics_store
from django_outbox.counters.tally import (
    ATTEMPT_SECONDS,
    ATTEMPTS,
    FANOUT,
    FINISHED,
    REQUESTS,
    SETTLE_SECONDS,
    Tally,
)
from django_outbox.models import FINAL_STATES
from django_outbox.values.outcomes import AttemptResult, Outcome

logger = logging.getLogger("django_outbox.metrics")

#: Seconds between writes of a process's sums to the store.
FLUSH_EVERY = 1.0
#: A final state (the member, or its value) -> its value.
_FINAL: dict[str, str] = {
    **{state: state.value for state in FINAL_STATES},
    **{state.value: state.value for state in FINAL_STATES},
}
_NO_ATTEMPT = (AttemptResult.RELEASED, AttemptResult.EXPIRED, AttemptResult.SKIPPED)


def result_class(outcome: Outcome) -> str | None:
    """How an attempt ended, as ``outbox_attempts_total`` counts it; ``None``: no attempt.

    ``2xx``...``5xx`` by the last answer's status; ``timeout``, ``connect``,
    ``blocked`` (the address is not public) or ``error`` when no answer came;
    ``held`` when an open breaker kept the request from being made.
    """
    if outcome.result is AttemptResult.HELD:
        return "held"
    if outcome.status is not None:
        return f"{outcome.status // 100}xx"
    if outcome.failure:
        return outcome.failure
    return None


def tally_batch(
    outcomes: Iterable[Outcome], finished: Iterable[tuple[Outcome, dict[str, Any]]]
) -> Tally:
    """What ``outcomes`` did, and the deliveries among ``finished`` that reached a final state.

    ``finished`` is the plan's decided ``(outcome, new fields)`` pairs.
    """
    tally = Tally()
    for outcome in outcomes:
        kind = result_class(outcome)
        if kind is None:
            continue
        tally.count((ATTEMPTS, "result", kind))
        if outcome.schemes:
            for scheme in outcome.schemes:
                tally.count((REQUESTS, "scheme", scheme))
            tally.observe(ATTEMPT_SECONDS, outcome.duration)
            tally.timings.append(f"{outcome.row.host} {outcome.duration:.4f}")
    now = time.time()
    sent_at: dict[int, float] = {}  # a message's creation, as a timestamp
    for outcome, fields in finished:
        state = _FINAL.get(fields["state"])
        if state is None:
            continue
        lane = outcome.row.lane
        tally.count((FINISHED, "state", state, "lane", lane))
        message = outcome.message
        if message.created_at is not None:
            sent = sent_at.get(message.id)
            if sent is None:
                sent = sent_at[message.id] = message.created_at.timestamp()
            tally.observe(SETTLE_SECONDS, max(0.0, now - sent), "lane", lane)
    return tally


class _ProcessMetrics:
    """This process's pending sums and the thread that writes them."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.name = f"{socket.gethostname()[:60]}:{self.pid}"
        self.usage: Callable[[], tuple[int, int]] | None = None
        self._pending = Tally()
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._warned_at = 0.0
        self._thread = threading.Thread(target=self._loop, name="outbox-metrics", daemon=True)
        self._thread.start()

    def add(self, tally: Tally) -> None:
        with self._lock:
            self._pending.merge(tally)

    def _loop(self) -> None:
        while True:
            time.sleep(FLUSH_EVERY)
            self.flush()

    def flush(self) -> None:
        """Write the pending sums and the engine's usage to the store now."""
        with self._write_lock:
            with self._lock:
                tally, self._pending = self._pending, Tally()
            try:
                store = configured_metrics_store()
                if tally:
                    store.add(dict(tally.fields()), tally.timings[-WINDOW:])
                if self.usage is not None:
                    in_flight, capacity = self.usage()
                    store.report(self.name, f"{in_flight} {capacity} {time.time():.0f}")
            except Exception:
                with self._lock:
                    tally.timings = tally.timings[-WINDOW:]
                    self._pending.merge(tally)
                if time.monotonic() - self._warned_at > 60:
                    self._warned_at = time.monotonic()
                    logger.warning("could not write metrics; will try again", exc_info=True)

    def stop(self) -> None:
        """Write what is pending and withdraw this process's usage report."""
        with self._write_lock:
            self.usage = None  # the flushing thread reports no more
        self.flush()
        try:
            configured_metrics_store().forget(self.name)
        except Exception:
            logger.warning("could not withdraw this process's metrics report", exc_info=True)


_process: _ProcessMetrics | None = None
_process_lock = threading.Lock()


def _this_process() -> _ProcessMetrics:
    global _process
    with _process_lock:
        if _process is None or _process.pid != os.getpid():
            _process = _ProcessMetrics()
        return _process


def record_batch(
    outcomes: Sequence[Outcome], finished: Iterable[tuple[Outcome, dict[str, Any]]]
) -> None:
    """Count a saved batch (see :func:`tally_batch`); written within :data:`FLUSH_EVERY`."""
    if conf.METRICS and outcomes:
        _this_process().add(tally_batch(outcomes, finished))


def record_fanout(inboxes: int) -> None:
    """Count a committed send to ``inboxes`` distinct inboxes or endpoints (after shared
    inboxes are collapsed) in ``outbox_fanout_inboxes``; written within :data:`FLUSH_EVERY`
    by this process's metrics thread, so the sender never waits for the store."""
    if conf.METRICS:
        tally = Tally()
        tally.observe(FANOUT, inboxes)
        _this_process().add(tally)


def watch_engine(usage: Callable[[], tuple[int, int]]) -> None:
    """Report ``usage()`` (deliveries in flight, the most there may be) with each write."""
    if conf.METRICS:
        _this_process().usage = usage


def flush() -> None:
    """Write this process's pending sums now (tests, and a stopping worker)."""
    if _process is not None and _process.pid == os.getpid():
        _process.flush()


def stop_recording() -> None:
    """Write what is pending and withdraw the engine report: the worker is stopping."""
    if _process is not None and _process.pid == os.getpid():
        _process.stop()
