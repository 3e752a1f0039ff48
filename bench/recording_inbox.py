"""One loopback inbox that reports when each request arrived (for the priority scenario).

``python -m bench.recording_inbox --host 127.0.1.2`` prints ``{"url": ...}`` and then
one line ``{"path": ..., "t": ...}`` per request, ``t`` being ``time.time()`` when the
request was read, so the benchmark compares it with its own ``time.time()`` at
``send``.  Runs until SIGTERM/SIGINT or ``--max-seconds``.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from collections.abc import Sequence

from testproject.inbox_servers import InboxServer


def main(argv: Sequence[str] | None = None) -> int:
    """Serve and report until stopped."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.1.2")
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    options = parser.parse_args(argv)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    deadline = time.monotonic() + options.max_seconds
    with InboxServer(options.host) as server:
        print(json.dumps({"url": server.url("/inbox")}), flush=True)
        reported = 0
        while not done.is_set() and time.monotonic() < deadline:
            records = server.requests()
            for record in records[reported:]:
                print(json.dumps({"path": record.path, "t": record.received_at}), flush=True)
            reported = len(records)
            done.wait(0.005)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
