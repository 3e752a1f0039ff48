"""A process that commits a send and dies before it publishes (``python -m``, inboxes on stdin).

Its first on-commit callback, registered before ``outbox.send`` registers the one
that publishes, SIGKILLs the process: the rows are committed with
``dispatched_at`` set, as if their message had been published, and no message
exists.  :func:`die_after_commit` runs it on the test database.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence


def die_after_commit(inboxes: Sequence[str], tag: str) -> None:
    """Run this module in a subprocess that sends to ``inboxes`` and dies at its commit."""
    from tests.support.workers import ROOT, worker_env

    done = subprocess.run(
        [sys.executable, "-m", "tests.support.die_after_commit", tag],
        input="\n".join(inboxes).encode(),
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()


def main(tag: str, inboxes: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    from django.db import transaction

    from django_outbox import Batch, outbox
    from testproject.demo.keys import ACTOR
    from tests.support.chaos import NOTE

    with transaction.atomic():
        transaction.on_commit(lambda: os.kill(os.getpid(), signal.SIGKILL))
        outbox.send(ACTOR, NOTE, inboxes, batch=Batch(tag=tag))
    raise SystemExit("still alive after the commit")


if __name__ == "__main__":
    main(sys.argv[1], sys.stdin.read().split())
