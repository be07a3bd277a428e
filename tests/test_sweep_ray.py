"""The Ray backend: the same sweep gives the same merged frames as the local process pool."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from vivarium import Experiment
from vivarium.errors import SweepWarning
from vivarium.sweep import SWEEP_FRAMES, Sweep, run_sweep

ray = pytest.importorskip(
    "ray", reason="Ray is not installed (pip install 'vivarium-lab[scale]' or 'ray>=2.9')"
)

BASE = Experiment(name="ray", agents=3, steps=10, seed=21, checkpoint_every=4)
GRID = {"agents": [2, 3], "order": ["sorted", "shuffle"]}


@pytest.fixture
def ray_local(ray_once: object) -> None:
    """The test process's one local Ray (``tests.conftest.ray_once``: never restarted)."""


def assert_same(a: Sweep, b: Sweep) -> None:
    for name in SWEEP_FRAMES:
        assert a.to_polars(name).equals(b.to_polars(name)), name
    pd.testing.assert_frame_equal(a.actions, b.actions)
    cols = ["run", "run_id", "replication", "seed", *a.params, "status", "error"]
    pd.testing.assert_frame_equal(a.index[cols], b.index[cols])


def test_local_and_ray_give_identical_merged_frames(ray_local: None, tmp_path: Path) -> None:
    local = run_sweep(BASE, GRID, folder=tmp_path / "local", max_workers=2, replications=2)
    on_ray = run_sweep(
        BASE, GRID, folder=tmp_path / "ray", backend="ray", max_workers=2, replications=2
    )
    assert local.ok and on_ray.ok and len(on_ray) == 8
    assert_same(local, on_ray)
    assert list(on_ray.actions.columns[:6]) == [
        "run_id",
        "run",
        "replication",
        "seed",
        "agents",
        "order",
    ]
    # a second pass on Ray runs nothing again
    again = run_sweep(BASE, GRID, folder=tmp_path / "ray", backend="ray", replications=2)
    assert list(again.index["attempts"]) == [1] * 8
    assert_same(on_ray, again)


def test_a_failing_run_on_ray_is_recorded(ray_local: None, tmp_path: Path) -> None:
    base = Experiment(name="rayfail", world="ecology", agents=2, steps=3, seed=1)
    grid = {"world_options": [{}, {"no_such_option": 1}]}
    with pytest.warns(SweepWarning, match="1 of 2 runs failed; first: run 1 .*no_such_option"):
        sweep = run_sweep(base, grid, folder=tmp_path / "fail", backend="ray", max_workers=2)
    index = sweep.index
    assert list(index["status"]) == ["complete", "failed"]
    assert "no_such_option" in index.loc[1, "error"]
    assert "\n" not in index.loc[1, "error"]
    assert set(sweep.actions["run"]) == {0}
    assert list(index["world_options"]) == ["{}", '{"no_such_option":1}']


def test_a_class_defined_in_a_notebook_cell_runs_on_ray(ray_local: None, tmp_path: Path) -> None:
    # A notebook cell's classes live in a module named __main__, which Ray's workers never
    # import: the world and policy must travel by value.
    from vivarium.experiment.build import POLICIES, WORLDS

    cell = {"__name__": "__main__"}
    exec(CELL, cell)
    try:
        exp = Experiment(name="raycell", world="walls", policy="echo_ray", agents=2, steps=2)
        on_ray = run_sweep(exp, {"seed": [1, 2]}, folder=tmp_path / "ray", backend="ray")
        inline = run_sweep(exp, {"seed": [1, 2]}, folder=tmp_path / "in", backend="inline")
    finally:
        POLICIES.pop("echo_ray", None)
        WORLDS.pop("walls", None)
    assert on_ray.ok, on_ray.summary()
    assert sorted(on_ray.messages["content"]) == sorted(
        f"agent_00{a}@{t}" for a in range(2) for t in range(2) for _seed in (1, 2)
    )
    assert_same(on_ray, inline)


CELL = """
from vivarium.experiment.build import register_policy, register_world
from vivarium.types import ActionRequest
from vivarium.worlds.channel import InMemoryChannel

class Echo:
    def decide(self, *, run_id, time_step, agent_id, observation):
        return ActionRequest(run_id=run_id, time_step=time_step, agent_id=agent_id,
                             action_name="post_message",
                             arguments={"content": f"{agent_id}@{time_step}"})

class Walls(InMemoryChannel):
    pass

register_policy("echo_ray", lambda config, agent, shared: Echo())
register_world("walls", lambda config, plan, shared: Walls())
"""


def test_a_script_without_main_guard_sweeps_its_own_policy_on_ray(tmp_path: Path) -> None:
    # The user's script starts Ray itself (run_sweep does), as a new user's would.
    from tests.test_sweep import USER_VALUES, run_user_code

    out = run_user_code(tmp_path, "file", backend="ray")
    assert out.returncode == 0, out.stderr
    assert "SUMMARY sweep user: 2 runs: 2 complete" in out.stdout, out.stdout + out.stderr
    assert USER_VALUES in out.stdout
    assert out.stdout.count("SCRIPT STARTED") == 1
