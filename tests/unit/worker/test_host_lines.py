"""Hosts' lines in the engine: the per-host cap, a cap that falls and grows again."""

from __future__ import annotations

import pytest

from django_outbox.worker.host_lines import HostLines


def lines(caps: dict[str, int], per_host: int = 4) -> HostLines[str]:
    """Lines whose hosts' caps are read from ``caps`` (``per_host`` for others); a
    job named ``!…`` is urgent."""
    return HostLines(per_host, lambda host: caps.get(host, per_host), lambda job: job[0] == "!")


def test_jobs_beyond_the_cap_wait_and_urgent_ones_wait_in_front() -> None:
    line = lines({})
    assert [line.join("a", f"j{n}") for n in range(5)] == [True] * 4 + [False]
    assert not line.join("a", "!u")
    assert line.parked == 2
    assert line.leave("a") == "!u"
    assert line.leave("a") == "j4"
    assert line.parked == 0
    assert [line.leave("a") for _ in range(4)] == [None] * 4
    assert line.waiting_behind(["a"]) == 0


def test_a_ramping_host_runs_its_cap_and_hands_no_slot_on_above_it() -> None:
    caps = {"a": 1}
    line = lines(caps)
    assert line.join("a", "first")
    assert not line.join("a", "second")
    assert line.widen() == []  # its cap has not grown
    assert line.leave("a") == "second"  # one ends, one starts: still 1
    caps["a"] = 3
    assert line.join("a", "third") and line.join("a", "fourth")  # 3 under way
    assert not line.join("a", "fifth")
    caps["a"] = 1  # fell again (a new throttle): ending jobs free no slot above it
    assert line.leave("a") is None
    assert line.leave("a") is None
    assert line.leave("a") == "fifth"  # the last one under way hands its slot on
    assert line.parked == 0


def test_a_cap_that_grows_starts_the_waiting_jobs_up_to_it() -> None:
    caps = {"a": 1}
    line = lines(caps)
    joined = [line.join("a", f"j{n}") for n in range(6)]
    assert joined == [True] + [False] * 5
    caps["a"] = 3
    assert line.widen() == ["j1", "j2"]
    assert line.parked == 3 and line.waiting_behind(["a", "b"]) == 3
    caps["a"] = 4
    assert line.widen() == ["j3"]
    assert line.widen() == []  # at per_host: no longer watched
    assert sorted(line.clear()) == ["j4", "j5"]
    assert line.parked == 0


def test_without_a_cap_reader_every_host_has_per_host() -> None:
    line: HostLines[str] = HostLines(2, None, lambda job: False)
    assert [line.join("a", str(n)) for n in range(3)] == [True, True, False]
    assert line.widen() == []


def test_a_cap_reader_that_fails_leaves_the_host_its_per_host(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(host: str) -> int:
        raise ZeroDivisionError(host)

    line: HostLines[str] = HostLines(2, broken, lambda job: False)
    assert [line.join("a", str(n)) for n in range(3)] == [True, True, False]
    assert line.leave("a") == "2"
    assert "reading the cap of a failed" in caplog.text
