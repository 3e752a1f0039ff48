"""What-if experiments: loaded into a benchmark worker with ``-I bench.whatif``.

Not a way to run the package: each switch removes a piece of it to *measure* what that
piece costs, so that a recommendation comes with a figure.  ``BENCH_WHATIF`` holds a
comma-separated list of switches:

``no-watchdog``
    The transport's per-request deadline watchdog does nothing (no lock, no socket
    dup); requests are bounded by the socket timeouts only.
"""

from __future__ import annotations

import os
from typing import Any

SWITCHES = frozenset(filter(None, os.environ.get("BENCH_WHATIF", "").split(",")))

if "no-watchdog" in SWITCHES:
    from django_outbox import _transport_pool

    class _NoWatchdog(_transport_pool.Watchdog):
        def begin(self, deadline: float) -> _transport_pool.Entry:
            return _transport_pool.Entry(deadline)

        def end(self, entry: _transport_pool.Entry) -> None:
            pass

        def current(self) -> None:
            return None

        def attach(self, conn: Any) -> None:
            pass

        def connected(self, conn: Any) -> None:
            pass

        def detach(self, conn: Any) -> None:
            pass

    def _install() -> None:
        _transport_pool._watchdog = _NoWatchdog()

    _install()
    # The package's own after-fork hook makes a real watchdog in each pool child;
    # this one is registered later, so it runs after it.
    os.register_at_fork(after_in_child=_install)
