"""The original aam engine's ids, types and policies, as its documentation describes them.

Source: Mahdi-s/vivarium, ``src/aam/run.py``, ``src/aam/policy.py``, ``src/aam/types.py`` and its
policy guide (``AGENT_POLICY_SETTING.md``, seed 001). Expected values are computed here from
those descriptions (SHA-256 seeds, ``f"agent_{i:03d}"``), not taken from the code under test.
"""

from __future__ import annotations

import hashlib
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from vivarium import ActionRequest, Observation, RandomAgentPolicy, TraceDb, WorldEngine
from vivarium.engine import WorldEngineConfig
from vivarium.experiment.config import ExperimentConfig
from vivarium.experiment.plan import agent_plan
from vivarium.seeding import agent_sort_key
from vivarium.worlds import InMemoryChannel


def original_seed(master: int, agent_id: str) -> int:
    """``stable_agent_seed`` as aam's policy.py writes it: SHA-256, first 8 bytes, big-endian."""
    return int.from_bytes(hashlib.sha256(f"{master}:{agent_id}".encode()).digest()[:8], "big")


# -- agent ids: f"agent_{i:03d}" ---------------------------------------------------------------
def test_agent_ids_and_seeds_do_not_depend_on_the_run_size() -> None:
    """aam run.py: ``agent_id = f"agent_{i:03d}"`` for every i, so agent_000's id and seed
    (``stable_agent_seed(seed, agent_id)``) are the same in a 10- and a 1,200-agent run, and
    agent 1000 is ``agent_1000``."""
    small = agent_plan(ExperimentConfig(agents=10, seed=42))
    large = agent_plan(ExperimentConfig(agents=1200, seed=42))
    assert small[0].agent_id == large[0].agent_id == "agent_000"
    assert small[0].seeds.agent == large[0].seeds.agent == original_seed(42, "agent_000")
    ids = [p.agent_id for p in large]
    assert ids == [f"agent_{i:03d}" for i in range(1200)]  # index order, not text order
    assert ids[999:1001] == ["agent_999", "agent_1000"]
    assert large[1000].seeds.agent == original_seed(42, "agent_1000")


def test_agent_order_is_the_index_order_and_text_order_up_to_999() -> None:
    """aam sorts agent ids (``sorted(self._agents)``); with three-digit ids that is the index
    order, which the run keeps past agent_999 (a text sort would put agent_1000 after
    agent_100)."""
    ids = [f"agent_{i:03d}" for i in range(1100)]
    shuffled = random.Random(3).sample(ids, len(ids))
    assert sorted(shuffled, key=agent_sort_key) == ids
    named = ["alpha_2", "beta_2", "agent_007", "llm_000", "alpha_2_10", "alpha_2_2", "agent_010"]
    assert sorted(named, key=agent_sort_key) == sorted(named)  # unchanged below four digits
    # Only ASCII digits count as a trailing number (not "٣", an Arabic-Indic three), and an
    # id that is all digits is a number too.
    odd = ["12345", "x٣٤٥٦", "agent_0001", "b_12_3456", "1234", "", "agent_99", "9999"]
    assert sorted(odd, key=agent_sort_key) == [
        "",
        "1234",  # numbers sort as a prefix "" past three digits: before any letter
        "9999",
        "12345",
        "agent_99",
        "agent_0001",
        "b_12_3456",
        "x٣٤٥٦",
    ]


def test_the_engine_steps_agents_past_999_in_index_order(tmp_path: Path) -> None:
    """aam steps agents in id order; agent_1000 comes after agent_999, not after agent_100."""
    agents = {f"agent_{i:03d}": RandomAgentPolicy.from_seed(i) for i in range(1002)}
    trace = TraceDb(tmp_path / "t.sqlite")
    engine = WorldEngine(WorldEngineConfig(run_id="order"), agents, InMemoryChannel(), trace)
    trace.close()
    assert engine.agent_ids[999:] == ["agent_999", "agent_1000", "agent_1001"]


# -- Observation, RandomAgentPolicy ------------------------------------------------------------
def test_observation_is_exported_as_the_originals_json_dict_type() -> None:
    """aam types.py: ``Observation = JsonDict`` (``Dict[str, Any]``), imported by policies as
    ``from aam.types import ActionRequest, Observation``."""
    import vivarium
    import vivarium.types

    assert Observation == dict[str, Any]
    assert vivarium.types.Observation is Observation
    assert "Observation" in vivarium.__all__


def test_random_policy_metadata_names_the_policy() -> None:
    """aam policy.py: every RandomAgentPolicy decision carries
    ``metadata={"policy": "RandomAgentPolicy"}`` and ``reasoning=None``."""
    policy = RandomAgentPolicy(random.Random(original_seed(42, "agent_000")))
    for t in range(5):
        req = policy.decide(
            run_id="r", time_step=t, agent_id="agent_000", observation={"time_step": t}
        )
        assert req.metadata == {"policy": "RandomAgentPolicy"} and req.reasoning is None


