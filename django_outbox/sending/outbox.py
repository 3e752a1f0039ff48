"""The public entry points: :data:`outbox` and its methods.

``outbox.send`` (ActivityPub) and ``outbox.send_webhook`` (Standard Webhooks)
check everything first and raise a typed error writing nothing (whatever a
worker would fail on for every attempt is refused there: see
``docs/security.md``); then they write the rows in the caller's transaction and
hand them to Celery only once that transaction commits.  A rolled-back view
sends nothing; a committed one is never lost, because the sweeper dispatches
whatever the broker did not get.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from django_outbox.broker.publish import start_expansion_on_commit
from django_outbox.conf import conf
from django_outbox.counters.recording import record_fanout
from django_outbox.destinations.availability import host_seen
from django_outbox.destinations.endpoint_health import enable_endpoints
from django_outbox.exceptions import InvalidBatch, InvalidInbox
from django_outbox.models import Delivery, Message, Signing
from django_outbox.sending.batch import Batch
from django_outbox.sending.fanout import choose_lane, store_pending, write_deliveries
from django_outbox.sending.portable import PortableInbox
from django_outbox.sending.recipients import HasInbox, Recipient, collapse
from django_outbox.sending.validation import (
    activity_type,
    actor_id,
    check_content_type,
    check_inbox_count,
    check_sender_key,
    clean_inboxes,
    refuse_blocked_hosts,
    serialise_activity,
)
from django_outbox.sending.webhook_endpoints import check_secrets, clean_endpoints, webhook_sender
from django_outbox.signing.webhooks import check_webhook_id, new_webhook_id
from django_outbox.status.progress import Progress, message_progress
from django_outbox.transport.addresses import parse_networks
from django_outbox.upkeep.operations import give_up, requeue
from django_outbox.upkeep.pauses import Pause, pause_host, resume_host


class Outbox:
    """Queues activities and webhooks for delivery and manages deliveries already queued."""

    def send(
        self,
        actor: object,
        activity: Mapping[str, Any],
        recipients: Iterable[str | Recipient | HasInbox],
        *,
        batch: Batch | None = None,
        content_type: str = "application/activity+json",
        prefer_shared_inbox: bool | None = None,
        exclude_hosts: Collection[str] | None = None,
    ) -> Message | None:
        """Queue ``activity``, signed as ``actor``, for each inbox of ``recipients`` once.

        A recipient is an inbox URL, a :class:`~django_outbox.Recipient`, or any
        object with ``inbox`` and ``shared_inbox`` attributes.  With
        ``prefer_shared_inbox`` (default ``OUTBOX_PREFER_SHARED_INBOX``, on)
        recipients that share an inbox are sent one delivery through it.
        Recipients on ``exclude_hosts`` are left out; by default those are the
        host of the actor's id and ``OUTBOX_LOCAL_HOSTS``.

        Runs inside the caller's transaction: nothing is published to Celery
        until it commits.  Returns the stored message, or ``None`` when there
        is no inbox to deliver to.  Raises a subclass of
        :class:`~django_outbox.exceptions.InvalidSend` for bad input, having
        written nothing: an inbox the transport would read otherwise than it is
        stored, one naming an address every worker would refuse
        (:class:`~django_outbox.exceptions.BlockedInbox`), more than
        ``OUTBOX_MAX_INBOXES`` inboxes, a value too long for its column, a content
        type or key a worker could not send with.  Inboxes
        are stored in canonical form (``HTTPS://Example.com:443/a`` as
        ``https://example.com/a``).
        """
        sender = actor_id(actor)
        if prefer_shared_inbox is None:
            prefer_shared_inbox = conf.PREFER_SHARED_INBOX
        if exclude_hosts is None:
            exclude_hosts = _own_hosts(sender)
        targets = clean_inboxes(
            collapse(
                recipients, prefer_shared_inbox=prefer_shared_inbox, exclude_hosts=exclude_hosts
            ),
            conf.MAX_INBOXES,
            parse_networks(conf.ALLOWED_NETWORKS),
        )
        body = _signed_body(sender, activity)
        return self._queue(sender, body, activity_type(activity), targets, {}, batch, content_type)

    def send_portable(
        self,
        actor: object,
        activity: Mapping[str, Any],
        inboxes: Iterable[PortableInbox],
        *,
        batch: Batch | None = None,
        content_type: str = "application/activity+json",
    ) -> Message | None:
        """:meth:`send` to FEP-ef61 portable inboxes, each through its gateways in order."""
        if isinstance(inboxes, str | bytes | bytearray):
            raise InvalidInbox("inboxes must be a list of PortableInbox, not a single string")
        try:
            items = iter(inboxes)
        except TypeError:
            raise InvalidInbox(
                f"inboxes must be an iterable of PortableInbox, not {type(inboxes).__name__}"
            ) from None
        via: dict[str, list[str]] = {}
        for portable in items:
            if not isinstance(portable, PortableInbox):
                raise InvalidInbox(f"{type(portable).__name__} is not a PortableInbox")
            if portable.inbox not in via:
                via[portable.inbox] = portable.targets()
                check_inbox_count(len(via), conf.MAX_INBOXES)
        gateways = list(dict.fromkeys(url for targets in via.values() for url in targets))
        refuse_blocked_hosts(gateways, parse_networks(conf.ALLOWED_NETWORKS), noun="gateway")
        sender = actor_id(actor)
        body = _signed_body(sender, activity)
        kind = activity_type(activity)
        return self._queue(sender, body, kind, list(via), via, batch, content_type)

    def send_webhook(
        self,
        sender: str,
        payload: Mapping[str, Any],
        endpoints: Iterable[str],
        *,
        batch: Batch | None = None,
        webhook_id: str | None = None,
        content_type: str = "application/json",
        encoder: type[json.JSONEncoder] = DjangoJSONEncoder,
    ) -> Message | None:
        """Queue ``payload`` as a Standard Webhooks message to each endpoint once.

        ``sender`` names who sends (an account, a tenant, the site): it is
        stored, and passed with each endpoint to ``OUTBOX_WEBHOOK_SECRET_RESOLVER``,
        which returns the secrets that sign.  Every attempt to every endpoint
        carries the same ``webhook-id``: ``webhook_id`` (1 to 255 characters of
        ``A-Z a-z 0-9 _ -``) or a fresh random ``msg_...`` id; each attempt gets a
        fresh ``webhook-timestamp`` and signature.  A ``webhook_id`` is sent once per
        sender: if a message with it is stored already, that message is returned
        and nothing is written (its payload and endpoints are not compared), also
        when two sends race (the database's unique constraint decides; the loser
        rolls back only its own savepoint, not the caller's transaction).
        ``payload`` is serialised once with ``encoder`` (Django's by default, as
        ``JsonResponse``: dates, decimals and UUIDs become strings).

        Retries, ``Retry-After``, breakers, deadlines, ordering keys, lanes,
        signals and the admin work as for :meth:`send`.  Returns the stored
        message, or ``None`` for no endpoint.  Raises a subclass of
        :class:`~django_outbox.exceptions.InvalidSend` for bad input (including
        an endpoint naming a non-public address, and a secret the resolver
        lacks or returns malformed), having written nothing.
        """
        batch = _batch(batch)
        sender = webhook_sender(sender)
        targets = clean_endpoints(endpoints)
        body = serialise_activity(
            payload, conf.MAX_BODY_BYTES, encoder=encoder, noun="webhook payload"
        )
        if webhook_id is None:
            webhook_id = new_webhook_id()
        check_webhook_id(webhook_id)
        if batch.synchronize_collection:
            raise InvalidBatch("synchronize_collection is for ActivityPub sends, not webhooks")
        check_secrets(sender, targets, webhook_id, body, content_type)
        stored = _stored_webhook(sender, webhook_id)
        if stored is not None:
            return stored
        kind = activity_type(payload)
        try:
            return self._queue(
                sender, body, kind, targets, {}, batch, content_type, webhook_id=webhook_id
            )
        except IntegrityError:
            stored = _stored_webhook(sender, webhook_id)
            if stored is None:
                raise
            return stored

    def _queue(
        self,
        sender: str,
        body: bytes,
        kind: str,
        targets: list[str],
        via: dict[str, list[str]],
        batch: Batch | None,
        content_type: str,
        *,
        webhook_id: str = "",
    ) -> Message | None:
        """Write the message and its deliveries (or its pending list) in one transaction.

        A ``webhook_id`` makes it a Standard Webhooks message; without one its
        deliveries carry HTTP Signatures.  The batch and content type are checked
        here, whatever the entry point.
        """
        batch = _batch(batch)
        content_type = check_content_type(content_type)
        if not targets:
            return None
        max_attempts = min(batch.max_attempts or conf.MAX_ATTEMPTS, conf.MAX_ATTEMPTS)
        inline = via or len(targets) <= conf.INLINE_FANOUT
        with transaction.atomic():
            message = Message.objects.create(
                sender=sender,
                signing=Signing.STANDARD_WEBHOOKS if webhook_id else Signing.HTTP_SIGNATURES,
                webhook_id=webhook_id,
                body=body,
                body_sha256=hashlib.sha256(body).digest(),
                content_type=content_type,
                activity_type=kind,
                tag=batch.tag or "",
                deadline=batch.deadline,
                ordering_key=batch.ordering_key or "",
                lane=choose_lane(len(targets), batch.low_priority),
                synchronize_collection=batch.synchronize_collection,
                max_attempts=max_attempts,
                inbox_count=len(targets),
            )
            if inline:
                write_deliveries(message, targets, via)
            else:
                store_pending(message, targets)
                start_expansion_on_commit(message.pk, message.lane)
            transaction.on_commit(partial(record_fanout, len(targets)), robust=True)
        return message

    def requeue(self, deliveries: QuerySet[Delivery]) -> int:
        """Queue the given finished deliveries again, with a fresh attempt budget.

        Live deliveries are left alone.  One with an ordering key waits again
        if an earlier delivery with that key to its inbox is still live.  They
        are published once the caller's transaction commits.  Returns how many
        were requeued.
        """
        return requeue(deliveries.values_list("id", flat=True))

    def give_up(self, deliveries: QuerySet[Delivery], reason: str = "given up by hand") -> int:
        """Mark the given live deliveries failed now; returns how many changed.

        ``delivery_failed`` is sent for each, as for any other failure.
        """
        return give_up(deliveries.values_list("id", flat=True), reason)

    def progress(self, message: Message | int | None) -> Progress:
        """How many of a message's recipients are delivered, pending, failed, refused
        and skipped: for a view that shows how far an activity has got.

        ``message`` is what :meth:`send` returned (a message or ``None``) or a
        message's id.  A recipient is an inbox: one reached through a shared inbox
        counts as that inbox, and the inboxes of a fan-out not yet expanded count as
        pending (see :mod:`django_outbox.status.progress`).  Raises
        :class:`~django_outbox.exceptions.UnknownMessage` for a message not stored.
        """
        return message_progress(message)

    def enable_endpoint(self, url: str) -> bool:
        """Enable the webhook endpoint ``url`` again and forget its failure days;
        returns whether it was disabled.

        Its new deliveries are sent again (by every worker within
        ``OUTBOX_HOSTS_REFRESH`` seconds); those skipped while it was disabled stay
        skipped (requeue them to send them).  ``url`` is read as ``send_webhook``
        reads an endpoint; one it would refuse raises a subclass of
        :class:`~django_outbox.exceptions.InvalidInbox`, changing nothing.
        """
        (endpoint,) = clean_endpoints([url])
        return enable_endpoints([endpoint]) > 0

    def host_seen(self, host: str) -> bool:
        """Tell that ``host`` (a host name, or a URL on it such as an actor id) contacted
        us, as an inbox view does on each activity it accepts: if it was marked
        unavailable, deliveries go to it again (``host_available`` is sent).  Returns
        whether it was unavailable.  See :func:`django_outbox.destinations.availability.host_seen`.
        """
        name = urlsplit(host).hostname if "://" in host else host
        return host_seen(name or "")

    def pause_host(self, host: str, reason: str = "", until: datetime | None = None) -> Pause:
        """Hold every delivery to ``host`` (not failed, no attempt spent) until
        :meth:`resume_host`, or ``until``; see :mod:`django_outbox.upkeep.pauses`."""
        return pause_host(host, reason, until)

    def resume_host(self, host: str) -> int:
        """End ``host``'s pause; its held deliveries are due at once, published over the
        next 2 to 12 s, and the host starts slowly (unless ``OUTBOX_SLOW_START_SECONDS``
        is 0).  How many."""
        return resume_host(host)


outbox = Outbox()


def _signed_body(sender: str, activity: Mapping[str, Any]) -> bytes:
    """The activity's bytes, once the key resolver is known to have a key for ``sender``
    that a worker can sign with (parsed here, cached per key)."""
    body = serialise_activity(activity, conf.MAX_BODY_BYTES)
    check_sender_key(sender, conf.KEY_RESOLVER(sender))
    return body


def _stored_webhook(sender: str, webhook_id: str) -> Message | None:
    """The message already stored with ``webhook_id`` for ``sender``, if any."""
    return Message.objects.filter(sender=sender, webhook_id=webhook_id).first()


def _batch(batch: object) -> Batch:
    """``batch``, or the default batch for ``None``; anything else is refused."""
    if batch is None:
        return Batch()
    if not isinstance(batch, Batch):
        raise InvalidBatch(f"batch must be a Batch, not {type(batch).__name__}")
    return batch


def _own_hosts(sender: str) -> list[str]:
    """The hosts ``send`` leaves out by default: ``OUTBOX_LOCAL_HOSTS`` and the sender's."""
    hosts = list(conf.LOCAL_HOSTS)
    try:
        host = urlsplit(sender).hostname
    except ValueError:
        host = None
    if host:
        hosts.append(host)
    return hosts
