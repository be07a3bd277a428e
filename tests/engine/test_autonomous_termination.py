"""Autonomous runs end, for any number of agents, duration, think time and rate limits.

The loop under test is driven with a recording engine, so thousands of runs take seconds. The
expectations are computed here from the rules of autonomous mode, not from its code: time is
counted in whole nanoseconds (the resolution of the recorded clock), an agent acts at most once
per think time, at most ``max(1, floor(actions_per_minute))`` times in any 60 s window, and only
when it used less than ``llm_tokens_per_minute - 1`` tokens in the last 60 s (or none at all).
A hang fails the example within seconds (an alarm around each run), a runaway loop through the
engine's step count.
"""

from __future__ import annotations

import contextlib
import math
import signal
from collections.abc import Iterator
from fractions import Fraction
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from vivarium.engine.autonomous import run_autonomous
from vivarium.experiment.config import AutonomousConfig

NS = 1_000_000_000
WINDOW_NS = 60 * NS


class RecordingEngine:
    """Takes autonomous steps and records who acted when; refuses more steps than can fit."""

    def __init__(self, n: int, tokens: list[int], max_steps: int) -> None:
        self.agent_ids = [f"agent_{i:03d}" for i in range(n)]
        self.tokens = tokens
        self.max_steps = max_steps
        self.steps: list[tuple[float, list[int]]] = []

    def step(self, *, agents: list[int], clock: float) -> SimpleNamespace:
        if len(self.steps) >= self.max_steps:
            raise AssertionError(f"more than {self.max_steps} steps: the loop runs away")
        self.steps.append((clock, list(agents)))
        # One LLM call per agent: (agent index, _, _, _, prompt tokens, completion tokens).
        calls = [(i, None, None, None, self.tokens[i], 0) for i in agents]
        return SimpleNamespace(llm_calls=calls)