@pytest.mark.parametrize("batch", [True, False], ids=["batch", "per-agent"])
def test_random_agents_record_the_policy_metadata(tmp_path: Path, batch: bool) -> None:
    """aam world_engine.py records the request (metadata included) in ``info_json``: random
    agents' rows say ``{"policy": "RandomAgentPolicy"}``, on the batch path as on the other."""
    db = tmp_path / "t.sqlite"
    agents = {f"agent_{i:03d}": RandomAgentPolicy.from_seed(i) for i in range(4)}
    trace = TraceDb(db)
    engine = WorldEngine(
        WorldEngineConfig(run_id="m", batch=batch), agents, InMemoryChannel(), trace
    )
    engine.run(3)
    trace.close()
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT json_extract(info_json, '$.metadata') FROM trace").fetchall()
    assert rows == [('{"policy":"RandomAgentPolicy"}',)] * 12


# -- the original's example custom policy -------------------------------------------------------
class MyCustomPolicy:
    """aam's policy guide, example 4, in our API: ``emit_event`` with empty arguments on even
    steps, ``noop`` on odd ones, ``metadata={"policy": "MyCustomPolicy"}``."""

    def __init__(self, some_config: str) -> None:
        self.config = some_config

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: Observation
    ) -> ActionRequest:
        action = "emit_event" if time_step % 2 == 0 else "noop"
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name=action,
            arguments={},
            reasoning=None,
            metadata={"policy": "MyCustomPolicy"},
        )


def test_the_originals_custom_policy_succeeds_in_the_channel_world(tmp_path: Path) -> None:
    """aam world_engine.py: ``emit_event`` succeeds whatever its arguments (``{"ok": True,
    "echo": arguments}``), so the guide's custom policy, which emits with ``arguments={}``,
    never fails; here it runs in the channel world the same way."""
    agents = {f"agent_{i:03d}": MyCustomPolicy(some_config="value") for i in range(3)}
    world = InMemoryChannel()
    trace = TraceDb(tmp_path / "custom.sqlite")
    WorldEngine(WorldEngineConfig(run_id="custom"), agents, world, trace).run(4)
    trace.close()
    with sqlite3.connect(tmp_path / "custom.sqlite") as con:
        rows = con.execute(
            "SELECT time_step, agent_id, action_type, outcome_json FROM trace "
            "ORDER BY time_step, created_at"
        ).fetchall()
    assert len(rows) == 12
    for step, _agent, action, outcome in rows:
        assert action == ("emit_event" if step % 2 == 0 else "noop")
        assert '"success":true' in outcome and '"error":null' in outcome
    assert world.events_emitted == 6  # 3 agents x steps 0 and 2


def test_emit_event_without_a_value_leaves_the_llm_tool_as_it_was() -> None:
    """aam's ``emit_event`` takes any arguments; ours now takes none too, while the tool shown
    to an LLM still asks for an integer ``value`` (recorded requests keep their hashes) and a
    value of the wrong type is still refused."""
    from vivarium.worlds.channel import CHANNEL_ACTIONS

    spec = CHANNEL_ACTIONS.get("emit_event")
    assert spec is not None
    parameters = spec.tool_spec()["function"]["parameters"]
    assert parameters["required"] == ["value"]
    assert parameters["properties"]["value"] == {
        "description": "An integer payload for the event.",
        "title": "Value",
        "type": "integer",
    }
    world = InMemoryChannel()
    request = {"run_id": "r", "time_step": 0, "agent_id": "agent_000"}
    empty = ActionRequest(action_name="emit_event", arguments={}, **request)
    bad = ActionRequest(action_name="emit_event", arguments={"value": "x"}, **request)
    assert world.apply(empty).success and world.events_emitted == 1
    assert not world.apply(bad).success and world.events_emitted == 1


# -- documented differences: temperature and decision retries ----------------------------------
def test_temperature_defaults_to_zero_and_aams_is_one_flag_away(tmp_path: Path) -> None:
    """aam's cognitive policies sample at a fixed 0.2; ours default to 0.0 (README, "Coming
    from aam": the temperature is in every recorded request's hash). ``llm.temperature: 0.2``
    reaches every request, as aam's did."""
    from vivarium import Experiment

    seen: list[float] = []
    for temperature in (None, 0.2):
        llm = {"model": "mock", "mock": True}
        if temperature is not None:
            llm["temperature"] = temperature
        exp = Experiment(name=f"t{temperature}", policy="cognitive", agents=2, steps=2, llm=llm)
        engine = exp.build(TraceDb(tmp_path / f"t{temperature}.sqlite"))
        requests = [
            p.plan(a, engine.world.observe(a, 0)).request
            for a, p in zip(engine.agent_ids, engine.policies, strict=True)
        ]
        seen += sorted({r["temperature"] for r in requests})
    assert seen == [0.0, 0.2]


def test_an_aam_experiment_file_gets_the_barrier_schedulers_two_retries() -> None:
    """aam scheduler.py: the barrier scheduler re-asks a decision twice (``max_retries=2``)
    under ``per_agent_timeout_s``; ours does that only for aam experiment files (README)."""
    from vivarium.experiment.config import ExperimentConfig
    from vivarium.experiment.sections import convert_sections

    aam = convert_sections({"policy": {"kind": "cognitive", "mock_llm": True}}).config
    assert aam.llm is not None and (aam.llm.agent_retries, aam.llm.agent_timeout) == (2, 60.0)
    ours = ExperimentConfig(name="x", policy="cognitive", llm={"model": "mock", "mock": True})
    assert ours.llm is not None and (ours.llm.agent_retries, ours.llm.agent_timeout) == (0, None)
