"""The seed recorded for an agent: decided in one place, the seed the agent runs on.

``vivarium.experiment.build.recorded_seeds`` decides the seed of every agent of a run (the engine records
it as given): a built-in policy's from the plan, a class given as an object the seed it is
offered, and a registered factory's or an instance's what its policy reports. The expected
seeds are derived here with ``vivarium.seeding``'s functions (how seeds are made), never read
back from the code that decides which one is recorded.
"""

from __future__ import annotations

import itertools
import sqlite3
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vivarium import Experiment
from vivarium.experiment.build import POLICIES, register_policy
from vivarium.seeding import derive_seed, llm_agent_seed, stable_agent_seed
from vivarium.types import ActionRequest

_NUMBER = itertools.count()


def _noop(run_id: str, time_step: int, agent_id: str) -> ActionRequest:
    return ActionRequest(
        run_id=run_id, time_step=time_step, agent_id=agent_id, action_name="noop", arguments={}
    )


class TakesSeed:
    """A policy class that takes the seed it is offered, and reports it."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def decide(self, *, run_id: str, time_step: int, agent_id: str, observation: Any) -> Any:
        return _noop(run_id, time_step, agent_id)


class TakesRng:
    """A policy class that takes a generator made from its seed, and reports no seed."""

    def __init__(self, rng: Any) -> None:
        self.rng = rng

    def decide(self, *, run_id: str, time_step: int, agent_id: str, observation: Any) -> Any:
        return _noop(run_id, time_step, agent_id)


class PerAgent:
    """A policy shared by agents that derives each one's seed (``request_seed``)."""

    def request_seed(self, agent_id: str) -> int:
        return derive_seed(7, agent_id) % 1000

    def decide(self, *, run_id: str, time_step: int, agent_id: str, observation: Any) -> Any:
        return _noop(run_id, time_step, agent_id)


class Silent:
    """A policy that reports no seed."""

    def decide(self, *, run_id: str, time_step: int, agent_id: str, observation: Any) -> Any:
        return _noop(run_id, time_step, agent_id)


def _agent(seed: int, agent_id: str) -> str:
    return str(stable_agent_seed(seed, agent_id))


def _llm(seed: int, agent_id: str) -> str:
    return str(llm_agent_seed(seed, agent_id))


# kind -> (the experiment's fields, a registration or None, the recorded seed of (seed, id))
KINDS: dict[str, tuple[dict[str, Any], tuple[str, Any] | None, Any]] = {
    "random (built in)": ({"policy": "random"}, None, _agent),
    "boltzmann (built in)": ({"world": "boltzmann", "policy": "boltzmann"}, None, _agent),
    "cognitive (built in)": ({"policy": "cognitive", "llm": {"mock": True}}, None, _llm),
    "a class given the seed": ({"policy": TakesSeed}, None, _agent),
    "a class given a generator": ({"policy": TakesRng}, None, _agent),
    "an instance with a seed": ({"policy": TakesSeed(1234)}, None, lambda s, a: "1234"),
    "an instance without one": ({"policy": Silent()}, None, lambda s, a: None),
    "a registered factory, the LLM seed": (
        {"policy": "mine"},
        ("mine", lambda config, agent, shared: TakesSeed(agent.seeds.llm)),
        _llm,
    ),
    "a registered factory, per agent": (
        {"policy": "mine"},
        ("mine", lambda config, agent, shared: PerAgent()),
        lambda s, a: str(derive_seed(7, a) % 1000),
    ),
    "a registered factory, none": (
        {"policy": "mine"},
        ("mine", lambda config, agent, shared: Silent()),
        lambda s, a: None,
    ),
    "a registered factory over a built-in name": (
        {"policy": "random"},
        ("random", lambda config, agent, shared: TakesSeed(5)),
        lambda s, a: "5",
    ),
}


def recorded(path: Path) -> dict[str, str | None]:
    con = sqlite3.connect(path)
    try:
        return dict(con.execute("SELECT agent_id, seed FROM agents ORDER BY agent_idx"))
    finally:
        con.close()


@pytest.fixture
def registered() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        POLICIES.pop(name, None)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kind=st.sampled_from(sorted(KINDS)),
    seed=st.integers(min_value=0, max_value=2**63 - 1),
    agents=st.integers(min_value=2, max_value=3),  # a Boltzmann model needs two
)
def test_the_recorded_seed_is_the_one_the_agent_runs_on(
    tmp_path: Path, kind: str, seed: int, agents: int
) -> None:
    fields, registration, expected = KINDS[kind]
    if registration is not None:
        register_policy(*registration)
    path = tmp_path / f"r{next(_NUMBER)}.sqlite"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            Experiment(**fields, agents=agents, steps=1, seed=seed).run(path, progress=False)
    finally:
        if registration is not None:
            POLICIES.pop(registration[0], None)
    seeds = recorded(path)
    assert seeds == {aid: expected(seed, aid) for aid in seeds}
    assert len(seeds) == agents


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_one_function_decides_every_agents_seed(registered: list[str], kind: str) -> None:
    """``recorded_seeds`` names every planned agent: none is left to a second place."""
    from vivarium.experiment.build import build_agents, recorded_seeds

    fields, registration, expected = KINDS[kind]
    if registration is not None:
        register_policy(*registration)
        registered.append(registration[0])
    config = Experiment(**fields, agents=3, seed=11).config
    shared: dict[str, Any] = {}
    agents = build_agents(config, shared)
    seeds = recorded_seeds(shared["plan"], agents)
    assert list(seeds) == list(agents) == [p.agent_id for p in shared["plan"]]
    for aid, seed in seeds.items():
        assert (None if seed is None else str(seed)) == expected(11, aid)


def test_an_engine_built_by_hand_records_what_it_is_given_else_what_policies_report(
    tmp_path: Path,
) -> None:
    from vivarium.engine.engine import WorldEngine, WorldEngineConfig
    from vivarium.trace.db import TraceDb
    from vivarium.worlds.channel import InMemoryChannel

    def run(path: Path, agent_seeds: dict[str, int | None] | None) -> dict[str, str | None]:
        policies = {"a": TakesSeed(5), "b": Silent(), "c": PerAgent()}
        engine = WorldEngine(
            WorldEngineConfig(run_id="hand"),
            policies,
            InMemoryChannel(),
            TraceDb(path),
            agent_seeds=agent_seeds,
        )
        engine.run(1)
        engine.trace_db.close()
        return recorded(path)

    reported = {"a": "5", "b": None, "c": str(derive_seed(7, "c") % 1000)}
    assert run(tmp_path / "1.sqlite", None) == reported
    given_ones = run(tmp_path / "2.sqlite", {"a": 8, "b": 9, "c": None})
    assert given_ones == {"a": "8", "b": "9", "c": None}  # as given, None too
    assert run(tmp_path / "3.sqlite", {"b": 9}) == {**reported, "b": "9"}
