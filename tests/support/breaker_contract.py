"""What every breaker store must do: the seed's state machine, and more.

:class:`BreakerStoreContract` holds the tests; each store's test module
subclasses it with a ``store`` fixture (the memory store in ``tests/unit``,
the Redis store in ``tests/integration``).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from django_outbox.breakers import BreakerPolicy, BreakerStore, Report
from django_outbox.breakers.policy import BUSY_WAIT
from tests.support.breaker_helpers import COOLED, KEY, POLICY, concurrently, open_breaker, send_one


class BreakerStoreContract:
    """Tests for any :class:`BreakerStore`; a subclass provides the ``store`` fixture."""

    # The four scenarios of the seed.

    def test_a_success_while_closed_starts_the_count_again(self, store: BreakerStore) -> None:
        send_one(store, failed=True)
        send_one(store, failed=False)
        send_one(store, failed=True)
        last = store.admit(KEY, POLICY)
        assert last.kind == "pass"
        store.record(KEY, POLICY, failed=True, admission=last)
        held = store.admit(KEY, POLICY)
        assert held.kind == "held"
        assert held.why == "open"
        assert 0 < held.retry_in <= POLICY.cool_off

    def test_a_success_sent_before_it_opened_does_not_close_it(self, store: BreakerStore) -> None:
        early = [store.admit(KEY, POLICY), store.admit(KEY, POLICY)]
        assert [admission.kind for admission in early] == ["pass", "pass"]
        open_breaker(store)
        store.record(KEY, POLICY, failed=False, admission=early[0])
        assert store.admit(KEY, POLICY).kind == "held"
        time.sleep(COOLED)
        # Nor does one that answers while it is half-open.
        probe = store.admit(KEY, POLICY)
        assert probe.kind == "probe"
        store.record(KEY, POLICY, failed=False, admission=early[1])
        assert store.admit(KEY, POLICY).kind == "held"

    def test_after_the_cool_off_one_probe_at_a_time_is_let_through(
        self, store: BreakerStore
    ) -> None:
        open_breaker(store)
        time.sleep(COOLED)
        first = store.admit(KEY, POLICY)
        assert first.kind == "probe"
        assert store.admit(KEY, POLICY).kind == "held", "the others wait for the probe"
        # A failed probe opens it for another cool-off.
        store.record(KEY, POLICY, failed=True, admission=first)
        reopened = store.admit(KEY, POLICY)
        assert reopened.kind == "held"
        assert reopened.retry_in > POLICY.cool_off / 2
        time.sleep(COOLED)
        second = store.admit(KEY, POLICY)
        assert second.kind == "probe"
        assert second.token != first.token
        # A successful one closes it, and the count starts from nought.
        store.record(KEY, POLICY, failed=False, admission=second)
        send_one(store, failed=True)
        send_one(store, failed=True)
        assert store.admit(KEY, POLICY).kind == "held"

    def test_a_probe_that_never_reports_back_is_given_up_after_the_cool_off(
        self, store: BreakerStore
    ) -> None:
        open_breaker(store)
        time.sleep(COOLED)
        assert store.admit(KEY, POLICY).kind == "probe"
        assert store.admit(KEY, POLICY).kind == "held"
        time.sleep(COOLED)
        assert store.admit(KEY, POLICY).kind == "probe"

    # Beyond the seed.

    def test_half_open_resets_the_count(self, store: BreakerStore) -> None:
        open_breaker(store)
        time.sleep(COOLED)
        assert store.admit(KEY, POLICY).kind == "probe"
        [state] = store.states()
        assert state.failures == 0
        assert state.probing

    def test_concurrent_admits_get_one_probe(self, store: BreakerStore) -> None:
        # A cool-off long enough that the probe cannot expire while 16 threads on a
        # busy machine are still asking (an expired probe rightly lets another through).
        policy = BreakerPolicy(threshold=2, cool_off=0.5)
        for _ in range(policy.threshold):
            store.record(KEY, policy, failed=True, admission=None)
        time.sleep(policy.cool_off + 0.03)
        kinds = concurrently(16, lambda: store.admit(KEY, policy).kind)
        assert sorted(kinds) == ["held"] * 15 + ["probe"]

    def test_a_silent_destination_gets_at_most_threshold_requests(
        self, store: BreakerStore
    ) -> None:
        policy = BreakerPolicy(threshold=3, cool_off=60, answer_within=60)
        answers = [store.admit(KEY, policy) for _ in range(10)]
        sent = [answer for answer in answers if answer.kind == "pass"]
        assert len(sent) == policy.threshold, "no more than the threshold await an answer"
        busy = answers[policy.threshold]
        assert (busy.kind, busy.why) == ("held", "busy")
        assert busy.retry_in == BUSY_WAIT, "nothing failed yet: look again soon"
        for admission in sent:
            store.record(KEY, policy, failed=True, admission=admission)
        assert store.admit(KEY, policy).why == "open"

    def test_while_failing_a_busy_destination_holds_until_an_answer_is_given_up(
        self, store: BreakerStore
    ) -> None:
        policy = BreakerPolicy(threshold=2, cool_off=60, answer_within=30)
        send_one(store, failed=True, policy=policy)
        assert store.admit(KEY, policy).kind == "pass"
        busy = store.admit(KEY, policy)
        assert (busy.kind, busy.why) == ("held", "busy")
        assert 25 < busy.retry_in <= 30, "only a lapse frees a place (a success is unlikely)"

    def test_an_answer_that_never_comes_stops_counting(self, store: BreakerStore) -> None:
        policy = BreakerPolicy(threshold=2, cool_off=60, answer_within=0.1)
        assert [store.admit(KEY, policy).kind for _ in range(3)] == ["pass", "pass", "held"]
        time.sleep(0.15)
        assert store.admit(KEY, policy).kind == "pass"

    def test_concurrent_admits_let_threshold_through(self, store: BreakerStore) -> None:
        policy = BreakerPolicy(threshold=5, cool_off=60, answer_within=60)
        kinds = concurrently(16, lambda: store.admit(KEY, policy).kind)
        assert sorted(kinds) == ["held"] * 11 + ["pass"] * 5

    # Admissions that end without a request (a payment that failed before it).

    def test_a_probe_that_made_no_request_passes_the_probe_on(self, store: BreakerStore) -> None:
        open_breaker(store)
        time.sleep(COOLED)
        probe = store.admit(KEY, POLICY)
        assert probe.kind == "probe"
        assert store.admit(KEY, POLICY).kind == "held"
        assert store.record(KEY, POLICY, failed=False, admission=probe, answered=False) is False
        # Still half-open: the next delivery is the probe, not one of many let through.
        after = store.admit(KEY, POLICY)
        assert after.kind == "probe"
        assert after.token != probe.token
        assert store.admit(KEY, POLICY).kind == "held"
        [state] = store.states()
        assert state.probing
        # A stale probe's no-request report frees nothing of the current one's.
        store.record(KEY, POLICY, failed=False, admission=probe, answered=False)
        assert store.admit(KEY, POLICY).kind == "held"

    def test_no_request_neither_counts_nor_starts_the_count_again(
        self, store: BreakerStore
    ) -> None:
        policy = BreakerPolicy(threshold=2, cool_off=60, answer_within=60)
        send_one(store, failed=True, policy=policy)
        places = [store.admit(KEY, policy)]
        assert places[0].kind == "pass"
        assert store.admit(KEY, policy).why == "busy", "one failure and one awaiting"
        store.record_many([Report(KEY, policy, False, places[0], answered=False)])
        places.append(store.admit(KEY, policy))
        assert places[1].kind == "pass", "its place was given back"
        store.record(KEY, policy, failed=True, admission=places[1])
        assert store.admit(KEY, policy).why == "open", "the failure before it still counted"

    def test_states_list_open_breakers_and_reset_closes_one(self, store: BreakerStore) -> None:
        before = datetime.now(UTC)
        open_breaker(store, "host:a.example")
        open_breaker(store, "host:b.example")
        store.record("host:c.example", POLICY, failed=True, admission=None)  # closed: not listed
        states = {state.key: state for state in store.states()}
        assert set(states) == {"host:a.example", "host:b.example"}
        a = states["host:a.example"]
        assert a.failures == POLICY.threshold
        assert not a.probing
        slack = timedelta(milliseconds=50)  # Redis's clock against ours
        assert (
            before - slack < a.open_until <= datetime.now(UTC) + timedelta(seconds=POLICY.cool_off)
        )
        assert len(store.states(limit=1)) == 1
        time.sleep(COOLED)
        assert store.admit("host:a.example", POLICY).kind == "probe"
        a = {state.key: state for state in store.states()}["host:a.example"]
        assert a.probing
        assert a.open_until < datetime.now(UTC), "half-open"
        store.reset("host:a.example")
        assert store.admit("host:a.example", POLICY).kind == "pass"
        assert [state.key for state in store.states()] == ["host:b.example"]
        store.reset("host:never.example")  # nothing to reset: no error, nothing changed
        assert [state.key for state in store.states()] == ["host:b.example"]

    def test_many_at_once_answer_as_one_after_another(self, store: BreakerStore) -> None:
        policy = BreakerPolicy(threshold=2, cool_off=60, answer_within=60)
        other = "host:other.example"
        answers = store.admit_many([(KEY, policy), (other, policy), (KEY, policy), (KEY, policy)])
        assert [answer.kind for answer in answers] == ["pass", "pass", "pass", "held"]
        assert answers[3].why == "busy", "the first three count as awaiting their answers"
        store.record_many(
            [Report(KEY, policy, True, answers[0]), Report(KEY, policy, True, answers[2]),
             Report(other, policy, False, answers[1])]
        )  # fmt: skip
        assert store.admit(KEY, policy).why == "open", "two failures reported together"
        assert store.admit(other, policy).kind == "pass", "its success closed nothing open"
        assert store.admit_many([]) == []
        store.record_many([])

    # Holds that end early, and throttling (issue 28).

    def test_a_probe_that_succeeds_says_held_deliveries_may_come_back(
        self, store: BreakerStore
    ) -> None:
        open_breaker(store)
        assert store.admit(KEY, POLICY).why == "open"
        time.sleep(COOLED)
        probe = store.admit(KEY, POLICY)
        assert store.admit(KEY, POLICY).kind == "held", "held while the probe is under way"
        assert store.record(KEY, POLICY, failed=False, admission=probe) is True
        # Closed, and each success frees the host again while the holds run.
        again = store.admit(KEY, POLICY)
        assert again.kind == "pass"
        assert store.record(KEY, POLICY, failed=False, admission=again) is True

    def test_a_failed_probe_releases_nothing(self, store: BreakerStore) -> None:
        open_breaker(store)
        store.admit(KEY, POLICY)
        time.sleep(COOLED)
        probe = store.admit(KEY, POLICY)
        assert store.record(KEY, POLICY, failed=True, admission=probe) is False

    def test_a_success_with_nothing_held_releases_nothing(self, store: BreakerStore) -> None:
        admission = store.admit(KEY, POLICY)
        assert store.record(KEY, POLICY, failed=False, admission=admission) is False

    def test_an_answer_that_frees_a_place_releases_a_busy_hold(self, store: BreakerStore) -> None:
        policy = BreakerPolicy(threshold=2, cool_off=60, answer_within=60)
        first, second = store.admit(KEY, policy), store.admit(KEY, policy)
        busy = store.admit(KEY, policy)
        assert busy.why == "busy"
        assert busy.retry_in == BUSY_WAIT
        assert store.record(KEY, policy, failed=False, admission=first) is True
        assert store.admit(KEY, policy).kind == "pass", "a place is free"
        store.record(KEY, policy, failed=True, admission=second)

    def test_a_429_holds_the_host_for_the_time_asked_and_counts_no_failure(
        self, store: BreakerStore
    ) -> None:
        for _ in range(POLICY.threshold + 2):
            admission = store.admit(KEY, POLICY)
            assert admission.kind == "pass", "throttling never opens the breaker"
            assert (
                store.record(KEY, POLICY, failed=False, admission=admission, throttle=0.3) is False
            )
            throttled = store.admit(KEY, POLICY)
            assert throttled.kind == "held"
            assert throttled.why == "throttled"
            assert 0.1 < throttled.retry_in <= 0.3
            time.sleep(0.35)
        assert store.states() == []

    def test_a_429_from_the_probe_closes_it_but_holds_the_host(self, store: BreakerStore) -> None:
        open_breaker(store)
        time.sleep(COOLED)
        probe = store.admit(KEY, POLICY)
        assert store.record(KEY, POLICY, failed=False, admission=probe, throttle=0.3) is False
        assert store.admit(KEY, POLICY).why == "throttled"
        assert store.states() == [], "the server answered: the breaker is closed"
        time.sleep(0.35)
        assert store.admit(KEY, POLICY).kind == "pass"
