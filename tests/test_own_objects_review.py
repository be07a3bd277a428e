"""Review mends of objects given without registration: names that cannot mix up two objects,
that stay the same across processes, instances that every run starts from, one-line misuse."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.support.own_objects_models import Adder, Tally
from vivarium import Experiment
from vivarium.errors import ConfigError
from vivarium.types import ActionRequest, ActionResult


def _adder_of(amount: int) -> type:
    class Fixed:  # one qualname for every amount: only the closure differs
        def decide(self, *, run_id: str, time_step: int, agent_id: str, observation: Any):  # noqa: ANN201
            return ActionRequest(
                run_id=run_id, time_step=time_step, agent_id=agent_id,
                action_name="add", arguments={"amount": amount},
            )  # fmt: skip

    return Fixed


def test_two_classes_of_one_name_are_two_objects(tmp_path: Path) -> None:
    """Classes made by one factory share a qualname; each run must run its own class."""
    one = Experiment(name="one", world=Tally, policy=_adder_of(1), agents=2, steps=3)
    hundred = Experiment(name="hundred", world=Tally, policy=_adder_of(100), agents=2, steps=3)
    assert one.config.resolved_run_id() != hundred.config.resolved_run_id()
    run = one.run(tmp_path / "one.sqlite", progress=False)
    totals = [r for r in run.actions["result"] if r]
    assert totals[-1] == '{"total":6}'  # 3 steps x 2 agents x 1, not x 100


SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from vivarium import Experiment
from tests.support.own_objects_models import Tally
source = '''
class Keeper:
    def __init__(self):
        self.allowed = {{"alpha", "beta", "gamma", "delta"}}
    def decide(self, *, run_id, time_step, agent_id, observation):
        from vivarium.types import ActionRequest
        return ActionRequest(run_id=run_id, time_step=time_step, agent_id=agent_id,
                             action_name="noop")
'''
namespace = {{"__name__": "__main__"}}
exec(source, namespace)
exp = Experiment(world=Tally, policy=namespace["Keeper"](), agents=2, steps=1)
print(exp.config.policy, exp.config.resolved_run_id())
"""


def test_a_class_without_source_is_named_the_same_in_every_process(tmp_path: Path) -> None:
    """A class made by ``exec`` (as in a notebook kernel, where there is no source file) and
    an instance holding a set get the same name under any hash seed and in any process, so a
    new kernel can resume their run."""
    script = tmp_path / "name.py"
    script.write_text(SCRIPT.format(root=str(ROOT)))
    names = set()
    for seed in ("1", "2", "3"):
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=120,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        names.add(done.stdout.strip())
    assert len(names) == 1


def test_every_run_of_a_world_instance_starts_from_its_state_when_named(tmp_path: Path) -> None:
    """A world instance passed to two experiments: the second starts where the first did."""
    world = Tally([f"agent_{i:03d}" for i in range(2)], steps=2, start=5)
    first = Experiment(name="a", world=world, policy=Adder, agents=2, steps=2)
    first.run(tmp_path / "a.sqlite", progress=False)
    second = Experiment(name="b", world=world, policy=Adder, agents=2, steps=2)
    assert second.config.world == first.config.world
    run = second.run(tmp_path / "b.sqlite", progress=False)
    assert [r for r in run.actions["result"] if r][-1] == '{"total":9}'  # 5 + 2 x 2 x 1


class _NeedsMap:
    def __init__(self, agent_ids: list[str], map_file: str) -> None:  # nobody supplies map_file
        self.agent_ids = agent_ids

    def observe(self, agent_id: str, time_step: int) -> dict:
        return {}

    def apply(self, request: ActionRequest) -> ActionResult:
        return ActionResult.ok()

    def state_digest(self) -> str:
        return ""


def test_a_world_that_needs_an_argument_nobody_gives_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="world _NeedsMap: missing a required argument"):
        Experiment(world=_NeedsMap, policy=Adder, agents=2, steps=1).run(tmp_path / "x.sqlite")
    with pytest.raises(ConfigError, match="policy Adder: got an unexpected keyword"):
        Experiment(
            world=Tally, policy=Adder, agents=2, steps=1, policy_options={"colour": "red"}
        ).run(tmp_path / "y.sqlite")


class _Shuffling(Tally):
    """Keeps its own agent list and shuffles it every step, as Mesa's models do."""

    agent_reporters = {"mine": lambda w: [int(a[-3:]) for a in w.agent_ids]}

    def apply(self, request: ActionRequest) -> ActionResult:
        self.agent_ids.reverse()  # a new order after every action
        return super().apply(request)


def test_agent_reporters_follow_a_world_that_reorders_its_agents(tmp_path: Path) -> None:
    """Values in the world's own order land on their agents at every step."""
    run = Experiment(world=_Shuffling, policy=Adder, agents=3, steps=3).run(
        tmp_path / "s.sqlite", progress=False
    )
    rows = run.agent_vars
    assert len(rows) == 4 * 3
    assert (rows["mine"] == rows["agent_id"].str[-3:].astype(int)).all()
