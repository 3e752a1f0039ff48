"""The settlements a paid delivery always brings, written out: its attempt read, made paid,
then used, or both at once when its token opens one delivery
(:mod:`~django_outbox.payments.statements` says why they are not built by the ORM).  The
rules stay in :mod:`~django_outbox.payments.ledger`: each statement here is conditional
on the state the ledger says it leaves, and tells whether it changed a row.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection

from django_outbox.payments.models import PaymentAttempt, PaymentState
from django_outbox.payments.statements import as_datetime, execute, fetch
from django_outbox.store.read_values import datetime_reader
from django_outbox.store.statement_parts import name

#: What the ledger reads of an attempt it settles, in the model's order of its fields
#: (as :meth:`~django.db.models.Model.from_db` takes them).
_READ = ("id", "sender", "host", "amount_msat", "reserved_msat", "state", "uses", "created_at")


def payable(attempt_id: int) -> PaymentAttempt | None:
    """The attempt ``attempt_id`` if it may still turn out paid: pending, or failed
    without having been paid (the node knew better); its columns :data:`_READ` only."""
    where = "state = %s OR (state = %s AND paid_at IS NULL)"
    return _read(attempt_id, where, [PaymentState.PENDING.value, PaymentState.FAILED.value])


def paid_or_used(attempt_id: int) -> PaymentAttempt | None:
    """The attempt ``attempt_id`` if it is paid or used (its columns :data:`_READ` only)."""
    where = "state IN (%s, %s)"
    return _read(attempt_id, where, [PaymentState.PAID.value, PaymentState.USED.value])


def _read(attempt_id: int, where: str, params: list[object]) -> PaymentAttempt | None:
    columns = ", ".join(name(column) for column in _READ)
    sql = f"SELECT {columns} FROM {name(PaymentAttempt)} WHERE id = %s AND ({where})"
    rows = fetch(sql, [attempt_id, *params])
    return _as_read(rows[0]) if rows else None


def _as_read(values: Sequence[Any]) -> PaymentAttempt:
    """The attempt of the :data:`_READ` columns ``values``, as a statement read them."""
    *others, created_at = values
    return PaymentAttempt.from_db(connection.alias, _READ, [*others, datetime_reader()(created_at)])


def mark_paid(
    attempt: PaymentAttempt,
    preimage: str,
    fee_msat: int,
    now: datetime,
    reserved_msat: int,
    opened_one: str = "",
) -> bool:
    """Make ``attempt`` paid with ``preimage`` and ``fee_msat`` at ``now``, holding
    ``reserved_msat`` of its budget, if it is still in the state it was read in.
    ``opened_one``: the delivery that paid was accepted with the token, which opens no
    other (its host charges per message), so the attempt is also made used and retired
    at once, for that reason: one statement where paid, then used, would take two."""
    values, params = _paid(preimage, fee_msat, now, opened_one)
    values += ", reserved_msat = %s"
    sql = f"UPDATE {name(PaymentAttempt)} SET {values} WHERE id = %s AND state = %s"
    return execute(sql, [*params, reserved_msat, attempt.pk, attempt.state]) > 0


def mark_paid_as_read(
    attempt_id: int,
    host: str,
    reserved_msat: int,
    paid: tuple[str, int, datetime],
    opened_one: str = "",
) -> PaymentAttempt | None:
    """Make the attempt ``attempt_id`` paid as :func:`mark_paid` does (``paid``: its
    preimage, fee and time), holding its price and fee, if it is still pending at
    ``host`` with ``reserved_msat`` reserved, as its payer read it: the attempt as it
    was (pending; its columns :data:`_READ`), or None, and nothing changed.

    One statement where :func:`payable` and :func:`mark_paid` take two: the conditions
    are what the read would have found."""
    preimage, fee_msat, now = paid
    values, params = _paid(preimage, fee_msat, now, opened_one)
    values += ", reserved_msat = amount_msat + %s"
    returned = ", ".join(name(column) for column in ("sender", "amount_msat", "uses", "created_at"))
    sql = (
        f"UPDATE {name(PaymentAttempt)} SET {values} WHERE id = %s AND state = %s "
        f"AND host = %s AND reserved_msat = %s RETURNING {returned}"
    )
    pending = PaymentState.PENDING.value
    rows = fetch(sql, [*params, fee_msat, attempt_id, pending, host, reserved_msat])
    if not rows:
        return None
    sender, amount_msat, uses, created_at = rows[0]
    was = (attempt_id, sender, host, amount_msat, reserved_msat, pending, uses - bool(opened_one))
    return _as_read([*was, created_at])


def _paid(preimage: str, fee_msat: int, now: datetime, opened_one: str) -> tuple[str, list[object]]:
    """The ``SET`` of a payment (see :func:`mark_paid`), but for its reservation."""
    state = PaymentState.USED if opened_one else PaymentState.PAID
    values = "state = %s, preimage = %s, fee_msat = %s, paid_at = %s, reason = %s"
    params: list[object] = [state.value, preimage, fee_msat, as_datetime(now), opened_one]
    if opened_one:
        values += ", uses = uses + 1, retired_at = %s"
        params.append(as_datetime(now))
    return values, params


def mark_used(attempt_id: int, retired: tuple[datetime, str] | None = None) -> bool:
    """Count a delivery opened by the paid attempt ``attempt_id``'s token and make it
    used; ``retired``: at that moment also retired, for that reason (a token that opens
    one delivery)."""
    values = "state = %s, uses = uses + 1"
    params: list[object] = [PaymentState.USED.value]
    if retired is not None:
        values += ", retired_at = %s, reason = %s"
        params += [as_datetime(retired[0]), retired[1]]
    sql = f"UPDATE {name(PaymentAttempt)} SET {values} WHERE id = %s AND state = %s"
    return execute(sql, [*params, attempt_id, PaymentState.PAID.value]) > 0


def count_use(attempt_id: int) -> None:
    """Count one more delivery opened by the used attempt ``attempt_id``'s token."""
    execute(f"UPDATE {name(PaymentAttempt)} SET uses = uses + 1 WHERE id = %s", [attempt_id])
