"""The in-process engine: global and per-host caps, priority first, stopping."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django_outbox.worker.engine import Engine


@dataclass(frozen=True)
class Task:
    host: str
    urgent: bool = False
    hold: threading.Event = field(default_factory=threading.Event, compare=False)


async def released(task: Task) -> None:
    """Wait, on the engine's loop, until the test thread releases ``task``."""
    deadline = time.monotonic() + 10
    while not task.hold.is_set() and time.monotonic() < deadline:
        await asyncio.sleep(0.005)


def eventually(condition: Callable[[], bool], within: float = 5) -> bool:
    """Poll ``condition`` until it holds or ``within`` seconds pass."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def make(
    concurrency: int, per_host: int, log: list[Task], lock: threading.Lock, peaks: dict[str, int]
) -> Engine[Task]:
    running: dict[str, int] = {}

    async def work(task: Task) -> None:
        with lock:
            running[task.host] = running.get(task.host, 0) + 1
            peaks[task.host] = max(peaks.get(task.host, 0), running[task.host])
            log.append(task)
        await released(task)
        with lock:
            running[task.host] -= 1

    return Engine(
        work,
        host_of=lambda t: t.host,
        urgent=lambda t: t.urgent,
        concurrency=concurrency,
        per_host=per_host,
        backlog=1000,
    )


def holding(started: list[Task], **options: int | float) -> Engine[Task]:
    """An engine whose jobs note that they started, then wait until released."""

    async def work(task: Task) -> None:
        started.append(task)
        await released(task)

    return Engine(
        work,
        host_of=lambda t: t.host,
        urgent=lambda t: t.urgent,
        **options,  # type: ignore[arg-type]
    )


def test_a_host_at_its_cap_does_not_block_other_hosts() -> None:
    log: list[Task] = []
    lock = threading.Lock()
    peaks: dict[str, int] = {}
    engine = make(8, 2, log, lock, peaks)
    slow = [Task("slow") for _ in range(6)]
    fast = [Task(f"fast{i}") for i in range(4)]
    for task in fast:
        task.hold.set()
    engine.submit(slow + fast)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and sum(1 for t in log if t.host != "slow") < 4:
        time.sleep(0.01)
    assert sum(1 for t in log if t.host != "slow") == 4  # all fast ones ran meanwhile
    assert peaks["slow"] == 2
    for task in slow:
        task.hold.set()
    assert engine.wait_idle(5)
    assert peaks["slow"] == 2 and len(log) == 10


def test_urgent_jobs_start_before_waiting_ones() -> None:
    log: list[Task] = []
    lock = threading.Lock()
    peaks: dict[str, int] = {}
    engine = make(1, 10, log, lock, peaks)
    blocker = Task("a")
    engine.submit([blocker])
    assert eventually(lambda: log == [blocker])
    bulk = [Task(f"b{i}") for i in range(5)]
    urgent = Task("u", urgent=True)
    for task in [*bulk, urgent]:
        task.hold.set()
    engine.submit(bulk)
    engine.submit([urgent])
    # The urgent job starts while the only slot is still taken; the bulk ones wait.
    assert eventually(lambda: len(log) == 2)
    time.sleep(0.05)
    assert log == [blocker, urgent]
    blocker.hold.set()
    assert engine.wait_idle(5)
    assert log[2:] == bulk


def test_an_urgent_job_goes_to_the_front_of_its_host_line() -> None:
    log: list[Task] = []
    lock = threading.Lock()
    peaks: dict[str, int] = {}
    engine = make(4, 1, log, lock, peaks)
    blocker = Task("h")
    engine.submit([blocker])
    assert eventually(lambda: log == [blocker])
    queued = [Task("h") for _ in range(3)]
    urgent = Task("h", urgent=True)
    for task in [*queued, urgent]:
        task.hold.set()
    engine.submit([*queued, urgent])
    blocker.hold.set()
    assert engine.wait_idle(5)
    assert log[1] is urgent


def test_room_counts_what_may_wait_and_wait_for_room_times_out() -> None:
    engine = holding([], concurrency=1, per_host=1, backlog=2)
    running = Task("a")
    engine.submit([running])
    assert eventually(lambda: engine.room() == 2), "room once the first job started"
    waiting = [Task("b"), Task("c")]
    engine.submit(waiting)
    assert engine.room() == 0
    assert not engine.wait_for_room(0.05)
    running.hold.set()
    assert engine.wait_for_room(5), "room again once a waiting job starts"
    for task in waiting:
        task.hold.set()
    assert engine.wait_idle(5)


def test_slow_jobs_stop_counting_up_to_the_most_in_flight() -> None:
    started: list[Task] = []
    engine = holding(started, concurrency=2, per_host=1, max_in_flight=5, slow_after=0.2)
    silent = [Task(f"silent{n}") for n in range(4)]
    engine.submit(silent)
    time.sleep(0.1)
    assert len(started) == 2, "the concurrency, at first"
    deadline = time.monotonic() + 5
    while len(started) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(started) == 4, "slow jobs stopped counting: the others started"
    others = [Task(f"other{n}") for n in range(3)]
    engine.submit(others)
    time.sleep(0.3)
    assert len(started) == 5, "a fifth job in flight, the maximum, and no more"
    silent[0].hold.set()
    while len(started) < 6 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(started) == 6, "a job that ended made room for the next"
    for task in [*silent, *others]:
        task.hold.set()
    assert engine.wait_idle(5)
    assert len(started) == 7


def test_jobs_parked_behind_a_slow_host_have_their_own_allowance() -> None:
    ran: list[Task] = []
    engine = holding(ran, concurrency=2, per_host=1, backlog=2, parked=5)
    slow = [Task("slow") for _ in range(6)]
    assert engine.submit(slow) == []
    assert engine.room() == 0, "five parked: their allowance is used up"
    assert not engine.wait_for_room(0.05)
    slow[0].hold.set()
    assert engine.wait_for_room(5), "one moved on: room for one more"
    others = [Task("a"), Task("b")]
    for task in [*others, *slow]:
        task.hold.set()
    engine.submit(others)
    assert engine.wait_idle(5)
    assert len(ran) == 8


def test_jobs_parked_behind_a_host_whose_requests_are_all_slow_free_the_parking() -> None:
    ran: list[Task] = []
    engine = holding(ran, concurrency=4, per_host=1, backlog=2, parked=3, slow_after=0.2)
    silent = [Task("silent") for _ in range(4)]
    engine.submit(silent)
    assert engine.room() == 0, "three parked behind the silent host: the cap"
    assert engine.wait_for_room(5), "its one request turned slow: its line stops counting"
    assert engine.room() == 2
    fresh = [Task("other") for _ in range(4)]
    engine.submit(fresh)
    assert engine.room() == 0, "three parked behind a host that is not slow: the cap again"
    more = [Task("silent") for _ in range(10)]
    engine.submit(more)
    time.sleep(0.6)
    assert engine.room() == 0, "at most four parking caps behind slow hosts"
    for task in [*silent, *fresh, *more]:
        task.hold.set()
    assert engine.wait_idle(5)
    assert len(ran) == 18


def test_stop_returns_what_never_started_and_what_still_runs() -> None:
    log: list[Task] = []
    lock = threading.Lock()
    peaks: dict[str, int] = {}
    engine = make(2, 1, log, lock, peaks)
    stuck = Task("x")
    queued = [Task("x"), Task("y")]
    queued[1].hold.set()
    engine.submit([stuck, *queued])
    time.sleep(0.1)
    unstarted = engine.stop()
    assert [id(task) for task in unstarted] == [id(queued[0])]
    assert engine.submit([Task("z")]) != []  # refused once stopping
    assert [id(task) for task in engine.join(0.2)] == [id(stuck)]
    deadline = time.monotonic() + 5
    while engine.usage()[0] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.usage()[0] == 0, "the job still running was cancelled"


def test_a_backlog_on_one_host_drains_while_submit_waits() -> None:
    done: list[int] = []

    async def work(n: int) -> None:
        done.append(n)

    engine: Engine[int] = Engine(
        work,
        host_of=lambda n: "one",
        urgent=lambda n: False,
        concurrency=4,
        per_host=2,
        backlog=8,
    )
    assert engine.submit(list(range(50))) == []
    assert engine.wait_idle(5)
    assert sorted(done) == list(range(50))


def test_urgent_jobs_run_on_their_own_loop_while_the_main_one_is_busy() -> None:
    threads: dict[str, str] = {}
    urgent_done = threading.Event()

    async def work(task: Task) -> None:
        threads[task.host] = threading.current_thread().name
        if task.urgent:
            urgent_done.set()
        else:
            time.sleep(0.5)  # CPU-bound work: the main loop takes no other step meanwhile

    engine: Engine[Task] = Engine(
        work, host_of=lambda t: t.host, urgent=lambda t: t.urgent, concurrency=4, per_host=1
    )
    engine.submit([Task("bulk")])
    time.sleep(0.05)
    began = time.monotonic()
    engine.submit([Task("reply", urgent=True)])
    assert urgent_done.wait(5)
    assert time.monotonic() - began < 0.3, "the urgent job did not wait for the busy loop"
    assert engine.wait_idle(5)
    assert threads == {"bulk": "outbox-engine", "reply": "outbox-engine-urgent"}


def test_both_loops_share_the_per_host_cap() -> None:
    log: list[Task] = []
    lock = threading.Lock()
    peaks: dict[str, int] = {}
    engine = make(8, 1, log, lock, peaks)
    tasks = [Task("h", urgent=n % 2 == 0) for n in range(6)]
    for task in tasks:
        task.hold.set()
    engine.submit(tasks)
    assert engine.wait_idle(5)
    assert peaks["h"] == 1 and len(log) == 6


def test_urgent_jobs_do_not_wait_for_a_slot_but_for_the_most_in_flight() -> None:
    started: list[Task] = []
    engine = holding(started, concurrency=1, per_host=1, max_in_flight=3)
    bulk = [Task("a"), Task("b")]
    engine.submit(bulk)
    assert eventually(lambda: len(started) == 1)
    time.sleep(0.05)
    assert started == [bulk[0]], "the concurrency, for bulk jobs"
    urgent = [Task(f"u{n}", urgent=True) for n in range(3)]
    engine.submit(urgent)
    deadline = time.monotonic() + 5
    while len(started) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    assert started[1:] == urgent[:2], "two urgent ones at once, up to the most in flight"
    for task in [*bulk, *urgent]:
        task.hold.set()
    assert engine.wait_idle(5)
    assert len(started) == 5


def test_jobs_in_no_host_line_are_not_held_by_the_per_host_cap() -> None:
    """A job whose ``host_of`` is None (a delivery paying its own invoice) waits in no
    host's line: the per-host cap holds back only the others of its host."""
    started: list[Task] = []

    async def work(task: Task) -> None:
        started.append(task)
        await released(task)

    engine: Engine[Task] = Engine(
        work,
        host_of=lambda t: None if t.urgent else t.host,
        urgent=lambda t: t.urgent,
        concurrency=8,
        per_host=1,
        backlog=100,
    )
    lined = [Task("paid") for _ in range(3)]
    free = [Task("paid", urgent=True) for _ in range(3)]
    engine.submit(lined + free)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(started) < 4:
        time.sleep(0.01)
    time.sleep(0.1)
    assert sorted(t.urgent for t in started) == [False, True, True, True]
    for task in lined + free:
        task.hold.set()
    assert engine.wait_idle(5)
    assert len(started) == 6
    engine.stop()


