"""How long the admin console's pages take on 1,000,000 deliveries in PostgreSQL.

``python bench/admin_overview.py [--rows 1000000] [--repeats 7] [--keep] [--only NAME ...]``

Fills the database ``bench/status_command.py`` fills (the same day of deliveries,
written by ``INSERT ... SELECT generate_series``, then ``VACUUM ANALYZE``), logs a
superuser in with Django's test client and times whole requests, templates included:
the overview with the day's ended hours kept by the process (as on most views) and
counted afresh (the first view in a web process), and its parts; the delivery list,
filtered and not; a host's page.  Median and worst of ``--repeats`` after a warm-up;
``bench/results/admin_overview.json``.  ``--only "overview page"`` times the overview alone
(what ``--keep`` runs of two commits alternate to compare them).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS_DIR, log
from bench.figures import save_json
from bench.status_command import arguments, prepare, snapshot_parts, timed


def pages(repeats: int, only: Sequence[str] = ()) -> dict[str, Any]:
    """Time the pages and the overview's parts (those whose names start with one of
    ``only``, if given)."""
    from django.contrib.auth.models import User
    from django.test import Client
    from django.utils import timezone

    from django_outbox.conf import conf
    from django_outbox.status import snapshot, timeline
    from django_outbox.store.heartbeats import live_names

    user = User.objects.filter(username="bench").first() or User.objects.create_superuser(
        "bench", "bench@example.invalid", "bench"
    )
    client = Client(SERVER_NAME="localhost")  # one of ALLOWED_HOSTS
    client.force_login(user)

    def get(url: str) -> Callable[[], None]:
        def request() -> None:
            response = client.get(url)
            if response.status_code != 200:
                raise RuntimeError(f"{url}: HTTP {response.status_code}")

        return request

    overview = get("/admin/django_outbox/delivery/overview/")
    now = timezone.now()
    parts: dict[str, Callable[[], Any]] = {
        "overview page": overview,
        "overview page, no hour kept": lambda: (timeline.forget_ended_hours(), overview()),
        "  snapshot (outbox status)": snapshot.take_snapshot,
        "  failing hosts counted": lambda: snapshot.failing_population(now),
        "  workers beating": lambda: live_names(conf.HEARTBEAT_TIMEOUT),
        **{f"  {name}": part for name, part in snapshot_parts(now).items()},
        "delivery list": get("/admin/django_outbox/delivery/"),
        "delivery list, failed": get("/admin/django_outbox/delivery/?state=failed"),
        "delivery list, one host": get("/admin/django_outbox/delivery/?host=h7.example"),
        "host page": get("/admin/django_outbox/host/destination/h7.example/"),
    }
    chosen = {
        name: part for name, part in parts.items() if not only or name.startswith(tuple(only))
    }
    return {name: timed(part, repeats) for name, part in chosen.items()}


def main(argv: Sequence[str] | None = None) -> int:
    """Fill (unless ``--keep``), measure, save."""
    options = arguments(argv, __doc__, repeats=7, only=True)
    results = prepare(options.rows, options.keep)
    load_before = os.getloadavg()[0]
    results["timings"] = pages(options.repeats, options.only)
    results["at"] = time.strftime("%Y-%m-%d %H:%M:%S")
    results["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    for name, figures in results["timings"].items():
        log(
            f"{name:38} median {figures['median_s'] * 1000:8.1f} ms   max "
            f"{figures['max_s'] * 1000:8.1f} ms"
        )
    log(f"load average {results['load_average']}")
    save_json(RESULTS_DIR / "admin_overview.json", results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
