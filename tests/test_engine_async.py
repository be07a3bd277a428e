"""Async policies: concurrent within a step, committed in canonical order, bounded and fail-soft."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

from tests.support.requests import post
from vivarium import ActionRequest, Run, TraceDb, WorldEngine, WorldEngineConfig
from vivarium.gateways.base import CallRecord, record_call
from vivarium.worlds import InMemoryChannel


class SlowPoster:
    """Async policy whose latency is given per agent; logs the order decisions finish in."""

    def __init__(
        self, delay: float, finished: list[str], in_flight: list[int], peak: list[int]
    ) -> None:
        self.delay, self.finished, self.in_flight, self.peak = delay, finished, in_flight, peak

    def decide(self, **kw: Any) -> ActionRequest:
        raise AssertionError("the engine must use adecide")

    async def adecide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        self.in_flight[0] += 1
        self.peak[0] = max(self.peak[0], self.in_flight[0])
        record_call(
            CallRecord(attempt=1, model="fake", request_hash=agent_id, latency_ms=self.delay * 1000)
        )
        await asyncio.sleep(self.delay)
        self.in_flight[0] -= 1
        self.finished.append(agent_id)
        return post(run_id, time_step, agent_id)


def run_engine(db: Path, agents: dict[str, Any], steps: int, **config: Any) -> Run:
    trace = TraceDb(db)
    WorldEngine(
        WorldEngineConfig(run_id="async", **config), agents, InMemoryChannel(), trace_db=trace
    ).run(steps)
    trace.close()
    return Run.open(db)


def test_reverse_finishing_order_still_commits_in_agent_order(db: Path) -> None:
    finished: list[str] = []
    flight, peak = [0], [0]
    n = 6
    agents = {f"a{i}": SlowPoster(0.02 * (n - i), finished, flight, peak) for i in range(n)}
    run = run_engine(db, agents, steps=2, scheduling="simultaneous")
    assert finished[:n] == [f"a{i}" for i in reversed(range(n))]  # they really finished reversed
    assert run.actions["agent_id"].tolist() == [f"a{i}" for i in range(n)] * 2
    assert run.messages["content"].tolist()[:n] == [f"a{i} at 0" for i in range(n)]
    calls = run.llm_calls
    assert calls["agent_id"].tolist() == [f"a{i}" for i in range(n)] * 2
    assert calls["request_hash"].tolist()[:n] == [f"a{i}" for i in range(n)]
    assert peak[0] == n  # all in flight at once


def test_max_concurrency_bounds_calls_in_flight(db: Path) -> None:
    finished: list[str] = []
    flight, peak = [0], [0]
    agents = {f"a{i}": SlowPoster(0.01, finished, flight, peak) for i in range(10)}
    run_engine(db, agents, steps=1, scheduling="simultaneous", max_concurrency=3)
    assert peak[0] == 3 and len(finished) == 10


def test_max_concurrency_needs_no_llm_section(db: Path) -> None:
    """The run's concurrency is an engine setting: an async policy of the user's own, with no
    ``llm`` section, is bounded by it, and the run id does not change with it."""
    from vivarium import Experiment
    from vivarium.experiment.build import POLICIES, register_policy

    finished: list[str] = []
    flight, peak = [0], [0]
    register_policy("slow_poster", lambda *_: SlowPoster(0.01, finished, flight, peak))
    try:
        fields = {"policy": "slow_poster", "agents": 10, "steps": 1, "scheduling": "simultaneous"}
        bounded = Experiment(**fields, max_concurrency=3)
        assert bounded.config.llm is None
        assert bounded.run_id == Experiment(**fields).run_id  # how fast, not what
        bounded.run(db, progress=False)
        assert peak[0] == 3 and len(finished) == 10
        peak[0] = 0
        older = Experiment(**fields, llm={"mock": True, "max_concurrency": 4})
        older.run(db.with_name("older.sqlite"), progress=False)
        assert peak[0] == 4  # llm.max_concurrency, the older place, still works
        peak[0] = 0
        both = Experiment(**fields, max_concurrency=2, llm={"mock": True, "max_concurrency": 4})
        both.run(db.with_name("both.sqlite"), progress=False)
        assert peak[0] == 2  # the run's own wins
    finally:
        POLICIES.pop("slow_poster", None)


class Hanging:
    def __init__(self) -> None:
        self.calls = 0

    def decide(self, **kw: Any) -> ActionRequest:
        raise AssertionError

    async def adecide(self, **kw: Any) -> ActionRequest:
        self.calls += 1
        await asyncio.sleep(30)
        raise AssertionError("unreachable")


def test_timeout_with_retries_becomes_a_noop_with_reason(db: Path) -> None:
    hanging = Hanging()
    finished: list[str] = []
    agents = {"a": hanging, "b": SlowPoster(0.0, finished, [0], [0])}
    run = run_engine(
        db, agents, steps=1, scheduling="simultaneous", agent_timeout_s=0.05, agent_retries=2
    )
    row = run.actions.set_index("agent_id").loc["a"]
    assert row["action"] == "noop" and not row["success"]
    assert "timeout after 0.05 s (3 attempts)" in row["error"]
    assert hanging.calls == 3
    assert run.actions.set_index("agent_id").loc["b", "success"]


def test_sequential_scheduling_awaits_one_agent_at_a_time(db: Path) -> None:
    finished: list[str] = []
    flight, peak = [0], [0]
    agents = {f"a{i}": SlowPoster(0.01 * (3 - i), finished, flight, peak) for i in range(3)}
    run_engine(db, agents, steps=1, scheduling="sequential")
    assert peak[0] == 1 and finished == ["a0", "a1", "a2"]


class FreezeWatcher(SlowPoster):
    """Notes how many objects the garbage collector has frozen while it decides."""

    def __init__(self, seen: list[int]) -> None:
        super().__init__(0.0, [], [0], [0])
        self.seen = seen

    async def adecide(self, **kw: Any) -> ActionRequest:
        self.seen.append(gc.get_freeze_count())
        return await super().adecide(**kw)


def test_runs_with_async_policies_freeze_older_objects_and_give_them_back(db: Path) -> None:
    # Full collections then walk only what the run made, not every library's objects.
    assert gc.get_freeze_count() == 0
    seen: list[int] = []
    run = run_engine(db, {"a": FreezeWatcher(seen), "b": FreezeWatcher(seen)}, steps=3)
    assert len(run.actions) == 6 and len(seen) == 6
    assert min(seen) > 10_000  # the interpreter's and libraries' objects, frozen for the run
    assert gc.get_freeze_count() == 0  # handed back: nothing stays uncollectable


def test_a_heap_frozen_by_the_caller_is_left_frozen(db: Path) -> None:
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        seen: list[int] = []
        run_engine(db, {"a": FreezeWatcher(seen)}, steps=2)
        # Objects freed meanwhile leave the frozen set, so compare loosely; unfreezing would
        # have emptied it.
        assert min(seen) > before // 2
        assert gc.get_freeze_count() > before // 2  # not unfrozen behind the caller's back

    finally:
        gc.unfreeze()


def test_a_resumed_run_goes_on_at_its_own_max_concurrency(db: Path) -> None:
    """A run without LLM agents records the pace it set (it is not in the recorded config), so
    its resume goes on at that pace, not at the default."""
    import sqlite3

    from vivarium import Experiment, Run
    from vivarium.experiment.build import POLICIES, register_policy

    class Probe:
        """What the test watches: it only observes the run, so it counts by its type alone
        (the lists it fills are not inputs of the run's identity)."""

        __identity__ = "type"

        def __init__(self) -> None:
            self.finished: list[str] = []
            self.flight, self.peak = [0], [0]

    probe = Probe()
    peak = probe.peak
    register_policy(
        "slow_poster", lambda *_: SlowPoster(0.01, probe.finished, probe.flight, probe.peak)
    )
    try:
        fields = {"policy": "slow_poster", "agents": 10, "steps": 3, "scheduling": "simultaneous"}
        Experiment(**fields, max_concurrency=3, checkpoint_every=1).run(db, progress=False)
        con = sqlite3.connect(db)  # as if stopped after step 0 (its checkpoint is kept)
        with con:
            con.execute("UPDATE runs SET status = 'interrupted', steps_done = 1")
        con.close()
        peak[0] = 0
        resumed = Run.open(db).resume(progress=False)
        assert resumed.metadata["status"] == "complete"
        assert peak[0] == 3  # the default would let all 10 fly
    finally:
        POLICIES.pop("slow_poster", None)
