"""Every change of a delivery's state but two: :mod:`~django_outbox.store.give_ups` fails
live deliveries, :mod:`~django_outbox.store.reclaim` takes back those of lost workers.

::

                send()                             send() behind a live delivery
      (none) ─────────────► queued ◄──────────────── waiting   with its ordering key
                           │  ▲    promote: the one before it finished
                     claim │  │ release, retry, hold, park, owner dead, lease lapsed
                           ▼  │
                          sending ───► delivered │ refused │ skipped     (settled)
                           │
                           └─────────► failed   attempts or deadline spent, given up
      queued, waiting ─────────────► failed     deadline passed, given up by hand
      any final state ─────────────► queued or waiting          requeue
      any final state, past retention ───► deleted              prune (store.pruning)

Every write is conditional on the state it leaves, and a claimed row's on its
claim's token as well, so a duplicated Celery message, a second worker or an
attempt whose lease was taken over finds nothing to change.  Attempts are
counted at claim time and given back when nothing was sent (a hold, a release,
a skip, an expiry), so a delivery that kills its worker every time still ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from django_outbox.conf import conf
from django_outbox.destinations.availability import Failure, record_failures, record_successes
from django_outbox.destinations.backoff import decide
from django_outbox.destinations.endpoint_health import EndpointOutcomes
from django_outbox.models import (
    FINAL_STATES,
    LIVE_STATES,
    Delivery,
    DeliveryState,
    Lane,
    Message,
)
from django_outbox.store.bulk_insert import bulk_insert
from django_outbox.store.claim_rows import CLAIMED_COLUMNS, check_claims, claimed_row
from django_outbox.store.grouped_updates import UNSPEND, GroupedUpdates, update_claimed
from django_outbox.store.history import save_history
from django_outbox.store.queries import (
    Lanes,
    by_lane,
    earlier_live_inboxes,
    freed_pairs,
    next_waiting,
    stranded_pairs,
)
from django_outbox.store.statement_parts import marks, name
from django_outbox.transport.target import inbox_host
from django_outbox.values.claimed import ClaimedRow
from django_outbox.values.outcomes import UNSPENT_RESULTS, AttemptResult, Outcome
from django_outbox.values.safe_text import one_line

_UNCLAIMED: dict[str, Any] = {"claimed_by": "", "lease_until": None}
_SETTLED = {
    AttemptResult.DELIVERED: DeliveryState.DELIVERED,
    AttemptResult.REFUSED: DeliveryState.REFUSED,
    AttemptResult.SKIPPED: DeliveryState.SKIPPED,
}


def stored_error(text: str) -> str:
    """An error as ``last_error`` stores it and signals pass it: one printable line,
    at most :data:`~django_outbox.values.safe_text.ERROR_LIMIT` characters.

    Errors carry text servers chose (a status line, a TLS alert); CR, LF and other
    control characters are escaped here, where every error is stored.
    """
    return one_line(text)


# ------------------------------------------------------------------ created ---


def create_deliveries(
    message: Message, inboxes: Sequence[str], via: Mapping[str, list[str]] | None = None
) -> tuple[list[tuple[int, str]], bool]:
    """Insert one delivery per inbox; the id and host of each to publish, and whether
    any wait.

    ``via`` gives the gateways of portable inboxes; such a delivery's host is
    its first gateway's.  Deliveries behind a live one with the same ordering
    key to their inbox are written ``waiting`` and not returned: they are
    queued when it finishes.
    """
    via = via or {}
    vias = [via.get(inbox, []) for inbox in inboxes]
    hosts = [
        inbox_host(gateways[0] if gateways else inbox)
        for inbox, gateways in zip(inboxes, vias, strict=True)
    ]
    waiting = _waiting_inboxes(message, inboxes)
    queued = bulk_insert(message, inboxes, hosts, vias, waiting, timezone.now())
    return queued, bool(waiting)


def _waiting_inboxes(message: Message, inboxes: Sequence[str]) -> set[str]:
    """Inboxes that still have a live delivery sent earlier with the same ordering key."""
    if not message.ordering_key:
        return set()
    if connection.vendor == "postgresql":
        # Sends with one key take turns until they commit, so that each sees
        # the rows of the one before it (SQLite writers take turns anyway).
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [message.ordering_key])
    return earlier_live_inboxes(message.ordering_key, inboxes, message.pk)


def promote_freed(message_id: int, ordering_key: str) -> Lanes:
    """Queue the waiting deliveries of a message that nothing live is before any more.

    Run once a send's rows commit: the delivery each waited for may have
    finished before they were visible, and then found no successor to queue.
    """
    return promote_successors(freed_pairs(message_id, ordering_key))


def promote_successors(finished: Iterable[tuple[str, str]]) -> Lanes:
    """Queue the next waiting delivery of each finished ``(ordering_key, inbox)``."""
    promoted: list[tuple[int, str]] = []
    for pk, lane in next_waiting(finished):
        now = timezone.now()
        if Delivery.objects.filter(id=pk, state=DeliveryState.WAITING).update(
            state=DeliveryState.QUEUED, next_attempt_at=now, dispatched_at=now
        ):
            promoted.append((pk, lane))
    return by_lane(promoted)


def free_stranded() -> Lanes:
    """Queue the first waiting delivery of each key and inbox with nothing live before it."""
    return promote_successors(stranded_pairs())


# ------------------------------------------------------------------ claimed ---


def claim(ids: Sequence[int], token: str) -> list[ClaimedRow]:
    """Claim whichever of ``ids`` are queued and due, counting one attempt each.

    One ``UPDATE ... RETURNING`` (PostgreSQL, and SQLite 3.35+): a claim costs
    one round trip, and a row another claim took is simply not returned.  The lease
    runs from the database's clock, by which the recovery pass judges it.
    """
    if not ids:
        return []
    now = timezone.now()
    lease, lease_params = _database_now_plus(conf.LEASE_SECONDS)
    sql = (
        f"UPDATE {name(Delivery)} SET state = %s, claimed_by = %s, lease_until = {lease}, "
        f"attempts = attempts + 1 WHERE id IN ({marks(ids)}) AND state = %s "
        f"AND next_attempt_at <= %s RETURNING {', '.join(CLAIMED_COLUMNS)}"
    )
    adapt = connection.ops.adapt_datetimefield_value
    params = [DeliveryState.SENDING.value, token, *lease_params, *ids]
    params += [DeliveryState.QUEUED.value, adapt(now)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [claimed_row(values, token) for values in cursor.fetchall()]


def _database_now_plus(seconds: float) -> tuple[str, list[Any]]:
    """SQL for the database's time ``seconds`` from now, with its parameters (the
    worker's clock on a database this package has no expression for)."""
    if connection.vendor == "postgresql":
        return "CURRENT_TIMESTAMP + %s * INTERVAL '1 second'", [seconds]
    if connection.vendor == "sqlite":
        # The text Django stores (and its Now() compares with) on SQLite.
        return "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'now', %s)", [f"+{seconds} seconds"]
    later = timezone.now() + timedelta(seconds=seconds)
    return "%s", [connection.ops.adapt_datetimefield_value(later)]


