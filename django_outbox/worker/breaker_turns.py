"""A breaker store's blocking calls, asked for one turn of an event loop at a time.

A delivery to a destination this process does not trust yet asks the breaker store,
which may block (Redis), so the question goes to the loop's executor.  The deliveries
that one claim starts often meet new destinations in the same turn of the loop (a
process's first contact with each host): asked one by one, each costs a thread
handoff and, in Redis, a round trip.  Here what the coroutines of one loop ask in one
turn goes in one call of
:meth:`~django_outbox.breakers.BreakerStore.admit_many` (reports: ``record_many``),
one handoff and one pipelined round trip; so do the turns asked of a host rate store
(:meth:`~django_outbox.breakers.rates.RateStore.take_many`).  Each answer is the one the store would
have given alone: the calls run in the order they were asked.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from django_outbox.breakers import Admission, BreakerPolicy, BreakerStore, Report
from django_outbox.breakers.rates import RateRequest, RateStore, Turn

_Pending = list[tuple[Any, Any, "asyncio.Future[Any]"]]

#: What each kind of question calls on its store, with all of a turn's requests.
_CALLS = ("admit_many", "record_many", "take_many")

#: Per loop: the admissions asked this turn (index 0), the reports (1), the rate turns (2).
_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[_Pending, _Pending, _Pending]]
_turns = weakref.WeakKeyDictionary()


async def admit(store: BreakerStore, key: str, policy: BreakerPolicy) -> Admission:
    """``store.admit(key, policy)`` without blocking the loop (with this turn's others)."""
    answer = store.admit_now(key, policy)
    if answer is not None:
        return answer
    admission: Admission = await _ask(0, store, (key, policy))
    return admission


async def record(store: BreakerStore, report: Report) -> bool:
    """``store.record(...)`` without blocking the loop (with this turn's others): whether
    deliveries held for the destination may come back now."""
    answer = store.record_now(report)
    if answer is None:
        answer = await _ask(1, store, report)
    return bool(answer)


async def take(store: RateStore, request: RateRequest) -> Turn:
    """``store.take_many([request])[0]`` without blocking the loop (with this turn's
    others): when the delivery may be sent to its host."""
    answer = store.take_now(request)
    if answer is None:
        answer = await _ask(2, store, request)
    return answer


def _ask(kind: int, store: Any, request: Any) -> asyncio.Future[Any]:
    """Queue ``request`` for the end of this turn; its answer's future."""
    loop = asyncio.get_running_loop()
    turn = _turns.get(loop)
    if turn is None:
        turn = _turns[loop] = ([], [], [])
    if not turn[kind]:
        loop.call_soon(_flush, loop, kind)
    future: asyncio.Future[Any] = loop.create_future()
    turn[kind].append((store, request, future))
    return future


def _flush(loop: asyncio.AbstractEventLoop, kind: int) -> None:
    """Hand what was asked this turn to the executor: one call per store."""
    pending = _turns[loop][kind][:]
    _turns[loop][kind].clear()
    by_store: dict[int, tuple[Any, _Pending]] = {}
    for item in pending:
        by_store.setdefault(id(item[0]), (item[0], []))[1].append(item)
    for store, items in by_store.values():
        call: Callable[[Sequence[Any]], list[Any]] = getattr(store, _CALLS[kind])
        done = loop.run_in_executor(None, call, [request for _, request, _ in items])
        done.add_done_callback(functools.partial(_answer, [future for _, _, future in items]))


def _answer(futures: list[asyncio.Future[Any]], done: asyncio.Future[list[Any]]) -> None:
    """Give each asker its answer, or the call's exception (a cancelled asker, nothing)."""
    error = None if done.cancelled() else done.exception()
    answers = done.result() if not done.cancelled() and error is None else []
    for i, future in enumerate(futures):
        if future.done():
            continue
        if done.cancelled():
            future.cancel()
        elif error is not None:
            future.set_exception(error)
        else:
            future.set_result(answers[i])
