"""What ``outbox.send_webhook`` checks before it writes: endpoints, sender and secrets.

Endpoints are URLs as inboxes are, and like inboxes must not name an address
deliveries may not reach (a webhook endpoint is typed in by a user of the
application, which makes it the classic SSRF vector).  Only what the URL itself
says is judged at send time (an IP address, ``localhost``), without DNS, so that a
send does not wait on a resolver; a name that resolves to a refused address is
refused by the worker when it connects, where the address it checked is the one
it connects to.  :func:`check_endpoint` can resolve it at once.

The secret resolver is asked for every endpoint, and each answer signs the
message once, so that a missing or malformed secret, an unusable
``webhook-id`` or content type is an error in the view rather than a delivery
that can never succeed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django_outbox.conf import conf
from django_outbox.exceptions import BlockedEndpoint, InvalidInbox, UnknownEndpoint, UnknownSender
from django_outbox.sending.validation import check_sender_length, clean_inboxes
from django_outbox.signing.webhooks import as_webhook_keys, sign_webhook
from django_outbox.transport.addresses import parse_networks, resolve_checked
from django_outbox.transport.failures import BlockedAddress, ResolveError
from django_outbox.transport.target import parse_target
from django_outbox.values import columns
from django_outbox.values.safe_text import shown

__all__ = ["check_endpoint", "check_secrets", "clean_endpoints", "webhook_sender"]


def webhook_sender(sender: object) -> str:
    """``sender`` if it can name who sends a webhook: a printable string that fits a row."""
    if not isinstance(sender, str) or not sender or not sender.isprintable():
        raise UnknownSender(
            f"a webhook sender must be a printable string of 1 to {columns.URL} characters, "
            f"not {shown(sender)}"
        )
    check_sender_length(sender, "webhook sender")
    return str.__str__(sender)


def clean_endpoints(endpoints: Iterable[str]) -> list[str]:
    """The endpoints, de-duplicated in their first order, each checked.

    As inboxes (absolute http(s) URLs, no credentials, no fragment), and none
    may name an address :func:`check_endpoint` refuses
    (:func:`~django_outbox.sending.validation.refuse_blocked_hosts`, as for ``send()``).
    """
    allowed = parse_networks(conf.ALLOWED_NETWORKS)
    return clean_inboxes(endpoints, conf.MAX_INBOXES, allowed, noun="endpoint")


def check_endpoint(endpoint: str, *, resolve: bool = False) -> None:
    """Raise a subclass of :class:`~django_outbox.exceptions.InvalidInbox` if
    ``outbox.send_webhook`` would refuse ``endpoint``, or its worker refuse to connect.

    For a form that registers endpoints.  The URL must be one that
    :func:`~django_outbox.transport.target.parse_target` accepts (which takes an
    IPv4 address only as a dotted quad, not ``127.1`` or ``2130706433``), and its
    host must not be an IP address, ``localhost`` or a name under it, that is not
    public and lies outside ``OUTBOX_ALLOWED_NETWORKS`` (:class:`BlockedEndpoint`).
    With ``resolve``, the name is also resolved and every address it has is
    judged so, as the worker does before each connection; a name that does not
    resolve is refused.
    """
    (clean,) = clean_endpoints([endpoint])
    if not resolve:
        return
    target = parse_target(clean)
    try:
        resolve_checked(target.host, target.port, parse_networks(conf.ALLOWED_NETWORKS))
    except BlockedAddress as error:
        raise BlockedEndpoint(f"endpoint {clean!r}: {error}") from None
    except ResolveError as error:
        raise InvalidInbox(f"endpoint {clean!r}: {error}") from None


def check_secrets(
    sender: str, endpoints: Sequence[str], webhook_id: str, body: bytes, content_type: str
) -> None:
    """Ask the secret resolver for each endpoint's secrets, and sign with them once.

    Raises :class:`UnknownEndpoint` when it has none for an endpoint,
    :class:`~django_outbox.signing.webhooks.InvalidWebhookSecret` when one does
    not parse, and :class:`~django_outbox.signing.webhooks.InvalidWebhookMessage`
    when the id, body or content type cannot be signed.  Secrets are not kept.
    """
    resolver = conf.WEBHOOK_SECRET_RESOLVER
    for endpoint in endpoints:
        keys = as_webhook_keys(resolver(sender, endpoint))
        if keys is None:
            raise UnknownEndpoint(
                f"the webhook secret resolver has no secret for {endpoint!r} of {sender!r}"
            )
        sign_webhook(keys, webhook_id, body, content_type=content_type)
