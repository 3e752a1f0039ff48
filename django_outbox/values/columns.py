"""The sizes of the columns that store what ``outbox.send`` is given.

One place for each limit: the models size their columns with these, and
:mod:`django_outbox.sending.validation` refuses longer input with a typed error before
anything is written.  Nothing is ever cut to fit (PostgreSQL would cut silently in
some casts; a URL cut short is a request to an address nobody gave).
"""

from __future__ import annotations

#: An inbox URL (``Delivery.inbox``) and an actor id (``Message.sender``).
URL = 2048
#: A host name (``Delivery.host``, ``Host.name``); a valid DNS name has at most 253.
HOST = 255
#: ``Message.content_type``.
CONTENT_TYPE = 200
#: ``Message.activity_type``.
ACTIVITY_TYPE = 100
#: ``Message.tag``: a batch tag.
TAG = 200
#: ``Message.ordering_key`` and ``Delivery.ordering_key``.
ORDERING_KEY = 500
#: ``Message.max_attempts`` and ``Delivery.attempts`` (PositiveSmallIntegerField).
SMALL_INTEGER = 32767
