"""``django_outbox.payments.lnd.LndRestClient``: the LND REST client under its short name.

The class lives in :mod:`django_outbox.payments.clients.lnd`; this name is the one
``OUTBOX_PAYMENTS['CLIENT']`` is documented with.
"""

from django_outbox.payments.clients.lnd import LndRestClient

__all__ = ["LndRestClient"]
