"""The breaker questions of one turn of an event loop go to the store in one call."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from django_outbox.breakers import Admission, BreakerPolicy, MemoryBreakerStore, Report
from django_outbox.worker import breaker_turns

POLICY = BreakerPolicy(threshold=2, cool_off=60, answer_within=60)


class BlockingStore(MemoryBreakerStore):
    """A memory store that pretends every answer needs I/O, and counts its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int]] = []

    def admit_now(self, key: str, policy: BreakerPolicy) -> None:  # type: ignore[override]
        return None

    def record_now(self, report: Report) -> bool | None:
        return None

    def admit_many(self, requests: Sequence[tuple[str, BreakerPolicy]]) -> list[Admission]:
        self.calls.append(("admit", len(requests)))
        return super().admit_many(requests)

    def record_many(self, reports: Sequence[Report]) -> list[bool]:
        self.calls.append(("record", len(reports)))
        return super().record_many(reports)


def test_one_turns_questions_go_in_one_call_and_get_their_own_answers() -> None:
    store = BlockingStore()
    keys = ["host:a.example", "host:b.example", "host:a.example", "host:a.example"]

    async def main() -> list[Admission]:
        admissions = await asyncio.gather(*(breaker_turns.admit(store, k, POLICY) for k in keys))
        await asyncio.gather(
            *(
                breaker_turns.record(store, Report(key, POLICY, True, admission))
                for key, admission in zip(keys, admissions, strict=True)
                if admission.kind == "pass"
            )
        )
        return list(admissions)

    admissions = asyncio.run(main())
    assert [a.kind for a in admissions] == ["pass", "pass", "pass", "held"], "in order asked"
    assert store.calls == [("admit", 4), ("record", 3)]
    assert store.admit("host:a.example", POLICY).why == "open"
    assert store.admit("host:b.example", POLICY).kind == "pass", "one failure of two"


def test_a_store_that_fails_fails_each_question_of_the_turn() -> None:
    class Broken(BlockingStore):
        def admit_many(self, requests: Sequence[tuple[str, BreakerPolicy]]) -> list[Admission]:
            raise RuntimeError("broken")

    async def main() -> list[BaseException | Admission]:
        store = Broken()
        asked = (breaker_turns.admit(store, f"host:{n}.example", POLICY) for n in range(3))
        return await asyncio.gather(*asked, return_exceptions=True)

    assert [str(answer) for answer in asyncio.run(main())] == ["broken"] * 3


def test_an_asker_cancelled_meanwhile_leaves_the_others_their_answers() -> None:
    store = BlockingStore()

    async def main() -> list[str]:
        asked = [
            asyncio.ensure_future(breaker_turns.admit(store, f"host:{n}.example", POLICY))
            for n in range(3)
        ]
        await asyncio.sleep(0)  # the three are queued for this turn
        asked[1].cancel()
        done = await asyncio.gather(*asked, return_exceptions=True)
        return [a.kind if isinstance(a, Admission) else type(a).__name__ for a in done]

    assert asyncio.run(main()) == ["pass", "CancelledError", "pass"]
    assert store.calls == [("admit", 3)]
