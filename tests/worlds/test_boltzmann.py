"""The Boltzmann wealth world and policy: moves, failures, conservation, determinism, resume."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from vivarium import Experiment, Run, TraceDb
from vivarium.experiment.runner import resume_run
from vivarium.trace.validate import validate_trace
from vivarium.types import ActionRequest
from vivarium.worlds.boltzmann import (
    BoltzmannPolicy,
    BoltzmannWorld,
    final_wealth,
    gini,
)

IDS = ["a", "b", "c"]


def give(world: BoltzmannWorld, giver: str, to: object, action: str = "give"):
    args = {"to": to} if to is not None else {}
    return world.apply(
        ActionRequest(run_id="r", time_step=0, agent_id=giver, action_name=action, arguments=args)
    )


def boltzmann(**fields: object) -> Experiment:
    base = {
        "name": "bz",
        "world": "boltzmann",
        "policy": "boltzmann",
        "agents": 30,
        "steps": 25,
        "seed": 4,
        "order": "shuffle",
    }
    return Experiment(**{**base, **fields})


def test_give_moves_one_unit_and_fails_with_reasons() -> None:
    world = BoltzmannWorld(IDS)
    assert give(world, "a", "b").success
    assert world.wealth == {"a": 0, "b": 2, "c": 1}
    assert world.transfers == 1
    broke = give(world, "a", "c")
    assert not broke.success and "nothing to give" in broke.error
    assert "yourself" in give(world, "b", "b").error
    assert "unknown agent 'zed'" in give(world, "b", "zed").error
    assert "bad arguments" in give(world, "b", 5).error  # through the registry's validation
    assert "bad arguments" in give(world, "b", None).error
    assert give(world, "b", None, action="noop").success
    assert "unknown action" in give(world, "b", "c", action="steal").error
    assert world.wealth == {"a": 0, "b": 2, "c": 1} and world.total_wealth == 3
    obs = world.observe("b", 3)
    assert obs["wealth"] == 2 and obs["time_step"] == 3 and set(obs["tools"]) == {"noop", "give"}


def test_snapshot_restore_and_digest() -> None:
    world = BoltzmannWorld(IDS, starting_wealth=2)
    give(world, "a", "c")
    digest, state = world.state_digest(), world.snapshot()
    other = BoltzmannWorld(IDS, starting_wealth=2)
    assert other.state_digest() != digest
    other.restore(state)
    assert other.state_digest() == digest and other.wealth == world.wealth


def test_policy_gives_to_others_and_waits_when_broke() -> None:
    policy = BoltzmannPolicy("b", IDS, seed=1)
    seen = set()
    for t in range(200):
        req = policy.decide(run_id="r", time_step=t, agent_id="b", observation={"wealth": 1})
        assert req.action_name == "give"
        seen.add(req.arguments["to"])
    assert seen == {"a", "c"}
    broke = policy.decide(run_id="r", time_step=0, agent_id="b", observation={"wealth": 0})
    assert broke.action_name == "noop"
    state = policy.get_state()
    twin = BoltzmannPolicy("b", IDS, seed=99)
    twin.set_state(state)

    def draws(p: BoltzmannPolicy) -> list[str]:
        obs = {"wealth": 1}
        return [
            p.decide(run_id="r", time_step=0, agent_id="b", observation=obs).arguments["to"]
            for _ in range(20)
        ]

    assert draws(policy) == draws(twin)
    with pytest.raises(ValueError, match="two agents"):
        BoltzmannPolicy("a", ["a"], seed=1)


def test_a_run_conserves_wealth_and_matches_the_world(tmp_path: Path) -> None:
    exp = boltzmann()
    trace = TraceDb(tmp_path / "bz.sqlite")
    engine = exp.build(trace)
    engine.run(exp.config.steps)
    trace.close()
    run = Run.open(tmp_path / "bz.sqlite")
    actions = run.actions
    assert len(actions) == 30 * 25
    assert set(actions["action"].astype(str)) == {"give", "noop"}
    assert actions["success"].all()  # the policy never gives what it does not have
    wealth = final_wealth(actions)
    assert wealth.sum() == 30
    assert wealth.to_dict() == engine.world.wealth
    assert 0 < gini(wealth.tolist()) < 1
    assert validate_trace(run.path).ok


def test_same_seed_same_trace_and_resume(tmp_path: Path) -> None:
    exp = boltzmann(checkpoint_every=4)
    a = exp.run(tmp_path / "a.sqlite", progress=False)
    b = exp.run(tmp_path / "b.sqlite", progress=False)
    assert (tmp_path / "a.sqlite").read_bytes() == (tmp_path / "b.sqlite").read_bytes()
    other = boltzmann(seed=5).run(tmp_path / "c.sqlite", progress=False)
    assert not other.actions["arguments"].equals(a.actions["arguments"])

    part = tmp_path / "part.sqlite"
    trace = TraceDb(part)
    exp.build(trace).run(13, finish=False)  # interrupted after 13 steps
    trace.close()
    resume_run(part, progress=False)
    for table in ("steps", "checkpoints", "runs"):
        rows = [
            sqlite3.connect(p).execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
            for p in (part, tmp_path / "b.sqlite")
        ]
        assert rows[0] == rows[1], table
    pd.testing.assert_frame_equal(Run.open(part).actions, b.actions)


def test_gini() -> None:
    assert gini([1, 1, 1, 1]) == pytest.approx(0.0)
    assert gini([0, 0, 0, 4]) == pytest.approx(0.75)
    assert gini([]) == 0.0


def test_built_in_imported_when_used_and_swept_in_workers(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from vivarium.experiment.build import known_names\n"
        "assert 'boltzmann' in known_names('world') and 'boltzmann' in known_names('policy')\n"
        "assert 'vivarium.worlds.boltzmann' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

    from vivarium.sweep import run_sweep

    sweep = run_sweep(
        boltzmann(steps=10), {"agents": [10, 20]}, folder=tmp_path / "sweep", max_workers=2
    )
    assert sweep.ok, sweep.index["error"].tolist()
    totals = sweep.actions.groupby("run").apply(lambda g: final_wealth(g).sum())
    assert totals.tolist() == [10, 20]
