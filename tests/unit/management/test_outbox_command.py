"""``manage.py outbox``: status numbers equal the database's; requeue, give-up, hosts."""

from __future__ import annotations

import io
import json
from collections import Counter
from datetime import date, timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_outbox.breakers import BreakerPolicy
from django_outbox.counters.shared import configured_metrics_store
from django_outbox.models import Attempt, Delivery, DeliveryState, Host
from tests.support.observability import deliveries, message, shared_breakers

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_redis")]


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("outbox", *args, stdout=out)
    return out.getvalue()


def status() -> dict[str, Any]:
    return json.loads(run("status", "--json"))  # type: ignore[no-any-return]


def a_day_of_rows() -> None:
    now = timezone.now()
    deliveries(7, state=DeliveryState.DELIVERED, finished_at=now - timedelta(seconds=30))
    deliveries(2, state=DeliveryState.FAILED, finished_at=now - timedelta(hours=2))
    deliveries(3, state=DeliveryState.QUEUED, next_attempt_at=now - timedelta(seconds=90))
    deliveries(4, state=DeliveryState.QUEUED, next_attempt_at=now + timedelta(minutes=5))
    deliveries(2, state=DeliveryState.QUEUED, lane="outbox.priority", next_attempt_at=now)
    deliveries(1, state=DeliveryState.SENDING, lane="outbox.priority")
    deliveries(2, host="dead.example", state=DeliveryState.REFUSED, finished_at=now)


def test_status_json_numbers_match_the_database() -> None:
    a_day_of_rows()
    found = status()
    by_state_lane = Counter(Delivery.objects.values_list("state", "lane"))
    for lane, counts in found["lanes"].items():
        for state in DeliveryState.values:
            assert counts[state] == by_state_lane[(state, lane)], (lane, state)
    assert found["totals"] == {
        state: Delivery.objects.filter(state=state).count() for state in DeliveryState.values
    }
    assert found["in_flight"] == 1
    assert found["lanes"]["outbox"]["due"] == 3
    assert found["lanes"]["outbox.priority"]["due"] == 2
    assert 89 < found["lanes"]["outbox"]["oldest_due_seconds"] < 120
    assert 89 < found["oldest_due_seconds"] < 120
    assert found["throughput"]["finished"] == 9  # the failures were two hours ago
    assert found["throughput"]["per_second"] == round(9 / 300, 2)
    settle = found["send_to_settle_seconds"]
    assert settle["samples"] == 9
    assert found["attempt_seconds"] is None


def test_status_quantiles_of_settle_and_attempt_times() -> None:
    now = timezone.now()
    sent = message(created_at=now - timedelta(seconds=100))
    for n in range(1, 101):
        Delivery.objects.create(
            message=sent,
            inbox=f"https://a.example/{n}",
            host="a.example",
            state=DeliveryState.DELIVERED,
            finished_at=sent.created_at + timedelta(seconds=n / 10),
        )
    configured_metrics_store().add({}, [f"slow.example {n / 100}" for n in range(1, 101)])
    found = status()
    assert found["send_to_settle_seconds"] == {"samples": 100, "p50": 5.0, "p90": 9.0, "p99": 9.9}
    assert found["attempt_seconds"] == {"samples": 100, "p50": 0.5, "p90": 0.9, "p99": 0.99}
    assert found["slowest_hosts"][0]["host"] == "slow.example"


def test_status_text_leads_with_the_lanes_and_names_failing_hosts_and_breakers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    breakers = shared_breakers(monkeypatch)
    a_day_of_rows()
    Host.objects.create(name="dead.example", failure_days=3, last_failure_day=date.today())
    breakers.record("host:dead.example", BreakerPolicy(threshold=1), failed=True, admission=None)
    text = run("status")
    lines = text.splitlines()
    assert lines[2].split() == [
        "lane", "waiting", "queued", "sending", "delivered", "refused", "skipped", "failed",
        "due", "oldest", "due",
    ]  # fmt: skip
    assert "failing hosts: 1 (0 unavailable)" in text
    assert "host:dead.example" in text
    assert "open breakers: 1" in text


