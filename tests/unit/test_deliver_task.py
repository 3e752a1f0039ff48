"""The ``deliver`` task's two retries: rows not due yet, and a database that is away.

The task runs as a worker would run it (a request with its arguments and the
queue it came from), eagerly, so that a retry comes back as Celery's ``Retry``
with the signature it would publish rather than a message on a broker.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from celery.exceptions import Retry
from django.db import OperationalError, connection

from django_outbox.broker.backlog import header
from django_outbox.models import Delivery, DeliveryState, Lane
from django_outbox.tasks import DATABASE_OUTAGES, deliver
from django_outbox.worker.process import this_process
from testproject.inbox_servers import InboxServer
from tests.support.in_process import running
from tests.support.rows import delivery, hence, message


def retried(ids: list[int], **request: Any) -> Retry:
    """The ``Retry`` the task raises for ``ids`` (it fails the test if it raises none)."""
    with running(ids, **request), pytest.raises(Retry) as raised:
        deliver.run(ids)
    return raised.value


@contextmanager
def database_away() -> Iterator[None]:
    """The default database cannot be reached meanwhile (a closed port, a missing file)."""
    saved = dict(connection.settings_dict)
    connection.close()
    if connection.vendor == "postgresql":
        connection.settings_dict.update(HOST="127.0.0.1", PORT="1")
    else:
        connection.settings_dict["NAME"] = "/nonexistent-outbox-directory/db.sqlite3"
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


# -- rows not due yet ----------------------------------------------------------------


@pytest.mark.django_db
def test_rows_not_due_yet_are_retried_at_the_first_due_time(worker_process: None) -> None:
    parent = message()
    soon = delivery(parent, next_attempt_at=hence(30))
    later = delivery(parent, next_attempt_at=hence(90))
    parked = delivery(parent, next_attempt_at=hence(3600))  # the sweeper's, not a countdown's
    done = delivery(parent, DeliveryState.DELIVERED)
    ids = [soon.pk, later.pk, parked.pk, done.pk]

    retry = retried(ids, queue=Lane.PRIORITY)

    assert isinstance(retry.when, float)
    assert 28 < retry.when <= 30
    assert retry.sig is not None
    assert sorted(retry.sig.args[0]) == [soon.pk, later.pk]
    assert retry.sig.options["queue"] == Lane.PRIORITY, "the retry stays in its lane"
    assert retry.sig.options["retries"] == 1
    stored = Delivery.objects.filter(pk__in=ids).values_list("state", "attempts")
    assert sorted(stored) == [("delivered", 0), ("queued", 0), ("queued", 0), ("queued", 0)]


@pytest.mark.django_db
def test_a_message_retries_only_the_rows_not_dispatched_again_since_it_was_published(
    worker_process: None,
) -> None:
    """A delivery held again and again while its host is paid gets a message per hold:
    the older messages, finding it not due, leave it to the newest (its dispatch stamp
    is later than their publish time) rather than each retrying it once more."""
    parent = message()
    published = time.time() - 10
    mine = delivery(parent, next_attempt_at=hence(30), dispatched_at=hence(-20))
    undispatched = delivery(parent, next_attempt_at=hence(40), dispatched_at=None)
    again = delivery(parent, next_attempt_at=hence(20), dispatched_at=hence(-5))
    ids = [mine.pk, undispatched.pk, again.pk]

    with running(ids, headers=header(mine.pk, published)), pytest.raises(Retry) as raised:
        deliver.run(ids)

    retry = raised.value
    assert retry.sig is not None and sorted(retry.sig.args[0]) == [mine.pk, undispatched.pk]
    assert 28 < float(retry.when) <= 30, "the wait is that of the rows it keeps"
    assert retry.sig.options["headers"] == header(mine.pk, published), "its publish time kept"


@pytest.mark.django_db
def test_a_message_whose_rows_were_all_dispatched_again_just_ends(worker_process: None) -> None:
    parent = message()
    again = delivery(parent, next_attempt_at=hence(20), dispatched_at=hence(-5))
    with running([again.pk], headers=header(again.pk, time.time() - 10)):
        assert deliver.run([again.pk]) is None


@pytest.mark.django_db
def test_with_nothing_due_within_the_countdown_limit_the_task_just_ends(
    worker_process: None,
) -> None:
    parent = message()
    parked = delivery(parent, next_attempt_at=hence(3600))
    done = delivery(parent, DeliveryState.DELIVERED)
    with running([parked.pk, done.pk]):
        assert deliver.run([parked.pk, done.pk]) is None


@pytest.mark.django_db(transaction=True)
def test_due_rows_are_sent_and_only_the_others_retried(
    worker_process: None, inbox_server: InboxServer
) -> None:
    parent = message()
    due = delivery(parent, inbox=inbox_server.url("/due"))
    not_due = delivery(parent, inbox=inbox_server.url("/later"), next_attempt_at=hence(60))

    retry = retried([due.pk, not_due.pk])

    assert retry.sig is not None and retry.sig.args == ([not_due.pk],)
    assert 58 < float(retry.when) <= 60
    this_process().engine.wait_idle(10)
    assert this_process().recorder.flush(10)
    sent = Delivery.objects.get(pk=due.pk)
    assert (sent.state, sent.attempts, sent.last_status) == ("delivered", 1, 202)
    assert [r.path for r in inbox_server.requests()] == ["/due"]
    assert Delivery.objects.get(pk=not_due.pk).attempts == 0


# -- the database is away ------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("retries", "countdown"), [(0, 2), (1, 4), (3, 16), (4, 32), (5, 60), (12, 60)]
)
def test_a_database_outage_is_retried_with_a_doubling_backoff(
    worker_process: None, retries: int, countdown: int
) -> None:
    row = delivery(message())
    with database_away():
        retry = retried([row.pk], retries=retries)
    assert retry.when == countdown
    assert isinstance(retry.exc, OperationalError)
    assert retry.sig is not None and retry.sig.args == ([row.pk],)
    assert retry.sig.options["retries"] == retries + 1
    # Nothing was claimed: the retry will find the row as it was.
    assert Delivery.objects.get(pk=row.pk).state == DeliveryState.QUEUED


def test_only_database_outages_are_retried_by_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(ids: list[int], urgent: bool, published: object) -> None:
        raise ValueError("a bug, not an outage")

    monkeypatch.setattr("django_outbox.tasks.run_deliveries", broken)
    with running([1]), pytest.raises(ValueError, match="a bug"):
        deliver.run([1])
    assert {kind.__name__ for kind in DATABASE_OUTAGES} == {"OperationalError", "InterfaceError"}
