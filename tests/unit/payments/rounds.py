"""One round of what a worker does for a delivery, by hand: claim, send, record.

Each round claims the delivery, builds its job (``jobs_for``: the open attempt and the
host's kept token), sends it with the real transport and records the outcome (ledger,
then the delivery's state).  No Celery, no Redis.
"""

from __future__ import annotations

from django.utils import timezone

from django_outbox.models import Delivery, DeliveryState
from django_outbox.outcomes import Outcome
from django_outbox.store.claimed import new_token
from django_outbox.store.transitions import claim
from django_outbox.worker.attempt import perform
from django_outbox.worker.process import this_process
from django_outbox.worker.recorder import apply_outcomes


class Collected:
    """Stands for the recorder thread, whose connection would not see this test's rows."""

    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []

    def put(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)


def round_of(ids: list[int]) -> list[Outcome]:
    """Claim ``ids`` (those due), send them and record what came of it."""
    return recorded(attempted(ids))


def attempted(ids: list[int]) -> list[Outcome]:
    """Claim ``ids`` (those due) and send them; what came of it, not yet recorded."""
    Delivery.objects.filter(id__in=ids, state=DeliveryState.QUEUED).update(
        next_attempt_at=timezone.now()
    )
    process = this_process()
    recorder, process.recorder = process.recorder, Collected()  # type: ignore[assignment]
    try:
        jobs = process.jobs_for(claim(ids, new_token()))
        outcomes = process.recorder.outcomes  # type: ignore[attr-defined]
    finally:
        process.recorder = recorder
    for job in jobs:  # on the engine's loop, where the process's transport belongs
        made = process.engine.call(perform(job, process.transport, process.breakers, None))
        outcomes.append(made.result(30))
    return outcomes


def recorded(outcomes: list[Outcome]) -> list[Outcome]:
    """Record ``outcomes`` as the recorder does; the outcomes as recorded."""
    return [outcome for outcome, _ in apply_outcomes(outcomes).decided]


def state(pk: int) -> str:
    """The delivery's state as stored."""
    return Delivery.objects.get(pk=pk).state