def release(rows: Sequence[ClaimedRow]) -> Lanes:
    """Give claimed deliveries back unsent, their attempt refunded; the ids to publish.

    One statement whatever their claim tokens: a stopping worker may hold hundreds, and
    on SQLite each commit is a disk sync.  A row that finished meanwhile is left alone,
    and its Celery message will find nothing to claim.
    """
    now = timezone.now()
    back = {"state": DeliveryState.QUEUED, "attempts": UNSPEND, "next_attempt_at": now}
    update_claimed(_ids_by_token(rows), back | {"dispatched_at": now, **_UNCLAIMED})
    return by_lane((row.id, row.lane) for row in rows)


def release_claim(claim: tuple[Sequence[int], str, float, str]) -> Lanes:
    """Give back unsent, their attempt refunded, whichever of ``ids`` are still claimed
    under ``token``, due again ``after`` seconds from now, with ``error`` (if any) as
    their last error (``claim`` is the four); the ids to publish now (none when ``after``
    parks them).  For a claim whose rows the worker could not prepare, or whose answer
    it never received."""
    ids, token, after, error = claim
    held = Delivery.objects.filter(id__in=list(ids), state=DeliveryState.SENDING, claimed_by=token)
    rows = list(held.values_list("id", "lane"))
    now = timezone.now()
    noted = {"last_error": stored_error(error)} if error else {}
    held.filter(id__in=[pk for pk, _ in rows]).update(
        state=DeliveryState.QUEUED,
        attempts=F("attempts") - 1,
        next_attempt_at=now + timedelta(seconds=after),
        dispatched_at=None if after else now,
        **noted,
        **_UNCLAIMED,
    )
    return by_lane(rows) if not after else {}


