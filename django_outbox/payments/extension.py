"""Paid push as an extension of delivery: what it does at each of the core's steps.

At the claim each delivery gets its :class:`~django_outbox.payments.paying.PaymentJob`
(its open payment attempt, its host's kept token) and those whose host is being paid
are held and parked; the attempt pays and presents through the job; the recorder
writes the payment reports first (:func:`~django_outbox.payments.ledger.record_payments`)
and publishes at once, on the priority lane, the deliveries parked for a host whose
payment ended; the sweep and the recovery pass ask the node about pending payments of
finished deliveries, and the sweep prunes old attempts.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.urls import reverse
from django.utils import timezone

from django_outbox.broker.publish import publish
from django_outbox.conf import conf
from django_outbox.destinations.backoff import held_until
from django_outbox.extensions import Extension, Tickets
from django_outbox.models import Lane
from django_outbox.payments import ledger
from django_outbox.payments.claims import payment_jobs
from django_outbox.payments.invoices import load_decoder
from django_outbox.payments.ledger import record_payments
from django_outbox.payments.recovery import resolve_orphans, resolve_orphans_now
from django_outbox.payments.reports import PAID_AT_CLAIM, PARKED_HOLDS
from django_outbox.payments.served_first import paid_hosts
from django_outbox.payments.threads import stop_payment_threads
from django_outbox.store.transitions import park
from django_outbox.values.claimed import ClaimedRow, MessageData
from django_outbox.values.outcomes import AttemptResult, Outcome

if TYPE_CHECKING:
    from django.contrib.admin import AdminSite
    from django.contrib.admin.options import InlineModelAdmin
    from prometheus_client.core import Metric


class PaidPush(Extension):
    """Paying hosts that answer ``402 Payment Required`` (``OUTBOX_PAYMENTS``)."""

    def tickets(
        self, claimed: Sequence[ClaimedRow], messages: Mapping[int, MessageData]
    ) -> Tickets:
        """Each delivery's payment job, and those held while their host is paid."""
        jobs, wait = payment_jobs(claimed, messages)
        return Tickets(dict(jobs), {pk: (PAID_AT_CLAIM, seconds) for pk, seconds in wait.items()})

    def published_first(self, hosts: Collection[str]) -> set[str]:
        """The hosts that charge per message or have a kept token: their new deliveries
        are paid ones (:mod:`~django_outbox.payments.served_first`)."""
        return paid_hosts(hosts)

    def park(self, holds: Sequence[Outcome]) -> list[Outcome]:
        """``holds`` but those held while their host is paid, which are parked until
        their hold ends, in one statement per reason.  A hold that would end past its
        batch's deadline stays, to fail the delivery."""
        now = timezone.now()
        parked: dict[str, list[tuple[ClaimedRow, datetime]]] = {}
        kept: list[Outcome] = []
        for outcome in holds:
            if outcome.result is AttemptResult.HELD and outcome.error in PARKED_HOLDS:
                deadline = outcome.message.deadline
                due = held_until(now, outcome.held_for or 0.0, deadline).retry_at
                if due is not None:
                    parked.setdefault(outcome.error, []).append((outcome.row, due))
                    continue
            kept.append(outcome)
        for error, rows in parked.items():
            park(rows, error)
        return kept

    def record(self, outcomes: Sequence[Outcome]) -> list[Outcome]:
        """Write the payment reports, publish the deliveries a payment's end released,
        and park the holds the reports made."""
        settings = conf.PAYMENTS
        if settings is None:  # turned off since this process asked
            return list(outcomes)
        recorded = record_payments(outcomes, settings)
        publish({Lane.PRIORITY: recorded.released})
        return self.park(recorded.outcomes)

    def sweep_steps(self) -> dict[str, Callable[[], int]]:
        """Resolve pending payments of finished deliveries; prune old attempts."""
        return {"payments": resolve_payments, "pruned_payments": _prune_payments}

    def recovery_steps(self) -> dict[str, Callable[[], int]]:
        """Resolve pending payments of finished deliveries of any age, within a budget."""
        return {"payments": resolve_orphans_now}

    def worker_starting(self) -> None:
        """Import the invoice decoder before the pool forks: no delivery waits for it."""
        load_decoder()

    def worker_stopping(self) -> None:
        """Stop the process's payment threads."""
        stop_payment_threads()

    def register_admin(self, site: AdminSite) -> None:
        """The payment attempts' admin."""
        from django_outbox.payments.admin import PaymentAttemptAdmin
        from django_outbox.payments.models import PaymentAttempt

        site.register(PaymentAttempt, PaymentAttemptAdmin)

    def metric_families(self, ttl: float) -> Iterable[Metric]:
        """The payment attempts kept, their prices and fees, by state."""
        from django_outbox.payments.metrics import payment_families

        return payment_families(ttl)

    def delivery_inlines(self, delivery: Any) -> list[type[InlineModelAdmin[Any, Any]]]:
        """The payments, for a delivery that met a 402."""
        from django_outbox.payments.admin import PaymentInline
        from django_outbox.payments.models import PaymentAttempt

        paid = PaymentAttempt.objects.filter(delivery=delivery).exists()
        return [PaymentInline] if paid else []

    def host_links(self, host: str) -> list[tuple[str, str]]:
        """The host's payments, when it has been paid."""
        from django_outbox.payments.models import PaymentAttempt

        if not PaymentAttempt.objects.filter(host=host).exists():
            return []
        listing = reverse("admin:django_outbox_paymentattempt_changelist")
        return [("Payments", f"{listing}?{urlencode({'host': host})}")]


#: The one instance the registry hands out.
PAID_PUSH = PaidPush(name="payments")


def resolve_payments() -> int:
    """Ask the node about the pending payments of finished deliveries."""
    settings = conf.PAYMENTS
    return resolve_orphans(settings) if settings is not None else 0


def _prune_payments() -> int:
    return ledger.prune(conf.RETENTION_SECONDS)
