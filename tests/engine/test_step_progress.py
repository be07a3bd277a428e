"""A long step says its decisions on the run's bar, from the thread that drives the run.

The properties: while a step of many decisions runs, the bar's postfix says how many are in
(``step t: k/n decisions``), the counts never go down within a step and never pass n; the
postfix is cleared when the step ends; the bar is only ever touched by the run's own thread
(decisions made on the background event loop are counted there and read here); a quick step
never touches it; and the trace is the one a run without a bar writes.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.requests import post
from vivarium import ActionRequest, Run, TraceDb, WorldEngine, WorldEngineConfig
from vivarium.engine import deciding, step_progress
from vivarium.worlds import InMemoryChannel

SAID = re.compile(r"step (\d+): ([\d,]+)/([\d,]+) decisions")


class Bar:
    """A tqdm-like bar that records what is said on it, and on which thread."""

    def __init__(self) -> None:
        self.said: list[tuple[str, int]] = []
        self.updates = 0

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.said.append((text, threading.get_ident()))

    def update(self, n: int = 1) -> None:
        self.updates += n


class Sleeper:
    """Decides after ``delay`` seconds, async (on the event loop) or not."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def decide(self, *, run_id: str, time_step: int, agent_id: str, observation: Any) -> Any:
        time.sleep(self.delay)
        return post(run_id, time_step, agent_id)


class AsyncSleeper(Sleeper):
    async def adecide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: Any
    ) -> ActionRequest:
        await asyncio.sleep(self.delay)
        return post(run_id, time_step, agent_id)


def _run(db: Path, policy: type[Sleeper], bar: Bar | None, scheduling: str, n: int = 40) -> Run:
    trace = TraceDb(db)
    agents = {f"a{i:02d}": policy(0.004) for i in range(n)}
    config = WorldEngineConfig(run_id="progress", scheduling=scheduling, max_concurrency=4)
    WorldEngine(config, agents, InMemoryChannel(), trace_db=trace).run(2, progress=bar)
    trace.close()
    return Run.open(db)


@pytest.mark.parametrize(
    ("policy", "scheduling"),
    [(AsyncSleeper, "simultaneous"), (Sleeper, "simultaneous"), (Sleeper, "sequential")],
)
def test_a_long_step_says_its_decisions_from_the_runs_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: type[Sleeper], scheduling: str
) -> None:
    monkeypatch.setattr(step_progress.StepProgress, "EVERY", 0.005)
    monkeypatch.setattr(deciding, "TICK_EVERY", 0.005)
    bar = Bar()
    run = _run(tmp_path / "bar.sqlite", policy, bar, scheduling)
    assert bar.updates == 2
    assert {thread for _, thread in bar.said} == {threading.get_ident()}
    counts: dict[int, list[int]] = {}
    for text, _ in bar.said:
        if text:
            step, done, total = (int(g.replace(",", "")) for g in SAID.fullmatch(text).groups())
            assert total == 40 and 0 <= done <= total
            counts.setdefault(step, []).append(done)
    assert sorted(counts) == [0, 1]  # each step said something (10 waves of 4 x 4 ms)
    assert all(done == sorted(done) for done in counts.values())
    assert bar.said[-1][0] == ""  # cleared when the step ended
    # The bar changes nothing recorded.
    plain = _run(tmp_path / "plain.sqlite", policy, None, scheduling)
    assert run.actions.drop(columns="run_id").equals(plain.actions.drop(columns="run_id"))


def test_a_quick_step_never_touches_the_bar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Quick: shorter than EVERY, here a minute (a loaded machine may stall a step for long).
    monkeypatch.setattr(step_progress.StepProgress, "EVERY", 60.0)
    bar = Bar()
    _run(tmp_path / "quick.sqlite", AsyncSleeper, bar, "simultaneous", n=3)
    assert bar.said == [] and bar.updates == 2


class BrokenBar(Bar):
    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        super().set_postfix_str(text, refresh)
        raise RuntimeError("the widget is gone")


def test_a_bar_that_fails_to_say_stops_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(step_progress.StepProgress, "EVERY", 0.005)
    monkeypatch.setattr(deciding, "TICK_EVERY", 0.005)
    bar = BrokenBar()
    run = _run(tmp_path / "broken.sqlite", AsyncSleeper, bar, "simultaneous")
    assert len(run.actions) == 80 and bar.updates == 2
    assert len(bar.said) == 2  # tried once a step, then left alone


def test_a_run_without_a_bar_waits_for_its_decisions_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No bar: no tick is handed down (``run_async`` waits on the result, not in slices)."""
    ticks: list[object] = []
    run_async = deciding.run_async

    def recorded(coro: Any, tick: Any = None) -> Any:
        ticks.append(tick)
        return run_async(coro, tick)

    monkeypatch.setattr(deciding, "run_async", recorded)
    _run(tmp_path / "plain.sqlite", AsyncSleeper, None, "simultaneous")
    assert ticks == [None, None]  # one wait a step
    ticks.clear()
    _run(tmp_path / "bar.sqlite", AsyncSleeper, Bar(), "simultaneous")
    assert len(ticks) == 2 and all(callable(t) for t in ticks)
