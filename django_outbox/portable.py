"""FEP-ef61 portable inboxes: an ``ap://did:key:...`` inbox reached through gateways.

A portable actor's inbox has no host of its own; its actor lists gateways
that accept deliveries for it.  One attempt POSTs to each gateway in the
actor's order, ``https://<gateway>/.well-known/apgateway/<did><path>``, and
the first that accepts completes the delivery.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from django_outbox.exceptions import InvalidInbox

MAX_GATEWAYS = 5
_DID_KEY = "did:key:z"


@dataclass(frozen=True)
class PortableInbox:
    """A portable inbox (``ap://did:key:z.../actor/inbox``) and its gateways, in order."""

    inbox: str
    gateways: Sequence[str]

    def targets(self) -> list[str]:
        """The gateway URLs to POST to, in order: at most ``MAX_GATEWAYS``, no repeats.

        Raises :class:`~django_outbox.exceptions.InvalidInbox` for an inbox that
        is not an ``ap`` URI with a ``did:key`` authority, or a gateway that is
        not a bare http(s) origin.
        """
        if not isinstance(self.inbox, str) or not self.inbox.startswith("ap://"):
            raise InvalidInbox(f"portable inbox {self.inbox!r} is not an ap:// URI")
        authority, slash, path = self.inbox[len("ap://") :].partition("/")
        if not authority.startswith(_DID_KEY) or not authority[len(_DID_KEY) :].isalnum():
            raise InvalidInbox(f"portable inbox {self.inbox!r} has no did:key authority")
        if any(c in self.inbox for c in "?# \t\r\n"):
            raise InvalidInbox(f"portable inbox {self.inbox!r} has a query, fragment or space")
        targets: list[str] = []
        for gateway in self.gateways:
            origin = _origin(gateway)
            target = f"{origin}/.well-known/apgateway/{authority}{slash}{path}"
            if target not in targets:
                targets.append(target)
        if not targets:
            raise InvalidInbox(f"portable inbox {self.inbox!r} lists no gateway")
        return targets[:MAX_GATEWAYS]


def _origin(gateway: str) -> str:
    try:
        parts = urlsplit(gateway)
        parts.port  # noqa: B018 - raises for a bad port
    except (ValueError, AttributeError):
        raise InvalidInbox(f"gateway {gateway!r} is not a URL") from None
    bare = parts.path in ("", "/") and not parts.query and not parts.fragment
    if parts.scheme not in ("http", "https") or not parts.hostname or not bare:
        raise InvalidInbox(f"gateway {gateway!r} is not an http(s) origin")
    if "@" in parts.netloc:
        raise InvalidInbox(f"gateway {gateway!r} carries credentials")
    return f"{parts.scheme}://{parts.netloc.lower()}"
