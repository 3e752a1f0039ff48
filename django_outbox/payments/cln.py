"""``django_outbox.payments.cln.ClnClient``: the Core Lightning client under its short name.

The class lives in :mod:`django_outbox.payments.clients.cln` (it needs ``pyln-client``,
the ``cln`` extra, only when it is first used).
"""

from django_outbox.payments.clients.cln import ClnClient

__all__ = ["ClnClient"]
