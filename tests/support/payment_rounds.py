"""One round of what a worker does for a delivery, by hand: claim, send, record.

Each round claims the delivery, builds its job (``jobs_for``: the open attempt and the
host's kept token), sends it with the real transport and records the outcome (ledger,
then the delivery's state).  No Celery, no Redis.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from django_outbox import outbox
from django_outbox.models import Delivery, DeliveryState
from django_outbox.store.claim_rows import new_token
from django_outbox.store.transitions import claim
from django_outbox.values.outcomes import Outcome
from django_outbox.worker.attempt import perform
from django_outbox.worker.process import this_process
from django_outbox.worker.recorder import apply_outcomes
from testproject.demo.keys import ACTOR
from testproject.lightning.issuer import InvoiceIssuer
from testproject.lightning.l402_inbox import L402Gate, L402InboxServer
from testproject.lightning.lnd import FakeLndServer

NOTE = {"@context": "https://www.w3.org/ns/activitystreams", "type": "Create", "id": "x"}
#: What the L402 inboxes of these tests charge, in millisatoshis.
PRICE = 10_000


def payments(lnd: FakeLndServer, **extra: Any) -> dict[str, Any]:
    """``OUTBOX_PAYMENTS`` paying through ``lnd`` on regtest, with ``extra`` keys."""
    return {
        "CLIENT": "django_outbox.payments.clients.lnd.LndRestClient",
        "OPTIONS": {"url": lnd.url, "macaroon_hex": lnd.macaroon_hex, "timeout": 5},
        "NETWORK": "bcrt",
        "MAX_FEE_MSAT": 100,
        **extra,
    }


def serve(issuer: InvoiceIssuer, **options: Any) -> L402InboxServer:
    """An L402 inbox charging :data:`PRICE`, started."""
    return L402InboxServer(L402Gate(issuer, price_msat=PRICE, **options)).start()


def send(*urls: str) -> list[int]:
    """Send one note to ``urls``; the ids of its deliveries, in order."""
    outbox.send(ACTOR, NOTE, list(urls))
    return list(Delivery.objects.filter(inbox__in=urls).order_by("id").values_list("id", flat=True))


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