@contextlib.contextmanager
def ends_within(seconds: float) -> Iterator[None]:
    """Fail (instead of hanging) when the block takes longer than ``seconds``."""

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError(f"the autonomous loop did not end within {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def ns(seconds: float) -> int:
    return round(seconds * NS)


seconds_ = st.one_of(
    st.sampled_from([0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.1, 1.5, 2.5, 3.0, 7.0]),
    st.floats(0.05, 10.0),
)
durations = st.one_of(
    st.sampled_from([0.5, 1.0, 12.0, 30.0, 60.0, 68.46, 90.0, 128.7, 200.0, 300.0]),
    st.floats(0.001, 300.0),
)
per_minute = st.one_of(
    st.none(),
    st.sampled_from([1, 2, 10, 30, 45, 60, 120]).map(float),
    st.floats(0.5, 200.0),
)
tokens_per_minute = st.one_of(st.none(), st.sampled_from([1.0, 50.0, 500.0]), st.floats(1, 3000))


@pytest.mark.timeout(120)
@settings(
    max_examples=150,
    deadline=None,
    # A failing example is reported as found: shrinking would rerun hanging loops.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(
    agents=st.integers(1, 60),
    duration=durations,
    think_s=seconds_,
    apm=per_minute,
    tpm=tokens_per_minute,
    token_costs=st.lists(st.integers(0, 400), min_size=60, max_size=60),
)
# The README's run (50 agents, 300 s) and the agent counts that hung at 68.46 s and 128.67 s.
@example(agents=50, duration=300.0, think_s=1.0, apm=30.0, tpm=None, token_costs=[0] * 60)
@example(agents=3, duration=300.0, think_s=1.0, apm=30.0, tpm=None, token_costs=[0] * 60)
@example(agents=6, duration=300.0, think_s=1.0, apm=30.0, tpm=None, token_costs=[0] * 60)
@example(agents=7, duration=300.0, think_s=1.0, apm=30.0, tpm=None, token_costs=[0] * 60)
@example(agents=5, duration=200.0, think_s=0.7, apm=45.0, tpm=None, token_costs=[0] * 60)
@example(agents=10, duration=200.0, think_s=0.7, apm=45.0, tpm=None, token_costs=[0] * 60)
@example(agents=4, duration=300.0, think_s=1.0, apm=30.0, tpm=200.0, token_costs=[37] * 60)
def test_autonomous_loop_ends_within_its_limits(
    agents: int,
    duration: float,
    think_s: float,
    apm: float | None,
    tpm: float | None,
    token_costs: list[int],
) -> None:
    duration_ns, think_ns = ns(duration), ns(think_s)
    # Keep each run small: at most ~300 actions per agent.
    if duration_ns // think_ns > 300:
        duration_ns = 300 * think_ns
        duration = duration_ns / NS
    costs = token_costs[:agents]
    most_per_agent = duration_ns // think_ns + 1  # one action per think time, from t >= 0
    engine = RecordingEngine(agents, costs, max_steps=agents * most_per_agent)
    config = AutonomousConfig(
        duration=duration, think_s=think_s, actions_per_minute=apm, llm_tokens_per_minute=tpm
    )

    with ends_within(5):
        run_autonomous(engine, config)

    clocks = [ns(clock) for clock, _ in engine.steps]
    # The clock only moves forward, agents due together act in one step, none at or past the end.
    assert clocks == sorted(set(clocks))
    assert all(0 <= c < duration_ns for c in clocks)
    acts: dict[int, list[int]] = {i: [] for i in range(agents)}
    for clock, who in zip(clocks, (w for _, w in engine.steps), strict=True):
        assert who == sorted(set(who)) and all(0 <= i < agents for i in who)
        for i in who:
            acts[i].append(clock)

    k_actions = max(1, math.floor(apm)) if apm is not None else None
    for i, times in acts.items():
        # Think time between two actions of one agent (exact to the nanosecond).
        assert all(b - a >= think_ns for a, b in zip(times, times[1:], strict=False)), i
        # Never more than the rate limit allows in a 60 s window.
        if k_actions is not None:
            assert all(
                times[j + k_actions] - times[j] >= WINDOW_NS for j in range(len(times) - k_actions)
            ), i
        # Never acting while its token budget of the last 60 s is spent.
        if tpm is not None:
            for j, t in enumerate(times):
                used = sum(costs[i] for s in times[:j] if s + WINDOW_NS > t)
                assert used == 0 or used + 1 <= tpm, (i, j, used)
        # And acting as often as those limits allow: an agent starts within its first think
        # time and then acts at least once per period P = the slowest of its limits.
        period = Fraction(think_ns)
        if k_actions is not None:
            period = max(period, Fraction(WINDOW_NS, k_actions))
        if tpm is not None and costs[i] > 0:
            per_window = math.floor((tpm - 1) / costs[i]) + 1 if tpm >= 1 else 1
            period = max(period, Fraction(WINDOW_NS, per_window))
        assert len(times) >= math.floor(duration_ns / period) - 1, (i, len(times))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("agents", range(1, 61))
def test_readme_pacing_ends_for_every_agent_count(agents: int) -> None:
    """The README's run (think 1 s, 30 actions a minute, 300 s), from 1 to 60 agents."""
    engine = RecordingEngine(agents, [0] * agents, max_steps=agents * 301)
    with ends_within(5):
        run_autonomous(engine, AutonomousConfig(duration=300))
    counts = [0] * agents
    for _, who in engine.steps:
        for i in who:
            counts[i] += 1
    # 30 actions in each of the five minutes; every agent starts within the first second.
    assert counts == [150] * agents


@pytest.mark.timeout(300)
@settings(max_examples=8, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(
    agents=st.integers(1, 60),
    duration=st.floats(0.5, 20.0),
    think_s=seconds_,
    apm=per_minute,
)
def test_autonomous_experiment_runs_end_complete(
    agents: int, duration: float, think_s: float, apm: float | None
) -> None:
    """The same through ``Experiment.run`` and the trace: complete, valid, inside the duration."""
    import tempfile
    from pathlib import Path

    from vivarium import Experiment

    exp = Experiment(
        name="ends", agents=agents, seed=5, mode="autonomous",
        autonomous={"duration": duration, "think_s": think_s, "actions_per_minute": apm},
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as folder, ends_within(60):
        run = exp.run(Path(folder) / "ends.sqlite", progress=False)
        assert run.metadata["status"] == "complete" and run.validate().status == "ok"
        clocks = [ns(c) for c in run.steps["clock"]]
        assert clocks == sorted(set(clocks)) and all(0 <= c < ns(duration) for c in clocks)
        # Every agent whose staggered start (think * i / n) falls inside the run acts (one
        # may start a rounding of half a nanosecond after the end).
        starters = sum(1 for i in range(agents) if ns(think_s) * i / agents < ns(duration))
        assert run.actions["agent_id"].nunique() >= starters - 1
