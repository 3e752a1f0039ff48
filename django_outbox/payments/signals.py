"""Paid push's signals, sent with ``sender=Delivery`` once their change is committed.

``payment_made``
    When the Lightning node confirms a payment to a destination that answered
    ``402`` (see ``docs/payments.md``).  ``delivery`` (the row, or ``None`` if
    it was pruned), ``actor`` (whose budget paid), ``destination`` (the URL that
    charged), ``amount_msat``, ``fee_msat`` (routing fee) and ``payment_hash``
    (hex).  Never a preimage or a macaroon.

``payment_failed``
    When a stored payment attempt fails: the node says nothing was paid
    (``paid=False``), or the destination refused the token it had just been paid
    for (``paid=True``: the money is gone).  The arguments of ``payment_made``
    and ``reason`` (str).

``payment_budget_exceeded``
    When paying a destination would pass ``OUTBOX_PAYMENTS['DAILY_BUDGET_MSAT']``
    for the sender: the delivery is held until the next day (UTC), not failed.
    ``delivery``, ``actor``, ``day`` (a ``date``, UTC), ``spent_msat`` (paid or
    reserved that day), ``budget_msat`` and ``amount_msat`` (the price asked).
    Sent for each delivery held.

Each is sent at most once for its change.  They were declared in
:mod:`django_outbox.signals` until paid push moved behind the extension seam; that
path still finds them, with a :class:`DeprecationWarning`.
"""

from __future__ import annotations

from django.dispatch import Signal

payment_made = Signal()
payment_failed = Signal()
payment_budget_exceeded = Signal()
