"""The demo's key resolver: actors under https://demo.example/users/ with keys on disk.

Keys are generated once into the run directory, so the worker processes and
the test process sign with the same key.  Actors whose name starts with
``gone`` are reported gone for good; ``nobody`` has no key.
"""

from __future__ import annotations

import fcntl
from pathlib import Path

from django.conf import settings

from django_outbox.sending.keys import SenderKey, generate_ed25519_pem, generate_rsa_pem

ACTOR = "https://demo.example/users/alice"
ED_ACTOR = "https://demo.example/users/edna"


def _pem(name: str, make: object) -> str:
    path = Path(settings.RUN_DIR) / f"{name}.pem"
    with open(Path(settings.RUN_DIR) / "keys.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            path.write_text(make())  # type: ignore[operator]
    return path.read_text()


def resolve(actor: str) -> SenderKey | None:
    """The signing key of ``actor``, or ``None`` for an unknown one."""
    if not actor.startswith("https://demo.example/users/") or actor.endswith("/nobody"):
        return None
    if actor == ED_ACTOR:
        return SenderKey(
            key_id=f"{actor}#ed25519-key", private_key_pem=_pem("ed25519", generate_ed25519_pem)
        )
    return SenderKey(key_id=f"{actor}#main-key", private_key_pem=_pem("rsa", generate_rsa_pem))


def gone(actor: str) -> bool:
    """Whether ``actor`` is deleted for good."""
    return actor.rsplit("/", 1)[-1].startswith("gone")


resolve.gone = gone  # type: ignore[attr-defined]
