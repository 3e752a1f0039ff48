"""The payments admin: every attempt, totals, a retry action, and never a secret."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_outbox import outbox
from django_outbox.models import Delivery, DeliveryState
from django_outbox.payments.models import PaymentAttempt, PaymentBudget
from testproject.demo.keys import ACTOR

pytestmark = pytest.mark.django_db

MACAROON = "AgEEbHNhdA" + "M" * 200
PREIMAGE = "5e" * 32


def attempt(delivery: Delivery, state: str, n: int, **fields: object) -> PaymentAttempt:
    now = timezone.now()
    return PaymentAttempt.objects.create(
        delivery=delivery,
        sender=ACTOR,
        host=delivery.host,
        destination=delivery.inbox,
        invoice="lnbcrt100n1" + "q" * 300,
        payment_hash=f"{n:064x}",
        macaroon=MACAROON,
        preimage=PREIMAGE if state in ("paid", "used") else "",
        amount_msat=10_000,
        fee_msat=7,
        state=state,
        invoice_expires_at=now + timedelta(hours=1),
        expires_at=now + timedelta(days=1),
        paid_at=now if state in ("paid", "used") else None,
        **fields,
    )


@pytest.fixture
def rows() -> list[PaymentAttempt]:
    outbox.send(ACTOR, {"type": "Create"}, ["https://a.example/inbox", "https://b.example/inbox"])
    first, second = Delivery.objects.order_by("id")
    Delivery.objects.filter(pk=second.pk).update(state=DeliveryState.REFUSED)
    return [
        attempt(first, "used", 1, uses=3),
        attempt(second, "failed", 2, reason="node says no_route"),
    ]


def test_the_list_shows_every_payment_and_totals_but_no_secret(
    admin_client: Client, rows: list[PaymentAttempt]
) -> None:
    page = admin_client.get(reverse("admin:django_outbox_paymentattempt_changelist"))
    assert page.status_code == 200
    text = page.content.decode()
    assert "a.example" in text and "b.example" in text
    assert "node says no_route" in text
    assert "Paid per day" in text and "Paid per host" in text
    assert ">10,000 msat<" in text
    assert MACAROON not in text and PREIMAGE not in text
    for query in ("?state__exact=failed", "?host=a.example"):
        filtered = admin_client.get(
            reverse("admin:django_outbox_paymentattempt_changelist") + query
        )
        assert filtered.status_code == 200


def test_the_detail_page_shows_prefixes_only(
    admin_client: Client, rows: list[PaymentAttempt]
) -> None:
    url = reverse("admin:django_outbox_paymentattempt_change", args=[rows[0].pk])
    text = admin_client.get(url).content.decode()
    assert MACAROON[:8] + "…" in text
    assert PREIMAGE[:6] + "…" in text
    assert MACAROON not in text and PREIMAGE not in text
    assert PREIMAGE not in repr(rows[0]) + str(rows[0])
    assert MACAROON not in repr(rows[0]) + str(rows[0])


def test_a_failed_payment_is_retried_by_requeueing_its_delivery(
    admin_client: Client, rows: list[PaymentAttempt]
) -> None:
    url = reverse("admin:django_outbox_paymentattempt_changelist")
    chosen = {"action": "retry", "index": "0", "_selected_action": [row.pk for row in rows]}
    confirmation = admin_client.post(url, chosen)
    assert confirmation.status_code == 200
    assert b"Requeue 1 of 1 selected deliveries?" in confirmation.content
    assert Delivery.objects.get(pk=rows[1].delivery_id).state == DeliveryState.REFUSED
    response = admin_client.post(url, {**chosen, "confirmed": "yes"})
    assert response.status_code == 302
    failed_delivery = Delivery.objects.get(pk=rows[1].delivery_id)
    assert failed_delivery.state == DeliveryState.QUEUED
    assert failed_delivery.attempts == 0


def test_a_deliverys_page_lists_its_payments_and_the_list_shows_todays_budgets(
    admin_client: Client, rows: list[PaymentAttempt], settings: Any
) -> None:
    settings.OUTBOX_PAYMENTS = {"CLIENT": "x.Client", "DAILY_BUDGET_MSAT": 100_000}
    PaymentBudget.objects.create(sender=ACTOR, day=timezone.now().date(), spent_msat=20_007)
    paid = rows[0]
    page = admin_client.get(reverse("admin:django_outbox_delivery_change", args=[paid.delivery_id]))
    html = page.content.decode()
    assert "Payments (402 answers paid for)" in html
    assert reverse("admin:django_outbox_paymentattempt_change", args=[paid.pk]) in html
    assert "10,000 msat" in html
    outbox.send(ACTOR, {"type": "Create"}, ["https://c.example/inbox"])
    unpaid = Delivery.objects.get(host="c.example")
    other = admin_client.get(reverse("admin:django_outbox_delivery_change", args=[unpaid.pk]))
    assert b"402 answers paid for" not in other.content
    listing = admin_client.get(
        reverse("admin:django_outbox_paymentattempt_changelist") + f"?delivery={paid.delivery_id}"
    ).content.decode()
    assert f"delivery #{paid.delivery_id}" in listing  # the filter shows what is chosen
    assert "20,007 msat (20.0%)" in listing and "79,993 msat" in listing
