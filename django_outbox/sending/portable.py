"""FEP-ef61 portable inboxes: an ``ap://did:key:...`` inbox reached through gateways.

A portable actor's inbox has no host of its own; its actor lists gateways
that accept deliveries for it.  One attempt POSTs to each gateway in the
actor's order, ``https://<gateway>/.well-known/apgateway/<did><path>``, and
the first that accepts completes the delivery.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from django_outbox.exceptions import InvalidInbox
from django_outbox.transport.target import parse_target
from django_outbox.values import columns
from django_outbox.values.safe_text import shown as _shown

MAX_GATEWAYS = 5
#: Gateways read at most, repeats included: a bound on the work a long list costs.
GATEWAYS_READ = 100
#: ``ap://did:key:z<base58>`` and an optional path of printable ASCII without
#: spaces, backslashes, queries or fragments.
_PORTABLE = re.compile(r"ap://(did:key:z[A-Za-z0-9]+)(/[\x21\x22\x24-\x3e\x40-\x5b\x5d-\x7e]*)?")


@dataclass(frozen=True)
class PortableInbox:
    """A portable inbox (``ap://did:key:z.../actor/inbox``) and its gateways, in order."""

    inbox: str
    gateways: Sequence[str]

    def targets(self) -> list[str]:
        """The gateway URLs to POST to, in order: at most ``MAX_GATEWAYS``, no repeats.

        Gateways after the ``MAX_GATEWAYS``-th distinct one, or after the first
        ``GATEWAYS_READ``, are not read: the list comes from a stranger's actor
        document and may be long (the work is bounded whatever it holds).  Raises
        :class:`~django_outbox.exceptions.InvalidInbox` for an inbox that is not an
        ``ap`` URI with a ``did:key`` authority, or a gateway read before the cut
        that is not a bare http(s) origin.
        """
        match = (
            _PORTABLE.fullmatch(self.inbox)
            if isinstance(self.inbox, str) and len(self.inbox) <= columns.URL
            else None
        )
        if match is None:
            raise InvalidInbox(
                f"portable inbox {_shown(self.inbox)} is not an ap://did:key:z... URI of "
                f"at most {columns.URL} characters without spaces, query or fragment"
            )
        suffix = f"/.well-known/apgateway/{match[1]}{match[2] or ''}"
        if isinstance(self.gateways, str | bytes):
            raise InvalidInbox(f"the gateways of {_shown(self.inbox)} must be a list of URLs")
        try:
            gateways = iter(self.gateways)
        except TypeError:
            raise InvalidInbox(f"the gateways of {_shown(self.inbox)} are not a list") from None
        targets: dict[str, None] = {}
        for gateway in itertools.islice(gateways, GATEWAYS_READ):
            targets[parse_target(_origin(gateway) + suffix, columns.URL).url] = None
            if len(targets) == MAX_GATEWAYS:
                break
        if not targets:
            raise InvalidInbox(f"portable inbox {_shown(self.inbox)} lists no gateway")
        return list(targets)


def _origin(gateway: object) -> str:
    """The origin of a gateway given as a bare http(s) origin (path ``/`` at most)."""
    target = parse_target(gateway)  # type: ignore[arg-type]
    if target.path != "/":
        raise InvalidInbox(f"gateway {_shown(gateway)} is not a bare http(s) origin")
    return target.origin
