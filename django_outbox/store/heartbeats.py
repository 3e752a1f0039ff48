"""The heartbeat table: which worker processes are alive, by the database's clock.

A process writes its row every ``OUTBOX_HEARTBEAT_INTERVAL`` seconds (:func:`beat`)
and deletes it when it stops cleanly (:func:`stop_beating`).  Times are the
database's (``NOW()``), never a worker's, so that the clocks of several machines
need not agree.  A row not written for ``OUTBOX_HEARTBEAT_TIMEOUT`` seconds is a
dead process; rows dead for an hour are pruned.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from django.db.models import Exists, OuterRef
from django.db.models.expressions import Combinable
from django.db.models.functions import Length, Now, Substr

from django_outbox.models import Heartbeat

#: Seconds a dead process's row is kept (so that its claims are recognised as its).
KEPT = 3600.0


def _since(seconds: float) -> Combinable:
    """The database's time ``seconds`` ago, as an expression."""
    return Now() - timedelta(seconds=seconds)


def beat(
    name: str,
    *,
    leader: bool = False,
    can_lead: bool = True,
    parts: Mapping[str, object] | None = None,
    backlog: int = 0,
) -> None:
    """Record that the process ``name`` is alive now (its row is made if missing), with
    what it reports of itself: whether it leads and may lead, its parts, its backlog."""
    report: dict[str, object] = {"leader": leader, "can_lead": can_lead, "backlog": backlog}
    report["parts"] = dict(parts or {})
    if not Heartbeat.objects.filter(name=name).update(beat_at=Now(), **report):
        Heartbeat.objects.create(name=name, beat_at=Now(), **report)


def stop_beating(name: str) -> None:
    """Delete the row of ``name``, which stopped cleanly."""
    Heartbeat.objects.filter(name=name).delete()


def live_names(timeout: float, *, may_lead: bool = False) -> list[str]:
    """The processes that beat within ``timeout`` seconds, oldest row first (with
    ``may_lead``, only those that said they may lead)."""
    fresh = Heartbeat.objects.filter(beat_at__gte=_since(timeout)).order_by("id")
    if may_lead:
        fresh = fresh.filter(can_lead=True)
    return list(fresh.values_list("name", flat=True))


def prune() -> int:
    """Delete the rows of processes dead for longer than :data:`KEPT`."""
    deleted, _ = Heartbeat.objects.filter(beat_at__lt=_since(KEPT)).delete()
    return deleted


def owner_alive(column: str, timeout: float) -> Exists:
    """True where the claim token in ``column`` belongs to a process that beat within
    ``timeout`` seconds: a token is its owner's name followed by ``:n``."""
    owner = Substr(OuterRef(column), 1, Length("name"))
    return Exists(Heartbeat.objects.filter(beat_at__gte=_since(timeout), name=owner))
