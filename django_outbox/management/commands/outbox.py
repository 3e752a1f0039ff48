"""``python manage.py outbox``: look at the outbox and act on it from a shell.

::

    outbox status [--json] [--watch [SECONDS]] [--host HOST]
    outbox requeue [--state S ...] [--host H] [--tag T] [--since WHEN] [--yes] [--json]
    outbox give-up [--state S ...] [--host H] [--tag T] [--since WHEN] [--reason R] [--yes]
    outbox hosts list [--json]  |  outbox hosts reset HOST ... | --all --yes
    outbox hosts pause HOST [--reason R] [--until WHEN]  |  outbox hosts resume HOST

``requeue`` and ``give-up`` only count what they would change unless ``--yes``
is given.  Exit status: 0 done (or nothing to do), 1 bad input, 2 bad usage.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import QuerySet

from django_outbox.exceptions import InvalidHost, InvalidSince
from django_outbox.models import Delivery, Host
from django_outbox.status.host_report import HostReport, host_report, reset_hosts
from django_outbox.status.snapshot import take_snapshot
from django_outbox.status.text import clock, render_host, render_snapshot, table
from django_outbox.upkeep import bulk
from django_outbox.upkeep.pauses import pause_host, resume_host

_FINAL = list(bulk.FINAL)
_LIVE = list(bulk.LIVE)


class Command(BaseCommand):
    """See the module docstring."""

    help = "Look at the outbox (status, hosts) and requeue or give up on deliveries."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        status = actions.add_parser("status", help="queue depth, age, throughput, failing hosts")
        status.add_argument("--json", action="store_true", help="one JSON object, for scripts")
        status.add_argument(
            "--watch",
            nargs="?",
            type=float,
            const=2.0,
            metavar="SECONDS",
            help="redraw every SECONDS (2) until interrupted",
        )
        status.add_argument("--count", type=int, default=0, help="with --watch: stop after N")
        status.add_argument("--host", help="one host in detail, with its attempt history")
        for name, verb, states, default in (
            ("requeue", "queue again", _FINAL, ["failed"]),
            ("give-up", "fail now", _LIVE, ["queued", "waiting"]),
        ):
            act = actions.add_parser(name, help=f"{verb} the deliveries selected (dry run)")
            act.add_argument("--state", nargs="+", choices=states, default=default)
            act.add_argument("--host", help="deliveries to this host")
            act.add_argument("--tag", help="deliveries of messages with this batch tag")
            # Read in handle(), not by argparse: a CommandError raised while parsing the
            # command line is not caught by Django, and prints a traceback.
            act.add_argument(
                "--since",
                help="finished (requeue) or created (give-up) since: 30m, 2h, 7d or a date",
            )
            act.add_argument("--yes", action="store_true", help="act; without it, only count")
            act.add_argument("--json", action="store_true")
            if name == "give-up":
                act.add_argument("--reason", default="given up with manage.py outbox give-up")
        hosts = actions.add_parser("hosts", help="failing hosts: list, reset, pause, resume")
        hosts_actions = hosts.add_subparsers(dest="hosts_action", metavar="list|reset|pause|resume")
        listing = hosts_actions.add_parser("list", help="failing and unavailable hosts")
        listing.add_argument("--json", action="store_true")
        reset = hosts_actions.add_parser("reset", help="forget failures, close the breaker")
        reset.add_argument("names", nargs="*", metavar="HOST")
        reset.add_argument("--all", action="store_true", help="every failing host")
        reset.add_argument("--yes", action="store_true", help="needed with --all")
        pause = hosts_actions.add_parser("pause", help="hold every delivery to a host")
        pause.add_argument("name", metavar="HOST")
        pause.add_argument("--reason", default="", help="shown with its held deliveries")
        pause.add_argument("--until", help="resume by itself after: 30m, 2h, 7d or a date")
        resume = hosts_actions.add_parser("resume", help="send a paused host's deliveries")
        resume.add_argument("name", metavar="HOST")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "status":
            self.status(options)
        elif action in ("requeue", "give-up"):
            self.change(action, options)
        else:
            self.hosts(options)

    def status(self, options: dict[str, Any]) -> None:
        if options["host"]:
            report = host_report(options["host"])
            if options["json"]:
                self.stdout.write(json.dumps(host_dict(report), indent=2))
            else:
                self.stdout.write(render_host(report))
            return
        if options["watch"] is None:
            snapshot = take_snapshot()
            if options["json"]:
                self.stdout.write(json.dumps(snapshot.as_dict(), indent=2))
            else:
                self.stdout.write(render_snapshot(snapshot))
            return
        interval, shown = max(0.5, options["watch"]), 0
        try:
            while not options["count"] or shown < options["count"]:
                text = render_snapshot(take_snapshot())
                clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
                self.stdout.write(f"{clear}{text}\n(every {interval:g}s; Ctrl-C to stop)")
                self.stdout.flush()
                shown += 1
                if not options["count"] or shown < options["count"]:
                    time.sleep(interval)
        except KeyboardInterrupt:
            pass

    def change(self, action: str, options: dict[str, Any]) -> None:
        try:
            selected = selection(action, options)
            matched = selected.count()
        except InvalidSince as error:
            raise CommandError(f"--since {error}") from error
        changed = 0
        if options["yes"]:
            if action == "requeue":
                changed = bulk.requeue(selected, options["state"])
            else:
                changed = bulk.give_up(selected, options["reason"], options["state"])
        if options["json"]:
            result = {"action": action, "matched": matched, "changed": changed}
            self.stdout.write(json.dumps({**result, "dry_run": not options["yes"]}))
        elif options["yes"]:
            done = "requeued" if action == "requeue" else "gave up on"
            self.stdout.write(f"{done} {changed:,} of {matched:,} deliveries selected")
        else:
            verb = "requeue" if action == "requeue" else "give up on"
            self.stdout.write(f"would {verb} {matched:,} deliveries; run again with --yes to act")
            for row in selected.order_by("-id")[:5]:
                self.stdout.write(f"  #{row.pk} {row.inbox} {row.state} {row.last_error[:60]}")

    def hosts(self, options: dict[str, Any]) -> None:
        if options["hosts_action"] in ("pause", "resume"):
            self.pause_or_resume(options)
            return
        if options["hosts_action"] == "reset":
            names = list(options["names"])
            if options["all"]:
                if not options["yes"]:
                    raise CommandError("hosts reset --all resets every failing host: add --yes")
                names += Host.objects.values_list("name", flat=True)
            if not names:
                raise CommandError("name the hosts to reset, or give --all --yes")
            deleted, breakers = reset_hosts(names)
            self.stdout.write(f"reset {breakers} hosts ({deleted} were failing)")
            return
        rows = list(Host.objects.order_by("-failure_days", "name"))
        if options.get("json"):
            data = [
                {
                    "host": row.name,
                    "failure_days": row.failure_days,
                    "failing_since": row.first_failure_at.isoformat(),
                    "unavailable_since": _iso(row.unavailable_since),
                }
                for row in rows
            ]
            self.stdout.write(json.dumps(data, indent=2))
            return
        self.stdout.write(f"{len(rows):,} failing hosts")
        if not rows:
            return
        for line in table(
            ["host", "failure days", "failing since", "unavailable since"],
            (
                [r.name, r.failure_days, clock(r.first_failure_at), clock(r.unavailable_since)]
                for r in rows
            ),
        ):
            self.stdout.write(line)

    def pause_or_resume(self, options: dict[str, Any]) -> None:
        try:
            if options["hosts_action"] == "resume":
                released = resume_host(options["name"])
                self.stdout.write(f"resumed {options['name']}: {released:,} deliveries sent again")
                return
            until = bulk.parse_until(options["until"]) if options["until"] else None
            pause = pause_host(options["name"], options["reason"], until)
        except (InvalidHost, InvalidSince) as error:
            raise CommandError(str(error)) from error
        end = f"until {clock(pause.until)}" if pause.until else "until resumed"
        self.stdout.write(f"paused {pause.host} {end}; its deliveries are held")


def selection(action: str, options: dict[str, Any]) -> QuerySet[Delivery]:
    """The deliveries ``requeue`` or ``give-up`` would change, from the options."""
    selected = Delivery.objects.filter(state__in=options["state"])
    if options["host"]:
        selected = selected.filter(host=options["host"].lower())
    if options["tag"]:
        selected = selected.filter(message__tag=options["tag"])
    if options["since"]:
        moment = "finished_at__gte" if action == "requeue" else "created_at__gte"
        selected = selected.filter(**{moment: bulk.parse_since(options["since"])})
    return selected


def host_dict(report: HostReport) -> dict[str, Any]:
    """A :class:`~django_outbox.status.host_report.HostReport` as JSON-ready data."""
    failing = report.failing
    return {
        "host": report.host,
        "counts": report.counts,
        "due": report.due,
        "oldest_due_seconds": report.oldest_due,
        "failing_since": _iso(failing.first_failure_at) if failing else None,
        "failure_days": failing.failure_days if failing else 0,
        "unavailable_since": _iso(failing.unavailable_since) if failing else None,
        "reason": failing.last_error if failing else None,
        "paused": None
        if report.pause is None
        else {
            "since": _iso(report.pause.paused_at),
            "until": _iso(report.pause.until),
            "reason": report.pause.reason,
        },
        "breaker": None
        if report.breaker is None
        else {"failures": report.breaker.failures, "open_until": _iso(report.breaker.open_until)},
        "recent_attempts": vars(report.recent) if report.recent else None,
        "history": [
            {
                "delivery": a.delivery_id,
                "attempt": a.number,
                "held": a.held,
                "times": a.times,
                "at": a.at.isoformat(),
                "duration": a.duration,
                "status": a.status,
                "scheme": a.scheme,
                "result": a.result,
                "error": a.error,
                "wait": a.wait,
            }
            for a in report.history
        ],
        "problems": report.problems,
    }


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None