def test_work_submitted_with_urgent_jobs_starts_once_they_have() -> None:
    """The main loop may look while urgent jobs are ready and start nothing; once the
    urgent loop has started them it is woken, and its own job starts (it used to wait
    for the next event, which may never come while the urgent ones run)."""
    for _ in range(10):
        started: list[Task] = []

        async def work(task: Task, started: list[Task] = started) -> None:
            started.append(task)
            await released(task)

        engine: Engine[Task] = Engine(
            work, host_of=lambda t: t.host, urgent=lambda t: t.urgent, concurrency=8, per_host=1
        )
        tasks = [Task("bulk"), *(Task(f"u{n}", urgent=True) for n in range(3))]
        engine.submit(tasks)
        deadline = time.monotonic() + 2
        while len(started) < 4 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert sorted(t.urgent for t in started) == [False, True, True, True]
        for task in tasks:
            task.hold.set()
        assert engine.wait_idle(5)
        engine.stop()


def test_a_ramping_host_s_cap_holds_its_jobs_back_until_it_grows() -> None:
    """Held to 1 of its 4, the host runs one job; its cap growing to 3 starts two more
    without any job ending (the engine looks again every turn of its watch)."""
    started: list[Task] = []
    caps = {"h": 1}
    engine = holding(started, concurrency=8, per_host=4, host_cap=caps.__getitem__)
    tasks = [Task("h") for _ in range(4)]
    engine.submit(tasks)
    assert eventually(lambda: len(started) == 1) and not eventually(lambda: len(started) > 1, 0.6)
    caps["h"] = 3
    assert eventually(lambda: len(started) == 3) and not eventually(lambda: len(started) > 3, 0.6)
    for task in tasks:
        task.hold.set()
    assert engine.wait_idle(5) and len(started) == 4
