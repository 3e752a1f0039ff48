"""``manage.py demo``: a fan-out to 2,000 loopback inboxes through a real Celery worker.

Migrates, starts 40 inbox hosts on 127.0.0.x in this process (most answer 202,
some fail first, one refuses, one wants RFC 9421 signatures, one never answers,
one asks to come back later, one charges per message over L402 and is paid through
a fake Lightning node in this process), starts ``celery -A testproject worker -Q
outbox.priority,outbox`` on the same database and broker, sends one activity to
every inbox in one transaction and a one-inbox priority send while that runs,
shows progress, sweeps every few seconds (no beat runs), and prints what each
kind of host ended up with.  Exits 0 when every delivery reached a final state.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.core.signals import setting_changed
from django.db import transaction
from django.db.models import Count, Max, Sum
from django.db.models.functions import Coalesce

from django_outbox import Batch, outbox
from django_outbox.models import FINAL_STATES, Delivery, DeliveryState
from testproject.demo.host_plan import Group, farm_for, groups, spread_inboxes
from testproject.demo.keys import ACTOR
from testproject.demo.paid import Lightning, paid_msat
from testproject.demo.progress import ProgressLine, Snapshot, snapshot
from testproject.demo.worker_process import DEMO_SETTINGS, Worker, broker_overrides
from testproject.inbox_servers import Behaviour, ServerFarm

SWEEP_EVERY = 3.0


def activity(kind: str, text: str) -> dict[str, Any]:
    note = f"https://demo.example/notes/{uuid.uuid4()}"
    return {
        "@context": "https://www.w3.org/ns/activitystreams",
        "id": f"{note}/activity",
        "type": kind,
        "actor": ACTOR,
        "to": ["https://www.w3.org/ns/activitystreams#Public"],
        "object": {"id": note, "type": "Note", "attributedTo": ACTOR, "content": text},
    }


def shown(path: Path) -> str:
    with suppress(ValueError):
        return str(path.relative_to(Path(settings.BASE_DIR)))
    return str(path)


class Stopped(Exception):
    """The demo was asked to stop by a signal."""


def _exit_on_signal(signum: int, frame: object) -> None:
    raise Stopped(signal.Signals(signum).name)


def use_demo_settings() -> None:
    for name, value in DEMO_SETTINGS.items():
        setattr(settings, name, value)
        # Settings already read (the system checks read some) are remembered until told.
        setting_changed.send(sender=None, setting=name, value=value, enter=True)


def keep_broker_files_in_run_dir(run_dir: Path) -> None:
    """kombu's filesystem transport keeps its exchange tables in ``./control`` unless
    told otherwise: work in the run directory so that they land there, for this
    process and the worker alike."""
    if settings.CELERY_BROKER_URL.startswith("filesystem:"):
        options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {})
        if "control_folder" not in options:
            os.chdir(run_dir)


class Command(BaseCommand):
    help = "Deliver one activity to 2,000 loopback inboxes through a real Celery worker."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--inboxes", type=int, default=2000, help="fan-out size (2000)")
        parser.add_argument("--hosts", type=int, default=40, help="inbox hosts (40)")
        parser.add_argument("--concurrency", type=int, default=2, help="worker -c (2)")
        parser.add_argument("--timeout", type=float, default=90.0, help="give up after (90 s)")

    def handle(self, *args: Any, **options: Any) -> None:
        # SIGTERM and SIGHUP end the demo through the cleanup in ``finally``, as Ctrl-C does.
        signal.signal(signal.SIGTERM, _exit_on_signal)
        signal.signal(signal.SIGHUP, _exit_on_signal)
        try:
            self.demo(options)
        except (KeyboardInterrupt, Stopped) as stop:
            name = str(stop) or "interrupted"
            raise CommandError(f"{name}: the worker and the inbox servers are stopped") from None

    def demo(self, options: dict[str, Any]) -> None:
        run_dir = Path(settings.RUN_DIR).resolve()
        db = settings.DATABASES["default"]
        where = (
            f"SQLite {shown(Path(db['NAME']))}"
            if db["ENGINE"].endswith("sqlite3")
            else f"PostgreSQL {db['NAME']}"
        )
        broker = settings.CELERY_BROKER_URL.split("//")[0] + "//"
        print(f"django_outbox demo: {where}, Celery broker {broker}, run dir {shown(run_dir)}")
        keep_broker_files_in_run_dir(run_dir)
        call_command("migrate", verbosity=0)
        use_demo_settings()

        lightning = Lightning()
        plan = groups(options["hosts"], lightning.gate)
        with farm_for(plan) as farm, lightning.lnd:
            inboxes = spread_inboxes(plan, options["inboxes"])
            first, last = farm.servers[0].host, farm.servers[-1].host
            print(
                f"inbox servers: {len(farm.servers)} hosts on {first}-{last}, "
                f"{len(inboxes):,} inboxes"
            )
            for group in plan:
                print(
                    f"  {group.hosts:>3} x {group.label:<32} {len(group.inboxes):>5,} inboxes"
                    f"  -> expect {group.expect}"
                )
            worker = Worker(run_dir, options["concurrency"], lightning.settings())
            print(f"worker: {' '.join(worker.command)}  (log: {shown(worker.log)})")
            poll = broker_overrides().get("CELERY_BROKER_TRANSPORT_OPTIONS", {})
            extra = f" (broker polling_interval {poll['polling_interval']} s)" if poll else ""
            print(f"worker settings: {json.dumps(DEMO_SETTINGS)}{extra}")
            stopped = time.monotonic()
            try:
                worker.wait_ready()
                ok = self.run(plan, farm, inboxes, worker, options["timeout"])
                print(lightning.summary(self.sent_at))
                print("stopping the worker (SIGTERM) and the inbox servers ...", end=" ")
                stopped = time.monotonic()
            finally:
                code = worker.stop()  # first: whatever went wrong, leave no worker behind
            print(f"worker exit {code} after {time.monotonic() - stopped:.1f} s")
        if not ok:
            raise CommandError("some deliveries did not reach a final state in time")

    def run(
        self,
        plan: list[Group],
        farm: ServerFarm,
        inboxes: list[str],
        worker: Worker,
        timeout: float,
    ) -> bool:
        from django_outbox.upkeep.sweeper import sweep

        sent_at = self.sent_at = time.time()
        started = time.monotonic()
        with transaction.atomic():
            fanout = outbox.send(
                ACTOR,
                activity("Create", "Hello, fediverse!"),
                inboxes,
                batch=Batch(tag="demo-fanout"),
            )
        assert fanout is not None
        print(
            f"\noutbox.send(): Create to {len(inboxes):,} inboxes, committed in "
            f"{time.monotonic() - started:.2f} s (message #{fanout.pk}, lane {fanout.lane})\n"
        )
        expected = {fanout.pk: len(inboxes)}
        progress = ProgressLine(sys.stdout, started)
        print(progress.header())
        priority: dict[str, Any] = {}
        next_sweep = started + SWEEP_EVERY
        give_up = started + timeout
        snap: Snapshot = snapshot(expected)
        while True:
            snap = snapshot(expected)
            progress.show(snap)
            if not priority and (snap["delivered"] >= len(inboxes) // 4 or snap.at - started > 3.0):
                priority = self.send_priority(farm, snap)
                expected[priority["message"].pk] = 1
                progress.note(
                    f"  -> priority send (1 inbox) while {snap.live:,} fan-out deliveries "
                    "are still live"
                )
            if priority and snap.final == sum(expected.values()):
                break
            if time.monotonic() > give_up:
                progress.note(f"timed out after {timeout:.0f} s")
                break
            if not worker.alive():
                progress.note(f"the worker exited ({worker.process.returncode}); see {worker.log}")
                break
            if time.monotonic() >= next_sweep:
                next_sweep += SWEEP_EVERY
                try:
                    sweep()
                except Exception as error:  # a locked SQLite file: next time
                    progress.note(f"  (sweep skipped: {error})")
            time.sleep(0.25)
        progress.done(snap)
        self.summary(plan, fanout.pk, sent_at, priority, len(inboxes))
        return snap.final == sum(expected.values())

    def send_priority(self, farm: ServerFarm, snap: Snapshot) -> dict[str, Any]:
        server = farm.servers[0]
        path = "/users/priority/inbox"
        server.behave(path, Behaviour(delay=0.02))
        at = time.time()
        with transaction.atomic():
            message = outbox.send(
                ACTOR,
                activity("Announce", "Reply to the one person who asked"),
                [server.url(path)],
                batch=Batch(tag="demo-priority"),
            )
        return {"message": message, "sent_at": at, "live": snap.live}

    def summary(
        self,
        plan: list[Group],
        message_id: int,
        sent_at: float,
        priority: dict[str, Any],
        total: int,
    ) -> None:
        rows = Delivery.objects.filter(message_id=message_id)
        by_inbox: dict[str, tuple[str, int]] = {  # inbox: (state, attempts)
            inbox: (state, attempts)
            for inbox, state, attempts in rows.values_list("inbox", "state", "attempts")
        }
        head = (
            f"{'host behaviour':<34}{'hosts':>6}{'inboxes':>8}{'delivered':>10}{'refused':>8}"
            f"{'failed':>7}{'other':>6}{'attempts':>9}{'requests':>9}{'paid msat':>10}  expected"
        )
        print("\n" + head + "\n" + "-" * (len(head) + 2))
        mismatches = []
        for group in plan:
            states: dict[str, int] = {}
            attempts = 0
            for inbox in group.inboxes:
                state, spent = by_inbox.get(inbox, ("unwritten", 0))
                states[state] = states.get(state, 0) + 1
                attempts += spent
            main = ("delivered", "refused", "failed")
            other = sum(n for s, n in states.items() if s not in main)
            requests = sum(server.request_count for server in group.servers)
            paid = paid_msat(group.inboxes)
            good = states.get(group.expect, 0) == len(group.inboxes)
            if not good:
                mismatches.append(group.label)
            print(
                f"{group.label:<34}{group.hosts:>6}{len(group.inboxes):>8,}"
                f"{states.get('delivered', 0):>10,}{states.get('refused', 0):>8,}"
                f"{states.get('failed', 0):>7,}{other:>6,}{attempts:>9,}{requests:>9,}{paid:>10,}"
                f"  {'all ' + group.expect if good else 'NOT all ' + group.expect}"
            )
        totals = rows.order_by().aggregate(
            attempts=Coalesce(Sum("attempts"), 0), last=Max("finished_at")
        )
        # The paid host's deliveries pay one after another: timed in the payments line.
        paid_inboxes = [i for g in plan if g.behaviour_for(0).gate for i in g.inboxes]
        free = rows.filter(state=DeliveryState.DELIVERED).exclude(inbox__in=paid_inboxes)
        last_delivered = free.aggregate(at=Max("finished_at"))["at"]
        states = dict(rows.order_by().values_list("state").annotate(n=Count("id")))
        delivered = states.get(DeliveryState.DELIVERED, 0)
        print()
        print(
            f"fan-out: {total:,} inboxes -> {delivered:,} delivered, "
            f"{states.get(DeliveryState.REFUSED, 0):,} refused, "
            f"{states.get(DeliveryState.FAILED, 0):,} failed, "
            f"{total - sum(states.get(s, 0) for s in FINAL_STATES):,} not final; "
            f"{totals['attempts']:,} attempts"
        )
        if last_delivered is not None and delivered:
            span = last_delivered.timestamp() - sent_at
            finished = sorted(
                t.timestamp() - sent_at for t in free.values_list("finished_at", flat=True)
            )
            p50, p95 = finished[len(finished) // 2], finished[int(len(finished) * 0.95) - 1]
            print(
                f"end-to-end: {len(finished):,} delivered to unpaid hosts {span:.1f} s after "
                f"send -> {len(finished) / span:,.0f} deliveries/s (half were in by {p50:.1f} s, "
                f"95% by {p95:.1f} s)"
            )
        if priority:
            row = Delivery.objects.filter(message=priority["message"]).first()
            if row is not None and row.state == DeliveryState.DELIVERED and row.finished_at:
                took = row.finished_at.timestamp() - priority["sent_at"]
                print(
                    f"priority send: delivered {took:.2f} s after send, overtaking "
                    f"{priority['live']:,} live fan-out deliveries (lane {row.lane})"
                )
            elif row is not None:
                print(f"priority send: {row.state} ({row.last_error or 'no error'})")
        for group in plan:
            if group.label in mismatches:
                odd = (
                    rows.filter(inbox__in=group.inboxes)
                    .exclude(state=group.expect)
                    .order_by()
                    .values_list("state", "last_error")
                    .annotate(n=Count("id"))
                )
                for state, error, n in odd[:5]:
                    print(f"UNEXPECTED: {group.label}: {n} {state} ({error or 'no error'})")
