"""``EXPLAIN (ANALYZE, BUFFERS)`` of the statements the package runs, as it runs them.

:func:`explained` runs a call of the package's own code (a claim, a recorder's save,
a pass of the sweeper) with an execute wrapper that explains each statement before
running it, in a transaction rolled back at the end: the plans are those of the
package's SQL with its real parameters, and the rows are left as they were.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.common import ACTOR, activity

#: Statements worth a plan (not SAVEPOINT, SET and the like).
_EXPLAINED = ("SELECT", "UPDATE", "DELETE", "INSERT", "WITH")


def explained(call: Callable[[], Any]) -> list[tuple[str, str]]:
    """Run ``call`` in a transaction rolled back at the end, each of its statements
    preceded by an ``EXPLAIN (ANALYZE, BUFFERS)`` of itself; (statement, plan) pairs.

    Each statement is explained (and so run) in a savepoint rolled back at once, then
    run as the package runs it, so that what follows sees its effects.  A statement of
    the same text as one explained before (Django deletes in chunks of a hundred ids)
    is only run.
    """
    from django.db import connection, transaction

    plans: list[tuple[str, str]] = []

    def wrapper(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        fresh = all(sql != seen for seen, _ in plans)
        if fresh and not many and sql.lstrip().upper().startswith(_EXPLAINED):
            cursor = context["cursor"]
            cursor.execute("SAVEPOINT bench_plan")
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
            plans.append((sql, "\n".join(row[0] for row in cursor.fetchall())))
            cursor.execute("ROLLBACK TO SAVEPOINT bench_plan")
            cursor.execute("RELEASE SAVEPOINT bench_plan")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper), transaction.atomic():
        call()
        transaction.set_rollback(True)
    return plans


def fresh_deliveries(count: int) -> list[int]:
    """Send one activity to ``count`` new inboxes (not published); the new rows' ids."""
    from django_outbox import outbox
    from django_outbox.models import Delivery
    from django_outbox.testing import captured_sends

    with captured_sends():
        inboxes = [f"https://plan{n}.example/inbox" for n in range(count)]
        message = outbox.send(ACTOR, activity(), inboxes)
    assert message is not None
    return list(Delivery.objects.filter(message=message).values_list("id", flat=True))


def claim_and_record(ids: list[int]) -> None:
    """Claim ``ids`` and save a delivered outcome for each, as a worker does."""
    from django_outbox.store.claim_rows import load_messages, new_token
    from django_outbox.store.transitions import claim, plan_outcomes, save_outcomes
    from django_outbox.values.outcomes import AttemptResult, Outcome

    rows = claim(ids, new_token())
    messages = load_messages({row.message_id for row in rows})
    outcomes = [
        Outcome(row, messages[row.message_id], AttemptResult.DELIVERED, 202) for row in rows
    ]
    save_outcomes(plan_outcomes(outcomes))


def store_plans(chunk: int) -> dict[str, list[tuple[str, str]]]:
    """The plans of what finds, claims and records deliveries, and of the sweeper's
    steps that read the delivery table, at the table's present size."""
    from django.test import override_settings

    from django_outbox.broker.publish import forget_all_dispatches, take_undispatched
    from django_outbox.models import Lane
    from django_outbox.store import queries, reclaim
    from django_outbox.store.pruning import prune

    def one_batch() -> None:
        with override_settings(OUTBOX_SWEEP_INTERVAL=0):
            prune()

    ids = fresh_deliveries(chunk)
    return {
        "claim and record (a deliver task's chunk)": explained(lambda: claim_and_record(ids)),
        "priority-lane poll (every 50 ms while a task waits)": explained(
            lambda: queries.due_in_lane(Lane.PRIORITY, chunk)
        ),
        "the same read of the default lane (the fresh rows due among the queued)": explained(
            lambda: queries.due_in_lane(Lane.DEFAULT, chunk)
        ),
        "due rows without a message (recovery pass, every heartbeat)": explained(take_undispatched),
        "claims of dead workers (recovery pass)": explained(lambda: list(reclaim.lapsed()[:1])),
        "deadlines passed (sweeper)": explained(queries.expired),
        "prune, one batch (sweeper)": explained(one_batch),
        "every queued delivery undispatched (a broker that lost its messages)": explained(
            forget_all_dispatches
        ),
    }


def text(plans: dict[str, list[tuple[str, str]]]) -> str:
    """The plans as plain text, statement by statement."""
    parts = []
    for title, statements in plans.items():
        parts.append(f"==== {title}\n")
        for sql, plan in statements:
            parts.append(f"-- {sql[:600]}{' ...' if len(sql) > 600 else ''}\n{plan}\n")
    return "\n".join(parts)
