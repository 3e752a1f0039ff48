"""The threads that call the payment client: a pool of their own, bounded.

A node call blocks (an HTTP request to LND, a socket to Core Lightning) for up to the
client's timeout.  On the event loop's default executor it would hold a thread that the
address look-ups, breaker calls and scheme look-ups of every other delivery share: a
slow node would make unrelated hosts' requests wait, time out and count as those
hosts' failures.  Here a slow node delays only payments: at most
``OUTBOX_PAYMENTS["CLIENT_THREADS"]`` node calls run at once in a worker process, and
the others wait for a thread (a wait that counts against their delivery's lease: the
payment step measures what is left of it when its thread starts).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from threading import Lock

from django_outbox.payments.settings import PaymentSettings

_lock = Lock()
#: The process's pool: (pid, size, pool).  A forked child has none of its threads.
_pool: tuple[int, int, ThreadPoolExecutor] | None = None


def payment_threads(settings: PaymentSettings) -> ThreadPoolExecutor:
    """This process's pool of ``CLIENT_THREADS`` threads for node calls, made on first
    use (and again in a forked child, or when the setting changed)."""
    global _pool
    with _lock:
        made = _pool
        if made is not None and made[:2] == (os.getpid(), settings.client_threads):
            return made[2]
        if made is not None and made[0] == os.getpid():
            made[2].shutdown(wait=False)
        pool = ThreadPoolExecutor(settings.client_threads, thread_name_prefix="outbox-payments")
        _pool = (os.getpid(), settings.client_threads, pool)
        return pool


def stop_payment_threads() -> None:
    """Start no more node calls in this process: calls waiting for a thread are
    cancelled (their deliveries are given back as the engine stops), calls under way end
    within the client's timeout.  The worker process calls it as it stops."""
    global _pool
    with _lock:
        made, _pool = _pool, None
    if made is not None and made[0] == os.getpid():
        made[2].shutdown(wait=False, cancel_futures=True)
