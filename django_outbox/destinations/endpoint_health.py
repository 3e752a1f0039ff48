"""Webhook endpoints' health: failure days, disabling, and enabling again.

Hosts' rule (:mod:`django_outbox.destinations.failure_days`) applied to each endpoint URL: an
endpoint that failed on ``OUTBOX_WEBHOOK_DISABLE_AFTER_DAYS`` (5, as Svix) distinct
days with no success in between is disabled, the ``endpoint_disabled`` signal is
sent once that is committed, and the deliveries to it that a worker claims from
then on (new ones, and retries of older ones) are skipped, each with a
``delivery_failed``.  Only the endpoint's own failures count: no answer (a
timeout, a refused connection, a broken answer) or a 5xx; not a 429, which asks
us to slow down, not a 4xx, which the endpoint answered, and not an internal
error of ours.  A success deletes the endpoint's row; a disabled endpoint gets no
more deliveries, so it stays disabled until :func:`enable_endpoints`
(``outbox.enable_endpoint``, the admin action).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from django_outbox.conf import conf
from django_outbox.destinations.failure_days import MarkedNames, count_failure_day
from django_outbox.models import Endpoint, Signing
from django_outbox.signals import endpoint_disabled, send_logged
from django_outbox.values.outcomes import INTERNAL, AttemptResult, Outcome
from django_outbox.values.safe_text import one_line

_disabled = MarkedNames(Endpoint, "url", "disabled_since")


def endpoint_failed(outcome: Outcome) -> bool:
    """Whether ``outcome`` is a webhook endpoint's own failure: a retry after no
    answer or after a 5xx, not caused by us."""
    return (
        outcome.message.signing == Signing.STANDARD_WEBHOOKS
        and outcome.result is AttemptResult.RETRY
        and outcome.failure != INTERNAL
        and (outcome.status is None or outcome.status >= 500)
    )


@dataclass
class EndpointOutcomes:
    """What a batch of outcomes tells of webhook endpoints, noted while it is planned."""

    succeeded: set[str] = field(default_factory=set)
    #: The latest failure of each endpoint that failed: its row's fields.
    failed: dict[str, dict[str, Any]] = field(default_factory=dict)

    def note(self, outcome: Outcome) -> None:
        """Note ``outcome`` if it is a webhook's success or its endpoint's failure."""
        if outcome.message.signing != Signing.STANDARD_WEBHOOKS:
            return
        if outcome.result is AttemptResult.DELIVERED:
            self.succeeded.add(outcome.row.inbox)
        elif endpoint_failed(outcome):
            error = one_line(outcome.error)
            self.failed[outcome.row.inbox] = {"last_status": outcome.status, "last_error": error}

    def save(self) -> None:
        """Forget the failures of endpoints that succeeded, count a failure day for
        the others, and disable those now due: in the caller's transaction, with
        ``endpoint_disabled`` sent once it commits."""
        if self.succeeded:
            enable_endpoints(self.succeeded)
        failures = {url: values for url, values in self.failed.items() if url not in self.succeeded}
        days = conf.WEBHOOK_DISABLE_AFTER_DAYS or None
        disabled = count_failure_day(
            Endpoint, "url", failures, after_days=days, mark="disabled_since"
        )
        if disabled:
            transaction.on_commit(lambda: _announce(disabled), robust=True)


def _announce(urls: list[str]) -> None:
    """Send ``endpoint_disabled`` for the endpoints ``urls``, as their rows say now."""
    _disabled.forget()
    rows = Endpoint.objects.filter(url__in=urls, disabled_since__isnull=False)
    for row in rows:
        send_logged(
            endpoint_disabled,
            Endpoint,
            endpoint=row.url,
            since=row.disabled_since,
            failure_days=row.failure_days,
            status=row.last_status,
            error=row.last_error,
        )


def disabled_endpoints() -> frozenset[str]:
    """Endpoint URLs that are disabled, as this process last read them (at most
    ``OUTBOX_HOSTS_REFRESH`` seconds ago)."""
    return _disabled.get()


def skip_reason(url: str) -> str:
    """Why a delivery to the disabled endpoint ``url`` is skipped: its ``last_error``."""
    return f"skipped: the webhook endpoint {url} is disabled (see outbox.enable_endpoint)"


def enable_endpoints(urls: Iterable[str]) -> int:
    """Forget the failures of the endpoints ``urls`` (canonical URLs), enabling those
    disabled; returns how many were disabled.  Seen by every worker within
    ``OUTBOX_HOSTS_REFRESH`` seconds, by this process at once."""
    rows = Endpoint.objects.filter(url__in=sorted(set(urls)))
    with transaction.atomic():
        disabled = rows.filter(disabled_since__isnull=False).count()
        rows.delete()
    if disabled:
        _disabled.forget()
    return disabled
