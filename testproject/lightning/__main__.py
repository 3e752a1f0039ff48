"""Run the fake network for the demo: an L402 inbox and the payer's fake LND, one process.

    python -m testproject.lightning --mode per-message --price-msat 0

prints one JSON line ``{"inbox": url, "lnd_url": url, "lnd_macaroon_hex": hex,
"network": "bcrt", "pid": N}`` and serves until SIGTERM or SIGINT, then prints
``{"payments": N, "decisions": {...}}`` to stderr.  Both share one invoice registry,
so a worker configured with that LND pays the inbox's invoices for real (bytes).
``--price-msat 0`` issues amountless invoices (the sender pays size x rate).
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

from testproject.lightning.issuer import InvoiceIssuer, InvoiceRegistry
from testproject.lightning.l402_inbox import L402Gate, L402InboxServer, Mode
from testproject.lightning.lnd import FakeLndServer
from testproject.lightning.node import FakeNode


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until a signal; see the module docstring."""
    parser = argparse.ArgumentParser(description="Serve an L402 inbox and a fake LND.")
    parser.add_argument("--mode", choices=[m.value for m in Mode], default=Mode.PER_TOKEN.value)
    parser.add_argument("--price-msat", type=int, default=10_000)
    parser.add_argument("--fee-msat", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    options = parser.parse_args(argv)
    registry = InvoiceRegistry()
    gate = L402Gate(
        InvoiceIssuer(registry), mode=options.mode, price_msat=options.price_msat or None
    )
    node = FakeNode(registry, fee_msat=options.fee_msat)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    with (
        FakeLndServer(node, host=options.host) as lnd,
        L402InboxServer(gate, options.host) as inbox,
    ):
        ready = {
            "inbox": inbox.url(),
            "lnd_url": lnd.url,
            "lnd_macaroon_hex": lnd.macaroon_hex,
            "network": node.network,
            "pid": os.getpid(),
        }
        print(json.dumps(ready), flush=True)
        done.wait()
    outcome = collections.Counter(d.split(":")[0] for d in gate.decisions)
    summary = {"payments": len(node.payments()), "decisions": dict(outcome)}
    print(json.dumps(summary), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
