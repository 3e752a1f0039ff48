"""Settings of the outbox: what ``outbox.send`` and the signing ask: the application's resolvers,
limits, lanes, fan-out."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from django_outbox.exceptions import OutboxConfigurationError
from django_outbox.sending.keys import KeyResolver
from django_outbox.setting_groups.reading import MiB, read_callable, read_setting

if TYPE_CHECKING:
    from django_outbox.signing.webhooks import WebhookSecretResolver


class SendSettings:
    """What ``outbox.send`` and the signing ask: the application's resolvers, limits, lanes, fan-
    out."""

    @property
    def KEY_RESOLVER(self) -> KeyResolver:
        """The application's key resolver (required): actor id -> SenderKey or None."""
        resolver = read_callable("OUTBOX_KEY_RESOLVER", None)
        if resolver is None:
            raise OutboxConfigurationError(
                "OUTBOX_KEY_RESOLVER is not set: name the callable that returns a "
                "django_outbox.sending.keys.SenderKey for an actor."
            )
        return cast(KeyResolver, resolver)

    @property
    def WEBHOOK_SECRET_RESOLVER(self) -> WebhookSecretResolver:
        """The application's webhook secret resolver: (sender, endpoint) -> secrets or None."""
        resolver = read_callable("OUTBOX_WEBHOOK_SECRET_RESOLVER", None)
        if resolver is None:
            raise OutboxConfigurationError(
                "OUTBOX_WEBHOOK_SECRET_RESOLVER is not set: name the callable that returns "
                "the webhook secrets of a sender's endpoint."
            )
        return cast("WebhookSecretResolver", resolver)

    @property
    def PREFER_SHARED_INBOX(self) -> bool:
        """Whether ``send`` reaches recipients through their shared inbox when they have one."""
        return bool(read_setting("OUTBOX_PREFER_SHARED_INBOX", True))

    @property
    def LOCAL_HOSTS(self) -> tuple[str, ...]:
        """Hosts ``send`` never delivers to, besides the host of the sender's actor id."""
        value = read_setting("OUTBOX_LOCAL_HOSTS", None) or ()
        if isinstance(value, list | tuple | set | frozenset) and all(
            isinstance(host, str) and host for host in value
        ):
            return tuple(value)
        raise OutboxConfigurationError("OUTBOX_LOCAL_HOSTS must be a list of host names.")

    @property
    def SENDER_GONE(self) -> Callable[[str], bool] | None:
        """The key resolver's optional ``gone(actor_id)``: has the sender gone for good?"""
        gone = getattr(self.KEY_RESOLVER, "gone", None)
        return gone if callable(gone) else None

    @property
    def SENDER_GONE_STATUSES(self) -> frozenset[int]:
        """Statuses after which the resolver is asked whether the sender is gone."""
        return frozenset(int(s) for s in read_setting("OUTBOX_SENDER_GONE_STATUSES", ()))

    @property
    def MAX_BODY_BYTES(self) -> int:
        """Largest serialised activity ``send`` accepts."""
        return int(read_setting("OUTBOX_MAX_BODY_BYTES", MiB))

    @property
    def MAX_INBOXES(self) -> int:
        """Most distinct inboxes one ``send`` accepts (100,000: every server of the
        fediverse, about 30,000 today, three times over)."""
        return int(read_setting("OUTBOX_MAX_INBOXES", 100_000))

    @property
    def PRIORITY_MAX_INBOXES(self) -> int:
        """A send to at most this many inboxes goes to the priority lane."""
        return int(read_setting("OUTBOX_PRIORITY_MAX_INBOXES", 5))

    @property
    def LOW_LANE(self) -> bool:
        """Whether ``Batch(low_priority=True)`` uses the ``outbox.low`` queue."""
        return bool(read_setting("OUTBOX_LOW_LANE", False))

    @property
    def INLINE_FANOUT(self) -> int:
        """Up to this many inboxes, ``send`` writes delivery rows itself."""
        return int(read_setting("OUTBOX_INLINE_FANOUT", 500))

    @property
    def CHUNK_SIZE(self) -> int:
        """Deliveries carried by one Celery message."""
        return int(read_setting("OUTBOX_CHUNK_SIZE", 100))

    @property
    def FIRST_SCHEME(self) -> str:
        """Signature scheme tried first with a host that has accepted none yet."""
        return str(read_setting("OUTBOX_FIRST_SCHEME", "draft-cavage"))

    @property
    def COLLECTION_SYNCHRONIZATION(self) -> Callable[[str, str], str | None] | None:
        """Callable ``(sender, inbox)`` returning a FEP-8fcf header value, or ``None``."""
        return read_callable("OUTBOX_COLLECTION_SYNCHRONIZATION", None)
