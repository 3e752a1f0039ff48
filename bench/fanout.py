"""Fan-out call: how long ``outbox.send`` takes to return for many inboxes (PostgreSQL).

Timed in this process, in autocommit mode (no transaction around the call), so the
figure holds everything a view pays: turning the recipients into inbox URLs (shared
inboxes first, the sender's own host left out) and validating them, resolving the key,
inserting the message (and, up to ``OUTBOX_INLINE_FANOUT`` = 500 inboxes, the delivery
rows), the COMMIT, and the on-commit publish to Redis (one ``expand`` message above
500 inboxes, one ``deliver`` message per 50 ids below).  No worker runs.

Two kinds of recipients: plain inbox URLs (500 to 100,000, on 5,000 hosts), and
:class:`~django_outbox.Recipient` objects (10,000 and 100,000, ten on each server,
which has a shared inbox; one in a hundred on the sender's own host, left out): the
send to 100,000 of them writes 10,000 deliveries, one per shared inbox.

Then (first repeat only) the expansion a worker would do next
(``django_outbox.sending.fanout.expand``: write the delivery rows in slices and publish them)
is timed in this process too, to show how soon after ``send`` returns the rows exist.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from bench.common import ACTOR, EMPTY, Env, Tables, activity, log, reset_state
from bench.figures import summary, wait_quiet


def inboxes(count: int) -> list[str]:
    """``count`` distinct inbox URLs on 5,000 made-up hosts (nothing is sent)."""
    return [f"https://h{i % 5000}.example.net/users/u{i}/inbox" for i in range(count)]


def recipients(count: int) -> list[Any]:
    """``count`` recipients, ten per server, every server with a shared inbox; one in
    a hundred on the sender's own host, which ``send`` leaves out."""
    from django_outbox import Recipient

    own = urlsplit(ACTOR).hostname
    made = []
    for i in range(count):
        host = own if i % 100 == 99 else f"s{i // 10}.example.net"
        made.append(Recipient(f"https://{host}/users/u{i}/inbox", f"https://{host}/inbox"))
    return made


def one(
    env: Env, given: Sequence[Any], with_expand: bool, tables: Tables = EMPTY
) -> dict[str, Any]:
    """Time one ``send`` and then the expansion of what it stored, on ``tables``."""
    from django_outbox import outbox
    from django_outbox.conf import conf
    from django_outbox.sending.fanout import expand
    from django_outbox.sending.recipients import collapse
    from django_outbox.sending.validation import clean_inboxes
    from django_outbox.transport.addresses import parse_networks

    tables.reset(env)
    busy = wait_quiet()
    t0 = time.perf_counter()
    own = [urlsplit(ACTOR).hostname or ""]
    allowed = parse_networks(conf.ALLOWED_NETWORKS)
    targets = clean_inboxes(collapse(given, exclude_hosts=own), conf.MAX_INBOXES, allowed)
    validate = time.perf_counter() - t0
    t0 = time.perf_counter()
    message = outbox.send(ACTOR, activity(len(given)), given)
    send = time.perf_counter() - t0
    assert message is not None
    expanded = None
    if with_expand:
        t0 = time.perf_counter()
        expand(message.pk)
        expanded = time.perf_counter() - t0
    assert message.inbox_count == len(targets)
    return {
        "send_ms": 1000 * send,
        "validate_ms": 1000 * validate,
        "expand_s": expanded,
        "busy_before": busy,
        "targets": len(targets),
    }


def run(env: Env, quick: bool) -> dict[str, Any]:
    """Each size ``repeats`` times; median/min/max of the send time and the expansion."""
    from django_outbox import outbox

    sizes = [500, 1000, 10_000] if quick else [500, 1000, 10_000, 100_000]
    repeats = 1 if quick else 3
    reset_state(env)
    outbox.send(ACTOR, activity(), inboxes(10))  # warm up imports and connections
    out: dict[str, Any] = {"sizes": {}, "recipients": {}}
    cases = [("sizes", size, inboxes(size)) for size in sizes]
    counts = [10_000] if quick else [10_000, 100_000]
    cases += [("recipients", size, recipients(size)) for size in counts]
    for kind, size, given in cases:
        runs = [one(env, given, with_expand=i == 0) for i in range(repeats)]
        figures = {
            "send_ms": summary([r["send_ms"] for r in runs]),
            "validate_ms": summary([r["validate_ms"] for r in runs]),
            "expand_s": summary([r["expand_s"] for r in runs if r["expand_s"] is not None]),
            "busy_before": [r["busy_before"] for r in runs],
            "targets": runs[0]["targets"],
        }
        out[kind][str(size)] = figures
        log(
            f"fanout {size} {'inbox URLs' if kind == 'sizes' else 'recipients'} "
            f"-> {figures['targets']} inboxes: send {figures['send_ms']['median']:.1f} ms "
            f"(collapse and validation {figures['validate_ms']['median']:.1f} ms), "
            f"expand {figures['expand_s']['median']:.2f} s"
        )
    reset_state(env)
    return out
