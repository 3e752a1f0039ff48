"""The worker processes as their heartbeat rows tell: who beats, who leads, what ails them.

Each process writes its row every ``OUTBOX_HEARTBEAT_INTERVAL`` seconds with what it
reports of itself (:mod:`django_outbox.worker.heartbeat`): whether it leads and may lead,
each supervised part (alive, busy for how long, stuck, doing what) and its recorder's
backlog.  Ages are read by the database's clock, which wrote the beats.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import DurationField, ExpressionWrapper, F
from django.db.models.functions import Now

from django_outbox.conf import conf
from django_outbox.models import Heartbeat

#: Rows of processes dead for longer than this are left out (they are pruned later).
DEAD_SHOWN = 600.0
#: At most this many processes are listed.
LISTED = 100


@dataclass(frozen=True)
class ProcessStatus:
    """One worker process's last beat and what it reported."""

    name: str
    started_at: datetime
    beat_at: datetime
    #: Seconds since its last beat, by the database's clock.
    silent_for: float
    leader: bool
    can_lead: bool
    backlog: int
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def beating(self) -> bool:
        """Whether it beat within ``OUTBOX_HEARTBEAT_TIMEOUT`` (else it counts as dead)."""
        return self.silent_for <= conf.HEARTBEAT_TIMEOUT

    @property
    def unwell(self) -> list[str]:
        """Its parts that were dead or stuck at its last beat."""
        return [
            name
            for name, part in sorted(self.parts.items())
            if not part.get("alive", True) or part.get("stuck", False)
        ]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (``outbox status --json``)."""
        return {
            "name": self.name,
            "started_at": self.started_at.isoformat(),
            "beat_at": self.beat_at.isoformat(),
            "silent_for_seconds": round(self.silent_for, 1),
            "beating": self.beating,
            "leader": self.leader,
            "can_lead": self.can_lead,
            "recorder_backlog": self.backlog,
            "parts": self.parts,
            "unwell": self.unwell,
        }


def process_statuses() -> list[ProcessStatus]:
    """The processes that beat in the last :data:`DEAD_SHOWN` seconds, oldest first."""
    silent = ExpressionWrapper(Now() - F("beat_at"), output_field=DurationField())
    rows = (
        Heartbeat.objects.annotate(silent=silent)
        .filter(beat_at__gte=Now() - timedelta(seconds=DEAD_SHOWN))
        .order_by("id")[:LISTED]
    )
    return [
        ProcessStatus(
            row.name,
            row.started_at,
            row.beat_at,
            max(0.0, row.silent.total_seconds()),
            row.leader,
            row.can_lead,
            row.backlog,
            dict(row.parts or {}),
        )
        for row in rows
    ]
