"""The engine: scheduling semantics, canonical order, recorded failures, hash chain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from vivarium import ActionRequest, Run, TraceDb, WorldEngine, WorldEngineConfig
from vivarium.errors import ConfigError
from vivarium.worlds import InMemoryChannel


class Poster:
    """Posts how many messages it saw: reveals what each agent observed."""

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name="post_message",
            arguments={"content": f"{agent_id} saw {len(observation['messages'])}"},
        )


class Fixed:
    def __init__(self, action: str, arguments: dict[str, Any] | None = None) -> None:
        self.action, self.arguments = action, arguments or {}

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name=self.action,
            arguments=self.arguments,
        )


class Broken:
    def decide(self, **_: Any) -> ActionRequest:
        raise RuntimeError("model exploded")


def run_engine(db: Path, agents: dict[str, Any], steps: int = 1, **config: Any) -> Run:
    trace = TraceDb(db)
    settings = WorldEngineConfig(run_id="t", **config)
    world = InMemoryChannel(message_history_limit=settings.message_history_limit)
    engine = WorldEngine(settings, agents, world, trace_db=trace)
    engine.run(steps)
    trace.close()
    return Run.open(db)


def test_sequential_agents_see_earlier_actions_of_the_same_step(db: Path) -> None:
    run = run_engine(db, {f"a{i}": Poster() for i in range(3)}, scheduling="sequential")
    assert run.messages["content"].tolist() == ["a0 saw 0", "a1 saw 1", "a2 saw 2"]


def test_simultaneous_agents_all_see_one_snapshot(db: Path) -> None:
    run = run_engine(db, {f"a{i}": Poster() for i in range(3)}, steps=2, scheduling="simultaneous")
    assert run.messages["content"].tolist() == [
        "a0 saw 0",
        "a1 saw 0",
        "a2 saw 0",
        "a0 saw 3",
        "a1 saw 3",
        "a2 saw 3",
    ]
    assert run.messages["step"].tolist() == [0, 0, 0, 1, 1, 1]


def test_message_history_limit_bounds_observations(db: Path) -> None:
    run = run_engine(db, {f"a{i}": Poster() for i in range(3)}, steps=3, message_history_limit=2)
    assert run.messages["content"].tolist()[-1] == "a2 saw 2"
    assert set(run.messages["content"].tolist()[3:]) <= {"a0 saw 2", "a1 saw 2", "a2 saw 2"}


def test_agents_commit_in_sorted_id_order(db: Path) -> None:
    run = run_engine(db, {"b": Poster(), "c": Poster(), "a": Poster()})
    assert run.actions["agent_id"].tolist() == ["a", "b", "c"]
    assert run.actions["seq"].tolist() == [0, 1, 2]


def test_shuffle_order_is_seeded_and_varies_by_step(db: Path, tmp_path: Path) -> None:
    agents = {f"a{i:02d}": Poster() for i in range(12)}
    run = run_engine(db, agents, steps=4, order="shuffle", seed=5)
    again = run_engine(tmp_path / "again.sqlite", agents, steps=4, order="shuffle", seed=5)
    orders = [g["agent_id"].tolist() for _, g in run.actions.groupby("step", observed=True)]
    assert orders == [
        g["agent_id"].tolist() for _, g in again.actions.groupby("step", observed=True)
    ]
    assert any(o != sorted(o) for o in orders)
    assert len({tuple(o) for o in orders}) > 1
    assert all(sorted(o) == sorted(agents) for o in orders)


def test_unknown_action_and_bad_arguments_are_recorded_failures(db: Path) -> None:
    run = run_engine(
        db,
        {
            "a": Fixed("fly_to_moon"),
            "b": Fixed("emit_event", {"value": "not a number"}),
            "c": Fixed("post_message", {}),
            "d": Fixed("emit_event", {"value": 3}),
        },
    )
    rows = run.actions.set_index("agent_id")
    assert not rows.loc["a", "success"] and "unknown action 'fly_to_moon'" in rows.loc["a", "error"]
    assert not rows.loc["b", "success"] and "value" in rows.loc["b", "error"]
    assert not rows.loc["c", "success"] and "content" in rows.loc["c", "error"]
    assert rows.loc["d", "success"] and pd.isna(rows.loc["d", "error"])


def test_policy_exception_becomes_a_recorded_noop(db: Path) -> None:
    run = run_engine(db, {"a": Broken(), "b": Fixed("noop")}, steps=2)
    bad = run.actions[run.actions["agent_id"] == "a"]
    assert len(bad) == 2
    assert (bad["action"] == "noop").all() and (~bad["success"]).all()
    assert bad["error"].str.contains("model exploded").all()
    assert run.metadata["status"] == "complete"


def test_engine_rejects_objects_without_decide() -> None:
    with pytest.raises(ConfigError, match="no decide"):
        WorldEngine(WorldEngineConfig(run_id="x"), {"a": object()}, InMemoryChannel())  # type: ignore[dict-item]


def test_state_hash_chain_depends_on_every_row(db: Path, tmp_path: Path) -> None:
    one = run_engine(db, {"a": Fixed("emit_event", {"value": 1})}, steps=3)
    two = run_engine(tmp_path / "b.sqlite", {"a": Fixed("emit_event", {"value": 2})}, steps=3)
    h1, h2 = one.steps["state_hash"].tolist(), two.steps["state_hash"].tolist()
    assert len(set(h1)) == 3 and all(a != b for a, b in zip(h1, h2, strict=True))


def test_step_numbers_must_follow_on(db: Path) -> None:
    engine = WorldEngine(WorldEngineConfig(run_id="x"), {"a": Fixed("noop")}, InMemoryChannel())
    engine.step(0)
    with pytest.raises(ConfigError, match="next step is 1"):
        engine.step(5)


@pytest.mark.parametrize("steps", [-1, -100, 2.5, "3", None])
def test_run_refuses_a_step_count_that_is_not_a_count(db: Path, steps: Any) -> None:
    trace = TraceDb(db)
    engine = WorldEngine(
        WorldEngineConfig(run_id="t"), {"a": Fixed("noop")}, InMemoryChannel(), trace_db=trace
    )
    with pytest.raises(ConfigError) as info:
        engine.run(steps)
    trace.close()
    message = str(info.value)
    assert "\n" not in message and message.startswith("steps: ") and repr(steps) in message
    # nothing was recorded as a run, least of all a complete one
    import sqlite3

    if db.exists() and db.stat().st_size:
        with sqlite3.connect(db) as con:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
            if "runs" in tables:
                assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)


def test_zero_steps_is_a_complete_empty_run(db: Path) -> None:
    run = run_engine(db, {"a": Fixed("noop")}, steps=0)
    assert run.metadata["status"] == "complete" and len(run.actions) == 0


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"t": 1.0}, "step: 1.0 is not a step number"),
        ({"t": -1}, "step: -1 is not a step number"),
        ({"agents": [3]}, "step: agents: 3 is not an agent index (0..1)"),
        ({"agents": [-1]}, "step: agents: -1 is not an agent index (0..1)"),
    ],
)
def test_step_misuse_is_one_line(kwargs: dict[str, Any], expected: str) -> None:
    engine = WorldEngine(
        WorldEngineConfig(run_id="x"), {"a": Fixed("noop"), "b": Fixed("noop")}, InMemoryChannel()
    )
    with pytest.raises(ConfigError) as info:
        engine.step(**kwargs)
    assert str(info.value) == expected
    assert engine.next_step == 0  # nothing happened