def _ids_by_token(rows: Iterable[ClaimedRow]) -> dict[str, list[int]]:
    by_token: dict[str, list[int]] = {}
    for row in rows:
        by_token.setdefault(row.token, []).append(row.id)
    return by_token


def park(until: Sequence[tuple[ClaimedRow, datetime]], error: str) -> None:
    """Give claimed deliveries back unsent, each ``(row, due)`` of ``until`` due then, in one
    statement: no outcome, no history row, no message (a hold is not an attempt).

    Their attempt is refunded and ``dispatched_at`` emptied, so that the publishing of
    due deliveries (the recovery pass, the sweeper) sends them once due, wherever this
    process is by then; ``last_error`` says why they wait.
    """
    parked = GroupedUpdates()
    back = {"state": DeliveryState.QUEUED, "attempts": UNSPEND, "dispatched_at": None}
    back |= {"last_error": stored_error(error), **_UNCLAIMED}
    for row, due in until:
        parked.add(row.token, row.id, back | {"next_attempt_at": due})
    for claims, values in parked.statements():
        update_claimed(claims, values)


# ----------------------------------------------------------------- outcomes ---


@dataclass
class OutcomePlan:
    """The changes a batch of outcomes makes, decided before any is saved."""

    #: Each outcome whose claim still held, with the fields it sets on its row.
    decided: list[tuple[Outcome, dict[str, Any]]] = field(default_factory=list)
    #: Retries due soon enough to ride on a Celery countdown: seconds -> ids by lane.
    retries: dict[int, Lanes] = field(default_factory=dict)
    #: ``(ordering_key, inbox)`` of deliveries that finished, to free their successors.
    finished: list[tuple[str, str]] = field(default_factory=list)
    updates: GroupedUpdates = field(default_factory=GroupedUpdates)
    succeeded: set[str] = field(default_factory=set)
    recovered: set[str] = field(default_factory=set)
    #: Hosts that failed in this batch, with the status and error of their latest failure.
    failing: dict[str, Failure] = field(default_factory=dict)
    endpoints: EndpointOutcomes = field(default_factory=EndpointOutcomes)


def plan_outcomes(outcomes: Sequence[Outcome]) -> OutcomePlan:
    """Decide the new state of each delivery whose claim still holds; write nothing."""
    now = timezone.now()
    plan = OutcomePlan()
    claims = check_claims([outcome.row.id for outcome in outcomes])
    done: set[int] = set()
    for outcome in outcomes:
        row = outcome.row
        check = claims.get(row.id)
        if check is None or check.claimed_by != row.token or row.id in done:
            continue
        done.add(row.id)
        if outcome.result is AttemptResult.DELIVERED:
            plan.succeeded.add(row.host)
            if check.failing:
                plan.recovered.add(row.host)
        elif outcome.host_failed:
            plan.failing[row.host] = (outcome.status, outcome.error)
        plan.endpoints.note(outcome)
        fields = _fields_for(outcome, now, plan)
        plan.updates.add(row.token, row.id, fields)
        plan.decided.append((outcome, fields))
    return plan


