"""The package's exceptions, in one tree.

Everything raised on purpose derives from :class:`OutboxError`, so an
application can catch the package's failures in one clause.  Configuration
mistakes are also :class:`~django.core.exceptions.ImproperlyConfigured` and
bad input is also :class:`ValueError`, so the usual Django and Python idioms
keep working.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured


class OutboxError(Exception):
    """Base class of every error django_outbox raises on purpose."""


class OutboxConfigurationError(OutboxError, ImproperlyConfigured):
    """A setting is missing or has a value the package cannot use."""


class InvalidSend(OutboxError, ValueError):
    """``outbox.send`` was given input it refuses; nothing was written."""


class InvalidInbox(InvalidSend):
    """An inbox or endpoint is not an http(s) URL that every part of the package reads alike.

    See :func:`django_outbox.transport.target.parse_target` for what is refused.
    """


class TooManyInboxes(InvalidSend):
    """One send names more distinct inboxes or endpoints than ``OUTBOX_MAX_INBOXES``."""


class BlockedInbox(InvalidInbox):
    """An inbox, gateway or endpoint names an address deliveries may not reach.

    A loopback, private, link-local or otherwise non-public IP address written
    in the URL, or ``localhost`` or a name under it, outside
    ``OUTBOX_ALLOWED_NETWORKS``: what every worker would refuse without a DNS
    look-up.  Names are not resolved at send time: the worker refuses those
    that resolve to such an address when it connects.
    """


class BlockedEndpoint(BlockedInbox):
    """A webhook endpoint names an address deliveries may not reach (see :class:`BlockedInbox`)."""


class InvalidActivity(InvalidSend):
    """The activity (or webhook payload) is not a JSON object, or cannot be serialised."""


class BodyTooLarge(InvalidSend):
    """The serialised activity or payload is larger than ``OUTBOX_MAX_BODY_BYTES``."""


class UnknownSender(InvalidSend):
    """The actor or sender has no usable id, or the key resolver has no signing key for it."""


class SenderTooLong(InvalidSend):
    """The actor id or webhook sender is longer than the column that stores it."""


class InvalidSenderKey(InvalidSend):
    """The key resolver returned a key that cannot sign: not a :class:`SenderKey`, a key
    id that cannot be written into a signature, or a PEM that is not an unencrypted RSA
    or Ed25519 private key."""


class UnknownEndpoint(InvalidSend):
    """The webhook secret resolver has no secret for an endpoint of the sender."""


class InvalidBatch(InvalidSend):
    """A :class:`~django_outbox.Batch` option has a value that cannot be used."""


class InvalidHost(OutboxError, ValueError):
    """A host to pause or resume is not a host name, or its pause would end in the past."""


class InvalidSince(OutboxError, ValueError):
    """A "since" given to select deliveries is neither a duration (``90s``, ``30m``,
    ``2h``, ``7d``) nor an ISO 8601 date."""


class UnknownMessage(OutboxError, ValueError):
    """``outbox.progress`` was given something that is not a stored message: an id no
    message has (or no longer has: pruned), or neither a message nor an id."""


class SigningError(OutboxError):
    """A request could not be signed: bad URL, method, header, key id or digest."""
