"""Hosts that charge, and the fake LND that pays them, out of the bench's process.

    python -m bench.paid_farm --count 10 --first-address 127.0.3.2 --price-msat 1000 \
        [--mode per-message|per-token] [--pay-delay 0.2]

serves ``count`` loopback inbox hosts (a :class:`~testproject.inbox_servers.ServerFarm`)
whose every path is behind one L402 gate (a token opens them for one message, the
default, or for its lifetime with ``--mode per-token``), and a fake LND REST node that
settles their invoices (both share one invoice registry), each payment taking
``--pay-delay`` seconds (0: at once).  Prints one JSON line ``{"urls": [...],
"lnd_url": url, "lnd_macaroon_hex": hex, "pid": N}``, serves until SIGTERM or SIGINT,
then prints ``{"requests": N, "payments": N, "decisions": {...}}`` to stderr.

The gate signs a fresh BOLT11 invoice for every ``402`` and the node decodes each one
it pays: CPU that must not share a GIL with the unpaid hosts' servers or the
benchmark's own polling (see :class:`bench.processes.PaidFarm`).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence

from testproject.inbox_servers import Behaviour, ServerFarm
from testproject.lightning.issuer import InvoiceIssuer, InvoiceRegistry
from testproject.lightning.l402_inbox import L402Gate, Mode
from testproject.lightning.lnd import FakeLndServer
from testproject.lightning.node import FakeNode


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until a signal; see the module docstring."""
    parser = argparse.ArgumentParser(description="Serve L402-gated inbox hosts and a fake LND.")
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument("--first-address", default="127.0.3.2")
    parser.add_argument("--mode", choices=[m.value for m in Mode], default=Mode.PER_MESSAGE.value)
    parser.add_argument("--price-msat", type=int, default=1_000)
    parser.add_argument("--pay-delay", type=float, default=0.0, help="seconds per payment")
    options = parser.parse_args(argv)
    registry = InvoiceRegistry()
    gate = L402Gate(InvoiceIssuer(registry), mode=options.mode, price_msat=options.price_msat)
    node = FakeNode(registry)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    farm = ServerFarm(
        options.count,
        behaviour=Behaviour(gate=gate),
        first_address=options.first_address,
        record=False,
    )
    with farm, FakeLndServer(node) as lnd:
        lnd.pay_delay = options.pay_delay
        ready = {
            "urls": farm.urls(),
            "lnd_url": lnd.url,
            "lnd_macaroon_hex": lnd.macaroon_hex,
            "pid": os.getpid(),
        }
        print(json.dumps(ready), flush=True)
        done.wait()
        requests = farm.request_count()
    decisions = collections.Counter(d.split(":")[0] for d in gate.decisions)
    summary = {"requests": requests, "payments": len(node.payments()), "decisions": decisions}
    print(json.dumps(summary), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
