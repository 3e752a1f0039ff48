"""The error of signing, shared by both schemes' modules."""

from __future__ import annotations

from django_outbox.exceptions import OutboxError


class SigningError(OutboxError):
    """A request could not be signed: bad URL, method, header, key id or digest."""
