"""``python -m bench.pruner --seconds S``: the sweeper's prune, pass after pass, in a
process of its own (as beat's sweep runs in a worker's pool process).

Runs :func:`django_outbox.store.pruning.prune` back to back, for at most ``S`` seconds
or until a pass finds nothing to delete or SIGTERM, on the database and settings of
its environment (``OUTBOX_RETENTION_SECONDS`` chooses what is old), and prints one JSON
line per pass: when it ended (``time.time()``), its seconds and the rows it deleted
(history rows included) and finished deliveries it deleted.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any


def deliveries() -> int:
    """Finished deliveries in the table now (from the index on ``finished_at``)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM django_outbox_delivery WHERE finished_at IS NOT NULL")
        return int(cursor.fetchone()[0])


def main(argv: Sequence[str] | None = None) -> int:
    """Prune until told to stop; one JSON line a pass on stdout."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    options = parser.parse_args(argv)
    import django

    django.setup()
    from django_outbox.store.pruning import prune

    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda number, frame: stopping.append(number))
    ends = time.monotonic() + options.seconds
    before = deliveries()
    print(json.dumps({"ready": True, "finished": before}), flush=True)
    while not stopping and time.monotonic() < ends:
        began = time.perf_counter()
        rows = prune()
        figures: dict[str, Any] = {"t": time.time(), "s": time.perf_counter() - began}
        print(json.dumps({**figures, "rows": rows}), flush=True)
        if not rows:
            break
    print(json.dumps({"deliveries": before - deliveries()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
