"""How long ``collapse`` takes to turn recipients into delivery targets.

``python -m bench.recipients [--runs R]``

For 10,000 and 100,000 recipients, one in ten of them with a distinct shared
inbox (1,000 and 10,000 shared inboxes; every recipient has one), times
``django_outbox.sending.recipients.collapse`` in this process and prints the best of
``R`` runs (5 by default) per case:

* ``Recipient``: :class:`~django_outbox.sending.recipients.Recipient` objects, shared
  inboxes preferred (the default);
* ``model``: instances of a plain class with ``inbox`` and ``shared_inbox``, as
  an application's actor model;
* ``exclude``: as ``Recipient`` with ``exclude_hosts`` naming the sender's own
  host, on which one recipient in a hundred lives;
* ``no sharing``: ``prefer_shared_inbox=False``, one target per recipient;
* ``str``: plain inbox URLs, one target each.

No database, Redis or network; one thread.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from functools import partial

from django_outbox.sending.recipients import Recipient, collapse

LOCAL = "local.example"


class Actor:
    """An application's actor model, reduced to what collapse reads."""

    __slots__ = ("inbox", "name", "shared_inbox")

    def __init__(self, name: str, inbox: str, shared_inbox: str | None) -> None:
        self.name = name
        self.inbox = inbox
        self.shared_inbox = shared_inbox


def recipients(count: int) -> list[Recipient]:
    """``count`` recipients on ``count // 10`` hosts, one shared inbox per host."""
    made = []
    hosts = count // 10
    for i in range(count):
        host = LOCAL if i % 100 == 99 else f"host{i % hosts}.example"
        made.append(Recipient(f"https://{host}/users/u{i}/inbox", f"https://{host}/inbox"))
    return made


def best(runs: int, call: Callable[[], list[str]]) -> tuple[float, int]:
    """The shortest of ``runs`` timings of ``call``, in ms, and its result's length."""
    times = []
    size = 0
    for _ in range(runs):
        gc.collect()
        start = time.perf_counter()
        size = len(call())
        times.append(time.perf_counter() - start)
    return min(times) * 1000, size


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"{'recipients':>10}  {'case':<11} {'targets':>8} {'best ms':>8} {'us/item':>8}")
    for count in (10_000, 100_000):
        given = recipients(count)
        models = [Actor(f"u{i}", r.inbox, r.shared_inbox) for i, r in enumerate(given)]
        urls = [r.inbox for r in given]
        cases: dict[str, Callable[[], list[str]]] = {
            "Recipient": partial(collapse, given),
            "model": partial(collapse, models),
            "exclude": partial(collapse, given, exclude_hosts={LOCAL}),
            "no sharing": partial(collapse, given, prefer_shared_inbox=False),
            "str": partial(collapse, urls),
        }
        for name, call in cases.items():
            ms, size = best(args.runs, call)
            print(f"{count:>10,}  {name:<11} {size:>8,} {ms:>8.1f} {ms * 1000 / count:>8.3f}")


if __name__ == "__main__":
    main()
