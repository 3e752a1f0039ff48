"""The application's own functions, called with a bound on time: resolvers, predicates.

A worker calls code of the application's while it prepares a claim (the key resolver,
the webhook secret resolver, the collection-synchronisation callback) and while it
records outcomes (the sender-gone check).  Any of them may raise or hang: a purged
actor's ``DoesNotExist``, a lookup stuck on a lock.  :func:`call_each` runs a step's
calls on a small pool of threads of the process's own, concurrently, and waits for them
until one deadline: each call's answer, or its exception, or :class:`CallbackTimedOut`
comes back, so that the step gives those deliveries an outcome and goes on.  A call
still running when the step gave up on it keeps its thread; each call is a step of the
``callbacks`` part, so one stuck for ``OUTBOX_STALL_TIMEOUT`` seconds makes the process
unfit (:mod:`~django_outbox.worker.supervisor`), and a fresh process replaces it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Generic, TypeVar

from django.db import DatabaseError, connections

from django_outbox.conf import conf
from django_outbox.exceptions import OutboxError
from django_outbox.worker.supervisor import Part, this_supervisor

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
V = TypeVar("V")

#: Threads that run the application's functions in one process.
THREADS = 4
#: Answers one :class:`Remembered` keeps at most.
KEPT_ANSWERS = 10_000


class CallbackTimedOut(OutboxError):
    """An application function did not answer within the time a step gives it."""


def callback_timeout() -> float:
    """Seconds a step waits for the application's functions: half the stall timeout, so
    that the step itself ends well before it would count as stuck."""
    return conf.STALL_TIMEOUT / 2


class _Pool:
    """The process's threads for application functions, and their supervised part."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.executor = ThreadPoolExecutor(THREADS, thread_name_prefix="outbox-callback")
        self.part = this_supervisor().add(Part("callbacks", conf.STALL_TIMEOUT))


_pool: _Pool | None = None
_pool_lock = threading.Lock()


def _this_pool() -> _Pool:
    global _pool
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():
            _pool = _Pool()
        return _pool


def call_each(
    function: Callable[..., T], calls: Iterable[tuple[K, tuple[object, ...]]], name: str
) -> dict[K, T | Exception]:
    """``function(*args)`` for each ``(key, args)`` of ``calls``, concurrently; by key, its
    answer or what it raised (:class:`CallbackTimedOut` for one that did not answer in
    :func:`callback_timeout` seconds).  ``name`` says which setting's function it is."""
    pool = _this_pool()
    futures: dict[K, Future[T]] = {}
    for key, args in calls:
        if key not in futures:
            futures[key] = pool.executor.submit(_run, pool.part, name, function, args)
    if not futures:
        return {}
    timeout = callback_timeout()
    wait(futures.values(), timeout)
    answers: dict[K, T | Exception] = {}
    for key, future in futures.items():
        if not future.done():
            future.cancel()
            answers[key] = CallbackTimedOut(f"{name} did not answer within {timeout:g} s")
            continue
        error = future.exception()
        if error is None:
            answers[key] = future.result()
        elif isinstance(error, Exception):
            answers[key] = error
        else:
            raise error
    return answers


def _run(part: Part, name: str, function: Callable[..., T], args: tuple[object, ...]) -> T:
    with part.step(name):
        try:
            return function(*args)
        except DatabaseError:
            connections.close_all()  # this thread's: the next call opens a fresh one
            raise


class Remembered(Generic[K, V]):
    """What an application function answered, each answer kept for ``ttl`` seconds
    (exceptions are not kept: the next claim asks again)."""

    def __init__(self, name: str, ask: Callable[..., V], ttl: float) -> None:
        self._name = name
        self._ask = ask
        self._ttl = ttl
        self._found: dict[K, tuple[V, float]] = {}

    def answers(self, calls: Mapping[K, tuple[object, ...]]) -> dict[K, V | Exception]:
        """The answer for each key of ``calls`` (asked with its arguments if not kept)."""
        now = time.monotonic()
        found: dict[K, V | Exception] = {}
        missing: dict[K, tuple[object, ...]] = {}
        for key, args in calls.items():
            kept = self._found.get(key)
            if kept is not None and kept[1] > now:
                found[key] = kept[0]
            else:
                missing[key] = args
        if missing:
            asked = call_each(self._ask, missing.items(), self._name)
            if len(self._found) > KEPT_ANSWERS:
                self._found.clear()
            for key, answer in asked.items():
                if not isinstance(answer, Exception):
                    self._found[key] = (answer, now + self._ttl)
            found.update(asked)
        return found

    def one(self, key: K, *args: object) -> V:
        """The answer for ``key``; raises what the function raised."""
        answer = self.answers({key: args})[key]
        if isinstance(answer, Exception):
            raise answer
        return answer
