"""Paid hosts: the unpaid hosts' delivery rate when 10% of the hosts charge.

``python -m bench.paid_hosts [--quick] [--only a,b]`` runs one workload on a fresh worker
with the README's command and the package defaults, in five variants, each ``repeats`` times
(interleaved, so that a busy spell of the shared machine does not fall on one variant):
payments off (the package as most sites run it), payments on with every host free,
payments on with a tenth of the hosts behind an L402 gate that charges for every
message (``10%-paid``, the costliest kind and the headline: each delivery there is a
402, a stored attempt, a payment and a second request), and payments on with a tenth
of the hosts selling a token that opens them for its lifetime (``10%-paid-per-token``,
the usual L402 deployment: each host is paid once, then its deliveries carry the token),
and payments on with one host of the hundred charging per message through a node that
takes 200 ms per payment (``1-paid-slow-node``: how fast one charging host is served
when each payment costs the node time; that run also waits for the paid host to get
all its deliveries, and reports its rate: its deliveries over the time from the first
``send`` to its last delivery).

Everything but the worker runs out of this process: 100 free hosts in one
(``python -m testproject.inbox_servers``), and for each kind of charging 10 hosts and
the fake LND that pays them in another (``python -m bench.paid_farm``), all started
once.  A paid variant sends to 90 of the free hosts and its 10 charging ones, every
tenth URL of the fan-out a charging one.  Reported per run: the unpaid hosts' delivery rate
(delivered to unpaid hosts / time from the first ``send`` to the last such delivery),
the worker's CPU per unpaid delivery (all it did, paid hosts included, over the unpaid
deliveries), and for the paid hosts in that time: deliveries, payments (from the
``PaymentAttempt`` table), holds and parked deliveries.  A run ends when the unpaid hosts are done;
the paid hosts' backlog (each is paid one message at a time) is not waited for.
Each run also records the CPU of the worker, of each farm, of this tree's PostgreSQL and
Redis, of this process and of the whole machine: what the machine did beyond those is
another tree's benchmark or tests, and a run where that passes :data:`DISTURBED` is run
again (its figures are kept, marked, out of the summaries).
With ``--known-hosts`` the charging hosts start each run known to charge per message (as
the database remembers them after a first run): the same runs without the learning phase.
Targets: the 10%-paid median keeps the unpaid rate at 90% or more of the all-unpaid
median; in 1-paid-slow-node the paid host gets 20 deliveries/s or more and the unpaid
hosts keep 90% of the all-unpaid rate.  Results go to ``bench/results/paid_hosts.json``.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from bench.call_times import gather
from bench.common import (
    RESULTS_DIR,
    RUN_DIR,
    Env,
    activity,
    log,
    reset_state,
    setup_django,
    start_services,
)
from bench.experiments import thread_cpu
from bench.figures import machine, machine_busy, save_json, summary, wait_quiet
from bench.processes import Farm, PaidFarm, Worker, services_cpu_seconds

PRICE_MSAT = 1_000
HOSTS = 100
#: Every ``PAID_EVERY``-th host of the fan-out charges in the 10%-paid variant.
PAID_EVERY = 10
#: A run during which processes other than the benchmark's used more than this share
#: of the machine is disturbed (another tree's benchmark or tests): it is run again, up
#: to ``RETRIES`` times in all, and left out of the summaries if an undisturbed one came.
DISTURBED = 0.1
RETRIES = 4
#: Variants compared with all-unpaid, and the keys of their rate and CPU ratios.
RATIOS = (
    ("10%-paid", "ratio", "cpu_ratio"),
    ("10%-paid-per-token", "token_ratio", "token_cpu_ratio"),
    ("1-paid-slow-node", "slow_ratio", "slow_cpu_ratio"),
)
#: Seconds the slow node of ``1-paid-slow-node`` takes per payment.
SLOW_PAYMENT = 0.2
#: The first address of that variant's one charging host.
SLOW_HOST = "127.0.5.2"


def payments_setting(paid: PaidFarm, **extra: Any) -> dict[str, Any]:
    """``OUTBOX_PAYMENTS`` paying through the paid farm's fake LND, with room for every
    payment, and ``extra`` keys; every other key is the package default."""
    options = {"url": paid.ready["lnd_url"], "macaroon_hex": paid.ready["lnd_macaroon_hex"]}
    return {
        "CLIENT": "django_outbox.payments.clients.lnd.LndRestClient",
        "OPTIONS": {**options, "timeout": 10},
        "NETWORK": "bcrt",
        "MAX_PRICE_MSAT": 10 * PRICE_MSAT,
        "DAILY_BUDGET_MSAT": 10**12,
        **extra,
    }


def fan_out(free: Farm, paid: PaidFarm | None) -> tuple[list[str], set[str]]:
    """The inbox URLs of one activity, and the charging hosts among them."""
    if paid is None:
        return list(free.urls[:HOSTS]), set()
    charging = iter(paid.urls)
    every = max(PAID_EVERY, HOSTS // len(paid.urls))
    urls = [
        next(charging) if i % every == every - 1 else url for i, url in enumerate(free.urls[:HOSTS])
    ]
    return urls, {url.split("//", 1)[1].split(":", 1)[0] for url in paid.urls}


def _paid_figures(paid_hosts: set[str], started: float) -> dict[str, Any]:
    """What the paid hosts got so far: deliveries (and their rate from the first send to
    the last of them), payments, holds recorded as attempts (in the history), deliveries
    parked (by a claim, or by the recorder for a hold met after the claim) while their
    host is paid, 402s met, and how long a delivered one took from its send (median and
    95th percentile, seconds)."""
    import statistics

    from django.db.models import Max, Q, Sum

    from django_outbox.models import Attempt, Delivery
    from django_outbox.payments.models import PaymentAttempt
    from django_outbox.payments.reports import PARKED_HOLDS

    history = Attempt.objects.filter(host__in=paid_hosts)
    rows = Delivery.objects.filter(host__in=paid_hosts)
    delivered = rows.filter(state="delivered")
    last = delivered.aggregate(last=Max("finished_at"))["last"]
    count = delivered.count()
    took = sorted(
        (finished - created).total_seconds()
        for created, finished in delivered.values_list("created_at", "finished_at")
    )
    return {
        "paid_delivered": count,
        "paid_latency_p50_s": statistics.median(took) if took else None,
        "paid_latency_p95_s": took[int(0.95 * (len(took) - 1))] if took else None,
        "paid_rate": count / (last.timestamp() - started) if last else 0.0,
        "payments": PaymentAttempt.objects.filter(paid_at__isnull=False).count(),
        "holds": history.filter(held=True).aggregate(n=Sum("times"))["n"] or 0,
        "parked": rows.filter(
            Q(last_error__startswith="held: a payment") | Q(last_error__in=PARKED_HOLDS),
            state="queued",
        ).count(),
        "challenges_met": history.filter(result="paying").count(),
        "at_s": time.time() - started,
    }


def _cpu_now(worker: Worker, farms: tuple[Farm, PaidFarm]) -> dict[str, float]:
    """CPU seconds used so far by each process of the benchmark, and by the machine."""
    free, paid = farms
    return {
        "worker": worker.cpu_seconds(),
        "free_farm": free.cpu_seconds(),
        "paid_farm": paid.cpu_seconds(),
        "services": services_cpu_seconds(),
        "bench": sum(os.times()[:2]),
        "machine": machine_busy()[0],
    }


def _ratios(results: dict[str, Any], label: str) -> tuple[float, float]:
    """The unpaid rate of variant ``label`` over the all-unpaid one (medians), and the
    all-unpaid worker CPU per unpaid delivery over ``label``'s: the share of the
    worker's capacity left to unpaid hosts, steadier than the rate on a shared machine."""
    base, paying = results["all-unpaid"], results[label]
    rate = paying["rate"]["median"] / base["rate"]["median"]
    cpu = base["cpu_ms_per_unpaid"]["median"] / paying["cpu_ms_per_unpaid"]["median"]
    return rate, cpu