def test_status_for_one_host_shows_its_history() -> None:
    (row,) = deliveries(1, host="dead.example", state=DeliveryState.QUEUED)
    Attempt.objects.create(
        delivery=row, number=1, host="dead.example", at=timezone.now(), status=503,
        result="retry", error="HTTP 503", duration=0.3, scheme="draft-cavage",
    )  # fmt: skip
    text = run("status", "--host", "DEAD.example")
    assert "host dead.example" in text
    assert "HTTP 503" in text
    found = json.loads(run("status", "--host", "dead.example", "--json"))
    assert found["counts"]["queued"] == 1
    assert found["history"][0]["status"] == 503


def test_watch_redraws_a_bounded_number_of_times() -> None:
    text = run("status", "--watch", "0.5", "--count", "2")
    assert text.count("outbox status at") == 2


def test_requeue_is_a_dry_run_until_yes() -> None:
    a_day_of_rows()
    found = json.loads(run("requeue", "--json"))
    assert found == {"action": "requeue", "matched": 2, "changed": 0, "dry_run": True}
    assert "would requeue 2 deliveries" in run("requeue")
    assert Delivery.objects.filter(state=DeliveryState.FAILED).count() == 2
    assert "requeued 2 of 2" in run("requeue", "--yes")
    assert not Delivery.objects.filter(state=DeliveryState.FAILED).exists()


def test_requeue_selects_by_state_host_tag_and_since() -> None:
    a_day_of_rows()
    selected = json.loads(run("requeue", "--state", "refused", "--host", "dead.example", "--json"))
    assert selected["matched"] == 2
    assert json.loads(run("requeue", "--since", "1h", "--json"))["matched"] == 0
    assert json.loads(run("requeue", "--since", "3h", "--json"))["matched"] == 2
    assert json.loads(run("requeue", "--tag", "nothing", "--json"))["matched"] == 0
    with pytest.raises(CommandError, match="--since"):
        run("requeue", "--since", "yesterday-ish")


def test_give_up_fails_live_deliveries() -> None:
    a_day_of_rows()
    assert json.loads(run("give-up", "--json"))["matched"] == 9
    run("give-up", "--host", "a.example", "--yes", "--reason", "host retired")
    assert not Delivery.objects.filter(state=DeliveryState.QUEUED).exists()
    assert Delivery.objects.filter(last_error="host retired").count() == 9


def test_hosts_list_and_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    breakers = shared_breakers(monkeypatch)
    Host.objects.create(name="dead.example", failure_days=8, last_failure_day=date.today())
    Host.objects.create(name="flaky.example", last_failure_day=date.today())
    store = breakers
    store.record("host:dead.example", BreakerPolicy(threshold=1), failed=True, admission=None)
    listed = json.loads(run("hosts", "list", "--json"))
    assert [h["host"] for h in listed] == ["dead.example", "flaky.example"]
    assert "reset 1 hosts (1 were failing)" in run("hosts", "reset", "dead.example")
    assert list(Host.objects.values_list("name", flat=True)) == ["flaky.example"]
    assert store.states() == []
    with pytest.raises(CommandError, match="--yes"):
        run("hosts", "reset", "--all")
    run("hosts", "reset", "--all", "--yes")
    assert not Host.objects.exists()


@pytest.mark.parametrize("action", ["requeue", "give-up"])
def test_a_bad_since_on_the_command_line_is_a_clean_error(
    action: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from django.core.management import ManagementUtility

    with pytest.raises(SystemExit) as exited:
        ManagementUtility(["manage.py", "outbox", action, "--since", "1x"]).execute()
    assert exited.value.code == 1
    err = capsys.readouterr().err  # the system checks' warnings of the test settings first
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last == "CommandError: --since '1x': give a duration (90s, 30m, 2h, 7d) or a date"