def _fields_for(outcome: Outcome, now: datetime, plan: OutcomePlan) -> dict[str, Any]:
    """The new field values of the row after ``outcome``, noting retries and successors."""
    row = outcome.row
    fields: dict[str, Any] = {
        "last_status": outcome.status,
        "last_error": stored_error(outcome.error),
    }
    if outcome.result in UNSPENT_RESULTS:
        fields["attempts"] = UNSPEND
    if outcome.result in _SETTLED:
        fields.update(state=_SETTLED[outcome.result], finished_at=now)
        plan.finished.append((row.ordering_key, row.inbox))
        return fields | _UNCLAIMED
    decision = decide(outcome, now)
    if decision.retry_at is None:
        error = f"{decision.give_up}: {outcome.error}" if outcome.error else decision.give_up
        fields.update(
            state=DeliveryState.FAILED,
            finished_at=now,
            deadline_reached=decision.deadline,
            last_error=stored_error(error),
        )
        plan.finished.append((row.ordering_key, row.inbox))
        return fields | _UNCLAIMED
    wait = (decision.retry_at - now).total_seconds()
    parked = wait > conf.COUNTDOWN_LIMIT
    fields.update(
        state=DeliveryState.QUEUED,
        next_attempt_at=decision.retry_at,
        dispatched_at=None if parked else now,
    )
    if not parked:
        lanes = plan.retries.setdefault(max(0, int(wait + 0.999)), {})
        # A delivery back to pay its stored invoice is paid for: it goes ahead of its
        # lane's unpaid backlog, on the priority lane.
        lane = Lane.PRIORITY if outcome.result is AttemptResult.PAYING else row.lane
        lanes.setdefault(lane, []).append(row.id)
    return fields | _UNCLAIMED


def save_outcomes(plan: OutcomePlan) -> None:
    """Write what :func:`plan_outcomes` decided, the attempts' history and the hosts'
    and webhook endpoints' health, in one transaction."""
    with transaction.atomic():
        for claims, values in plan.updates.statements():
            update_claimed(claims, values)
        save_history(outcome for outcome, _ in plan.decided)
        # Only hosts that had a Host row when the batch was read: a row another
        # process writes after that is a failure seen after this success.
        record_successes(plan.recovered)
        record_failures(
            {host: failure for host, failure in plan.failing.items() if host not in plan.succeeded}
        )
        plan.endpoints.save()


# ------------------------------------------------------ by hand and by sweep ---


def requeue(ids: Iterable[int]) -> tuple[Lanes, int]:
    """Queue the finished deliveries among ``ids`` again, with a fresh attempt budget.

    One with an ordering key waits again if an earlier delivery with that key to
    its inbox is still live.  Returns the ids to publish (those not waiting) and
    how many were requeued in all.
    """
    now = timezone.now()
    final = Delivery.objects.filter(state__in=FINAL_STATES)
    rows = list(
        final.filter(id__in=list(ids)).values_list(
            "id", "lane", "ordering_key", "inbox", "message_id"
        )
    )
    behind = {
        pk
        for pk, _, key, inbox, message_id in rows
        if key
        and Delivery.objects.filter(
            ordering_key=key, inbox=inbox, state__in=LIVE_STATES, message_id__lt=message_id
        ).exists()
    }
    fresh = {"attempts": 0, "next_attempt_at": now, "deadline_reached": False, "finished_at": None}
    fresh |= _UNCLAIMED | {"failed_signal_pending": False}
    final.filter(id__in=behind).update(state=DeliveryState.WAITING, dispatched_at=None, **fresh)
    queued = [(pk, lane) for pk, lane, *_ in rows if pk not in behind]
    final.filter(id__in=[pk for pk, _ in queued]).update(
        state=DeliveryState.QUEUED, dispatched_at=now, **fresh
    )
    return by_lane(queued), len(rows)