def reset_payments(env: Env, known: set[str]) -> None:
    """Empty the outbox tables (:func:`~bench.common.reset_state`) and the payment
    tables; the hosts ``known`` start known to charge per message, as the database
    remembers them after a first run."""
    from django.db import connection

    from django_outbox.payments.models import PaymentHost

    reset_state(env)
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE django_outbox_paymentattempt, django_outbox_paymentbudget, "
            "django_outbox_paymenthost"
        )
    PaymentHost.objects.bulk_create([PaymentHost(host=host, per_message=True) for host in known])


def one_run(
    env: Env,
    farms: tuple[Farm, PaidFarm],
    urls: list[str],
    paid_hosts: set[str],
    messages: int,
    settings: dict[str, Any],
    wait_paid: bool = False,
    known: bool = False,
    call_times: bool = False,
) -> dict[str, Any]:
    """One timed run on a fresh worker; figures for the unpaid and the paid hosts, and
    the CPU that the worker, each farm and the whole machine used meanwhile.  With
    ``wait_paid`` it ends when the paid hosts have their deliveries too; with ``known``
    the paid hosts start known to charge per message, as a run after the first finds them.
    The sends run with the worker's ``settings``, as a site's web processes share its
    workers' settings module.  With ``call_times`` the worker times its calls
    (:mod:`bench.call_times`), and the figures add them and its threads' CPU."""
    from django.db.models import Max
    from django.test import override_settings

    from django_outbox import outbox
    from django_outbox.models import Delivery

    reset_payments(env, paid_hosts if known else set())
    unpaid_total = messages * (len(urls) - len(paid_hosts))
    unpaid = Delivery.objects.exclude(host__in=paid_hosts)
    paid_total = messages * len(paid_hosts)
    paid_rows = Delivery.objects.filter(host__in=paid_hosts)
    timing = RUN_DIR / f"call-times-{time.time_ns()}"
    hooks: dict[str, Any] = {}
    if call_times:
        timing.mkdir(parents=True)
        hooks = {
            "imports": ("bench.call_times",),
            "extra_env": {"BENCH_CALL_TIMES_DIR": str(timing)},
        }
    with Worker(env, settings, **hooks) as worker:
        busy = wait_quiet()
        before = _cpu_now(worker, farms)
        started = time.time()
        with override_settings(**settings):
            for n in range(messages):
                outbox.send("https://demo.example/users/alice", activity(n), urls)
        sent = time.time() - started
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if unpaid.filter(state="delivered").count() >= unpaid_total and (
                not wait_paid or paid_rows.filter(state="delivered").count() >= paid_total
            ):
                break
            time.sleep(0.25)
        used = {name: value - before[name] for name, value in _cpu_now(worker, farms).items()}
        done = unpaid.filter(state="delivered").aggregate(last=Max("finished_at"))["last"]
        paid = _paid_figures(paid_hosts, started) if paid_hosts else {}
        if call_times:
            time.sleep(0.6)  # the processes' last totals
            paid["call_cpu"] = gather(timing)
            paid["thread_cpu_s"] = thread_cpu(worker.pids())
    elapsed = (done.timestamp() if done else time.time()) - started
    cpu, machine_cpu = used["worker"], used.pop("machine")
    foreign = machine_cpu - sum(used.values())
    return {
        "unpaid_rate": unpaid_total / elapsed if done else 0.0,
        "elapsed_s": elapsed,
        "send_calls_s": sent,
        "unpaid_deliveries": unpaid_total,
        "worker_cpu_s": cpu,
        "worker_cpu_ms_per_unpaid": 1000 * cpu / unpaid_total,
        "free_farm_cpu_s": used["free_farm"],
        "paid_farm_cpu_s": used["paid_farm"],
        "services_cpu_s": used["services"],
        "bench_cpu_s": used["bench"],
        "machine_cpu_s": machine_cpu,
        "foreign_cpu_s": foreign,
        "disturbed": foreign > DISTURBED * (os.cpu_count() or 1) * elapsed,
        "busy_before": busy,
        **paid,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the four variants ``repeats`` times, interleaved, and save the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one run each, fewer messages")
    parser.add_argument("--messages", type=int, default=0, help="activities per run")
    parser.add_argument("--repeats", type=int, default=0, help="runs of each variant")
    parser.add_argument("--only", default="", help="variants to run, comma-separated")
    parser.add_argument(
        "--known-hosts",
        action="store_true",
        help="the charging hosts start known to charge per message (no learning phase)",
    )
    parser.add_argument(
        "--call-times",
        action="store_true",
        help="time the worker's calls (bench.call_times; slower: compare such runs only)",
    )
    parser.add_argument(
        "--max-parallel", type=int, default=0, help="MAX_PARALLEL_PER_HOST (default: the package's)"
    )
    options = parser.parse_args(argv)
    env = start_services()
    setup_django(env)
    messages = options.messages or (20 if options.quick else 150)
    repeats = options.repeats or (1 if options.quick else 3)
    results: dict[str, Any] = {"machine": machine(), "hosts": HOSTS, "messages": messages}
    runs: dict[str, list[dict[str, Any]]] = {}
    count = HOSTS // PAID_EVERY
    charging = PaidFarm(env, count, price_msat=PRICE_MSAT)
    selling = PaidFarm(env, count, price_msat=PRICE_MSAT, first="127.0.4.2", mode="per-token")
    slow = PaidFarm(env, 1, price_msat=PRICE_MSAT, first=SLOW_HOST, pay_delay=SLOW_PAYMENT)
    extra = {"MAX_PARALLEL_PER_HOST": options.max_parallel} if options.max_parallel else {}
    results["max_parallel"] = options.max_parallel or None
    results["known_hosts"] = options.known_hosts
    with Farm(env, HOSTS) as free, charging as paid, selling as tokens, slow as one:
        pay = {"OUTBOX_PAYMENTS": payments_setting(paid, **extra)}
        variants = {
            "payments-off": (paid, fan_out(free, None), {}),
            "all-unpaid": (paid, fan_out(free, None), pay),
            "10%-paid": (paid, fan_out(free, paid), pay),
            "10%-paid-per-token": (
                tokens,
                fan_out(free, tokens),
                {"OUTBOX_PAYMENTS": payments_setting(tokens, **extra)},
            ),
            "1-paid-slow-node": (
                one,
                fan_out(free, one),
                {"OUTBOX_PAYMENTS": payments_setting(one, **extra)},
            ),
        }
        chosen = [name for name in options.only.split(",") if name] or list(variants)
        retries = RETRIES
        for i in range(repeats):
            for label in chosen:
                farm, (urls, paid_hosts), settings = variants[label]
                while True:
                    farms = (free, farm)
                    wait_paid = label == "1-paid-slow-node"
                    figures = one_run(
                        env,
                        farms,
                        urls,
                        paid_hosts,
                        messages,
                        settings,
                        wait_paid,
                        options.known_hosts,
                        options.call_times,
                    )
                    log(f"paid-hosts {label} run {i + 1}/{repeats}: {figures}")
                    runs.setdefault(label, []).append(figures)
                    if not figures["disturbed"] or retries == 0:
                        break
                    retries -= 1
    for label, tried in runs.items():
        done = [r for r in tried if not r["disturbed"]] or tried
        results[label] = {
            "rate": summary([r["unpaid_rate"] for r in done]),
            "cpu_ms_per_unpaid": summary([r["worker_cpu_ms_per_unpaid"] for r in done]),
            "runs": tried,
        }
        if label == "1-paid-slow-node":
            results[label]["paid_rate"] = summary([r["paid_rate"] for r in done])
    results["paid_farm"], results["token_farm"] = paid.summary, tokens.summary
    results["slow_farm"] = one.summary
    for label, key, cpu_key in RATIOS:
        if "all-unpaid" in results and label in results:
            results[key], results[cpu_key] = _ratios(results, label)
    save_json(RESULTS_DIR / "paid_hosts.json", results)
    for label, key, cpu_key in RATIOS:
        if key in results:
            log(
                f"{label}: unpaid hosts' rate {results[key]:.0%} of the all-unpaid run "
                f"(target 90%), worker CPU per unpaid delivery {results[cpu_key]:.0%}"
            )
    if "1-paid-slow-node" in results:
        rate = results["1-paid-slow-node"]["paid_rate"]["median"]
        log(f"the per-message host behind a 200 ms node: {rate:.1f} deliveries/s (target 20)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
