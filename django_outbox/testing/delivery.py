"""Delivering captured sends in the test's own thread, through the worker's code.

What a ``deliver`` task does, minus Celery and threads: claim the due rows
(:func:`~django_outbox.store.transitions.claim`), turn them into jobs
(:func:`~django_outbox.worker.preparing.prepare_jobs`), make each attempt
(:func:`~django_outbox.worker.attempt.perform`: breaker, signing,
double-knocking, judging the answer), then save the outcomes and send the
signals (:func:`~django_outbox.worker.recorder.apply_outcomes`) and publish
what follows (retries, successors) to whatever publisher is in place.  Rounds
repeat while deliveries of the given messages are due: a successor freed by an
ordering key goes in the next round.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import cast

from django.utils import timezone

from django_outbox.breakers import BreakerPolicy, BreakerStore
from django_outbox.breakers.configured import configured_policy
from django_outbox.broker.publish import publish
from django_outbox.conf import conf
from django_outbox.exceptions import OutboxError
from django_outbox.models import Delivery, DeliveryState, PendingInboxes
from django_outbox.sending.fanout import expand
from django_outbox.store.claim_rows import load_messages, new_token
from django_outbox.store.transitions import claim, release
from django_outbox.testing.inbox import FakeTransport
from django_outbox.transport import Transport
from django_outbox.values.claimed import ClaimedRow
from django_outbox.values.outcomes import AttemptResult, Outcome
from django_outbox.worker.attempt import Job, perform
from django_outbox.worker.preparing import DirectAnswers, prepare_jobs
from django_outbox.worker.recorder import apply_outcomes, publish_effects

#: Rounds one call makes at most; each spends an attempt or frees a successor.
MAX_ROUNDS = 1000


class DeliveryLoop(OutboxError):
    """Deliveries kept coming due for :data:`MAX_ROUNDS` rounds of one call."""


def deliver_messages(
    message_ids: Collection[int],
    transport: FakeTransport,
    breakers: BreakerStore,
    *,
    retry_now: bool = False,
) -> None:
    """Attempt every due delivery of ``message_ids`` through ``transport``, round after round.

    A large fan-out's remaining rows are written first, as its ``expand`` task
    would.  With ``retry_now``, deliveries waiting for a retry (or held by a
    breaker) are made due at once; the rounds then stop when every delivery has
    settled or failed, or when a round was all holds (the breaker is open).
    Exceptions from an inbox handler propagate, once the attempts made so far
    are saved and the rest released.
    """
    policy = configured_policy()
    for _ in range(MAX_ROUNDS):
        unexpanded = PendingInboxes.objects.filter(message_id__in=message_ids)
        for pk in unexpanded.values_list("message_id", flat=True).distinct().order_by():
            expand(pk)
        queued = Delivery.objects.filter(message_id__in=message_ids, state=DeliveryState.QUEUED)
        if retry_now:
            queued.filter(next_attempt_at__gt=timezone.now()).update(next_attempt_at=timezone.now())
        due = list(
            queued.filter(next_attempt_at__lte=timezone.now())
            .order_by("id")
            .values_list("id", flat=True)
        )
        if not due:
            return
        # perform() calls nothing of its transport but post(), which the fake has.
        outcomes = _round(claim(due, new_token()), cast(Transport, transport), breakers, policy)
        if retry_now and all(outcome.result is AttemptResult.HELD for outcome in outcomes):
            return
    raise DeliveryLoop(f"deliveries were still due after {MAX_ROUNDS} rounds")


async def _perform_each(
    jobs: list[Job],
    transport: Transport,
    breakers: BreakerStore,
    policy: BreakerPolicy | None,
    outcomes: list[Outcome],
) -> None:
    """Make the attempts one after another, in order, as the engine's loop would."""
    for job in jobs:
        outcomes.append(await perform(job, transport, breakers, policy))


def _round(
    claimed: list[ClaimedRow],
    transport: Transport,
    breakers: BreakerStore,
    policy: BreakerPolicy | None,
) -> list[Outcome]:
    """One attempt at each claimed row, recorded as the worker's recorder would."""
    outcomes: list[Outcome] = []
    messages = load_messages({row.message_id for row in claimed})
    jobs = prepare_jobs(claimed, messages, DirectAnswers(conf.KEY_RESOLVER), outcomes.append)
    try:
        asyncio.run(_perform_each(jobs, transport, breakers, policy, outcomes))
    finally:
        done = {outcome.row.id for outcome in outcomes}
        unsent = [row for row in claimed if row.id not in done]
        if unsent:
            publish(release(unsent))
        publish_effects(apply_outcomes(outcomes))
    return outcomes
