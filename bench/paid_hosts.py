"""Paid hosts: the unpaid hosts' delivery rate when 10% of the hosts charge per message.

``python -m bench.paid_hosts [--quick]`` runs one workload three times on a fresh
worker with the README's command: payments off (the package as most sites run it),
payments on with every host free, and payments on with a tenth of the hosts behind
an L402 gate that charges for every message (the costliest kind: each delivery
there is a 402, a stored attempt, a payment and a second request).  The inbox hosts,
the gates and the fake LND the worker pays through all run in this process.
Reported: the unpaid hosts' delivery rate (delivered to unpaid hosts / time from
the first ``send`` to the last such delivery) in each run, the payments made and
the time the paid hosts took.  Target: the 10%-paid run keeps the unpaid rate at
90% or more of the all-unpaid run.  Results go to ``bench/results/paid_hosts.json``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from typing import Any

from bench.common import RESULTS_DIR, Env, activity, log, reset_state, setup_django, start_services
from bench.figures import machine, save_json, summary
from bench.processes import Worker

PRICE_MSAT = 1_000


def payments_setting(lnd: Any) -> dict[str, Any]:
    """``OUTBOX_PAYMENTS`` paying through the fake LND, with room for every payment."""
    options = {"url": lnd.url, "macaroon_hex": lnd.macaroon_hex, "timeout": 10}
    return {
        "CLIENT": "django_outbox.payments.lnd.LndRestClient",
        "OPTIONS": options,
        "NETWORK": "bcrt",
        "MAX_PRICE_MSAT": 10 * PRICE_MSAT,
        "DAILY_BUDGET_MSAT": 10**12,
        "MAX_FEE_MSAT": 100,
    }


def one_run(env: Env, hosts: int, paid_fraction: float, messages: int, pay: bool) -> dict[str, Any]:
    """One run; figures for the unpaid and the paid hosts."""
    from django.db import connection
    from django.db.models import Max

    from django_outbox import outbox
    from django_outbox.models import Delivery
    from testproject.inbox_servers import ServerFarm
    from testproject.lightning.issuer import InvoiceIssuer, InvoiceRegistry
    from testproject.lightning.l402_inbox import L402Gate, Mode
    from testproject.lightning.lnd import FakeLndServer
    from testproject.lightning.node import FakeNode

    reset_state(env)
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE django_outbox_paymentattempt, django_outbox_paymentbudget")
    registry = InvoiceRegistry()
    gate = L402Gate(InvoiceIssuer(registry), mode=Mode.PER_MESSAGE, price_msat=PRICE_MSAT)
    node = FakeNode(registry)
    with ServerFarm(hosts, record=False) as farm, FakeLndServer(node) as lnd:
        every = round(1 / paid_fraction) if paid_fraction else 0
        paid = [s for i, s in enumerate(farm.servers) if every and i % every == every - 1]
        for server in paid:
            server.default = replace(server.default, gate=gate)
        paid_hosts = {server.host for server in paid}
        settings = {"OUTBOX_PAYMENTS": payments_setting(lnd)} if pay else {}
        with Worker(env, settings):
            urls = farm.urls()
            unpaid_total = messages * (hosts - len(paid_hosts))
            started = time.time()
            for n in range(messages):
                outbox.send("https://demo.example/users/alice", activity(n), urls)
            unpaid = Delivery.objects.exclude(host__in=paid_hosts)
            charged = Delivery.objects.filter(host__in=paid_hosts)
            deadline = time.monotonic() + 900
            while time.monotonic() < deadline:
                if unpaid.filter(state="delivered").count() >= unpaid_total:
                    break
                time.sleep(0.25)
            done = unpaid.filter(state="delivered").aggregate(last=Max("finished_at"))["last"]
            while time.monotonic() < deadline and charged.exclude(state="delivered").exists():
                time.sleep(0.25)
            paid_done = charged.aggregate(last=Max("finished_at"))["last"]
        elapsed = (done.timestamp() if done else time.time()) - started
        figures = {
            "unpaid_rate": unpaid_total / elapsed if done else 0.0,
            "elapsed_s": elapsed,
            "paid_hosts": len(paid_hosts),
            "paid_deliveries": charged.filter(state="delivered").count(),
            "paid_elapsed_s": paid_done.timestamp() - started if paid_done else None,
            "payments": len(node.payments()),
            "node_attempts": len(node.attempts),
        }
    log(f"paid-hosts fraction={paid_fraction} payments={'on' if pay else 'off'}: {figures}")
    return figures


def main(argv: list[str] | None = None) -> int:
    """Run the three variants ``repeats`` times and save the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one run each, fewer messages")
    options = parser.parse_args(argv)
    env = start_services()
    setup_django(env)
    hosts, messages = 100, (10 if options.quick else 30)
    repeats = 1 if options.quick else 2
    results: dict[str, Any] = {"machine": machine(), "hosts": hosts, "messages": messages}
    variants = (("payments-off", 0.0, False), ("all-unpaid", 0.0, True), ("10%-paid", 0.1, True))
    for label, fraction, pay in variants:
        runs = [one_run(env, hosts, fraction, messages, pay) for _ in range(repeats)]
        results[label] = {"rate": summary([r["unpaid_rate"] for r in runs]), "runs": runs}
    save_json(RESULTS_DIR / "paid_hosts.json", results)
    base = results["all-unpaid"]["rate"]["median"]
    ratio = results["10%-paid"]["rate"]["median"] / base if base else 0.0
    log(f"unpaid hosts' rate with 10% paid hosts: {ratio:.0%} of the all-unpaid run (target 90%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
