"""Worlds and policies given as classes, factories and instances, never registered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.own_objects_models import Adder, Tally, make_tally
from vivarium import Experiment
from vivarium.errors import ConfigError
from vivarium.experiment.objects import OBJECTS, display_name
from vivarium.facade import Run


def totals(run: Run) -> list[int]:
    """The running total after each successful ``add``, in commit order."""
    rows = run.actions[run.actions["action"] == "add"]
    return [json.loads(r)["total"] for r in rows["result"]]


def test_a_class_world_and_class_policy_run(tmp_path: Path) -> None:
    exp = Experiment(
        world=Tally,
        policy=Adder,
        agents=3,
        steps=4,
        seed=7,
        world_options={"start": 10},
        policy_options={"amount": 2},
    )
    run = exp.run(tmp_path / "t.sqlite")
    # 3 agents add 2 each step for 4 steps, from 10: every partial sum, in order.
    assert totals(run) == [10 + 2 * i for i in range(1, 13)]
    args = [json.loads(a) for a in run.actions["arguments"]]
    # each agent got its own seed from the plan: the one the trace's agents table records
    recorded = dict(zip(run.agents["agent_id"], run.agents["seed"], strict=True))
    for agent_id, a in zip(run.actions["agent_id"], args, strict=True):
        assert a["seed"] == int(recorded[agent_id])  # (the frame holds u64 seeds as text)
    assert len(set(recorded.values())) == 3
    assert set(run.agents["policy"]) == {"Adder"}
    assert exp.config.world.startswith("tests.support.own_objects_models.Tally@")
    assert display_name(exp.config.world) == "Tally"


def test_a_factory_gets_only_the_keywords_it_names(tmp_path: Path) -> None:
    run = Experiment(
        world=make_tally, policy=Adder, agents=2, steps=3, world_options={"start": 5}
    ).run(tmp_path / "f.sqlite")
    assert totals(run) == [6, 7, 8, 9, 10, 11]


def test_instances_a_world_used_as_is_and_a_policy_copied_per_agent(tmp_path: Path) -> None:
    import random

    world = Tally(["agent_000", "agent_001"], steps=3, start=100)
    policy = Adder("template", seed=1, rng=random.Random(1), amount=5)
    exp = Experiment(world=world, policy=policy, agents=2, steps=3)
    run = exp.run(tmp_path / "i.sqlite")
    assert totals(run) == [100 + 5 * i for i in range(1, 7)]
    assert world.total == 130  # the very instance ran
    # a second run starts from the world as it was named, not from where the first ended
    again = exp.run(tmp_path / "i2.sqlite")
    assert totals(again) == totals(run)
    assert world.total == 130


def test_groups_mix_a_class_and_a_name(tmp_path: Path) -> None:
    exp = Experiment(
        world=Tally,
        agents=[
            {"policy": Adder, "count": 2, "policy_options": {"amount": 3}},
            {"policy": "random", "count": 1, "id": "rnd"},
        ],
        steps=2,
    )
    run = exp.run(tmp_path / "g.sqlite")
    policies = dict(zip(run.agents["agent_id"], run.agents["policy"], strict=True))
    assert sorted(policies.values()) == ["Adder", "Adder", "random"]
    adds = run.actions[run.actions["action"] == "add"]
    assert set(adds["agent_id"]) == {a for a, p in policies.items() if p == "Adder"}
    assert totals(run) == [3, 6, 9, 12]


def test_names_still_work_and_keep_their_run_id() -> None:
    # the id of a run of names only does not depend on the new fields
    plain = Experiment(agents=3, steps=5, seed=1)
    assert "policy_options" not in plain.config.identity()
    groups = Experiment(agents=[{"policy": "random", "count": 2}], steps=5)
    assert "policy_options" not in groups.config.identity()["agents"][0]
    assert plain.config.world == "channel" and plain.config.policy == "random"


def test_an_unknown_name_says_did_you_mean() -> None:
    with pytest.raises(ConfigError) as err:
        Experiment(world="ecolgy", policy="radnom").run()
    message = str(err.value)
    assert "\n" not in message
    assert "unknown world 'ecolgy'" in message and "did you mean 'ecology'?" in message
    assert "unknown policy 'radnom'" in message and "did you mean 'random'?" in message
    with pytest.raises(ConfigError, match=r"^config: world: unknown world 'zz' \(known: [^;]*\)$"):
        Experiment(world="zz").run()


def test_an_object_reference_without_its_object_says_to_pass_it_again(tmp_path: Path) -> None:
    exp = Experiment(world=Tally, policy=Adder, agents=1, steps=1)
    entry = OBJECTS.pop(exp.config.world)
    try:
        with pytest.raises(ConfigError, match="given as a Python object.*Experiment\\(world=Tally"):
            Experiment(exp.config).run(tmp_path / "x.sqlite")
    finally:
        OBJECTS[exp.config.world] = entry


def test_not_a_world_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="^world: a world is a name, a class, a factory"):
        Experiment(world=42)


RUN_ID_SCRIPT = """
import sys
sys.path.insert(0, {folder!r})
from mymodel import World, Policy
from vivarium import Experiment
print(Experiment(world=World, policy=Policy, agents=2, steps=3, seed=1).run_id)
"""

MODEL_V1 = """
class World:
    def observe(self, agent_id, time_step):
        return {}
class Policy:
    def decide(self, **kw):
        return None
"""


def _run_id_in_a_new_process(folder: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-c", RUN_ID_SCRIPT.format(folder=str(folder))],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "random"},
        timeout=120,
    )
    return out.stdout.strip()


def test_the_run_id_is_stable_across_processes_and_follows_the_source(tmp_path: Path) -> None:
    model = tmp_path / "mymodel.py"
    model.write_text(MODEL_V1)
    first, second = _run_id_in_a_new_process(tmp_path), _run_id_in_a_new_process(tmp_path)
    assert first == second and first.startswith("experiment-")
    model.write_text(MODEL_V1.replace("return {}", "return {'edited': True}"))
    assert _run_id_in_a_new_process(tmp_path) != first


SCRIPT = textwrap.dedent(
    """
    # A user's script: no main guard, its own world and policy, a local sweep of 2 runs.
    import hashlib
    from vivarium import Experiment
    from vivarium.types import ActionRequest, ActionResult

    print("SCRIPT STARTED")

    class Tally:
        def __init__(self, agent_ids, start=0):
            self.total = start
        def observe(self, agent_id, time_step):
            return {}
        def apply(self, request):
            self.total += request.arguments["amount"]
            return ActionResult.ok({"total": self.total})
        def state_digest(self):
            return hashlib.sha256(str(self.total).encode()).hexdigest()

    def adder(agent_id, amount=1):
        class Adder:
            def decide(self, *, run_id, time_step, agent_id, observation):
                return ActionRequest(run_id=run_id, time_step=time_step, agent_id=agent_id,
                                     action_name="add", arguments={"amount": amount})
        return Adder()

    exp = Experiment(name="own", world=Tally, policy=adder, agents=2, steps=3,
                     world_options={"start": 1}, policy_options={"amount": 4})
    sweep = exp.sweep(seed=[1, 2], folder=FOLDER, max_workers=2, progress=False)
    print("OK", sweep.ok, list(sweep.index["status"]))
    import json
    for run, rows in sweep.actions.groupby("run"):
        print("TOTALS", run, [json.loads(r)["total"] for r in rows["result"]])
    """
)


def test_a_script_without_main_guard_sweeps_its_own_classes(tmp_path: Path) -> None:
    script = tmp_path / "my_model.py"
    script.write_text(SCRIPT.replace("FOLDER", repr(str(tmp_path / "sweep"))))
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "VIVARIUM_PROGRESS": "0"},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "OK True ['complete', 'complete']" in out.stdout, out.stdout + out.stderr
    expected = [1 + 4 * i for i in range(1, 7)]  # 2 agents x 3 steps, 4 each, from 1
    assert f"TOTALS 0 {expected}" in out.stdout and f"TOTALS 1 {expected}" in out.stdout
    assert out.stdout.count("SCRIPT STARTED") == 1  # no worker ran the script again


def test_resume_needs_the_objects_again_and_goes_on_with_them(tmp_path: Path) -> None:
    exp = Experiment(world=Tally, policy=Adder, agents=2, steps=6, checkpoint_every=2)

    def stop(step: int, _record: object) -> None:
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(BaseException):  # noqa: B017  (the run ends as interrupted)
        exp.run(tmp_path / "r.sqlite", on_step=stop)
    saved = dict(OBJECTS)
    OBJECTS.clear()  # as a new process: the objects are not known
    try:
        run = Run.open(tmp_path / "r.sqlite")
        with pytest.raises(ConfigError, match=r"pass it again.*Run\.resume\(world=Tally\)"):
            run.resume()
        done = run.resume(world=Tally, policy=Adder)
    finally:
        OBJECTS.update(saved)
    assert done.metadata["status"] == "complete"
    assert totals(done) == list(range(1, 13))
    assert totals(done) == totals(exp.run(tmp_path / "whole.sqlite"))


def test_the_panel_shows_an_object_by_its_class_name_and_runs_it(tmp_path: Path) -> None:
    pytest.importorskip("ipywidgets")
    exp = Experiment(world=Tally, policy=Adder, agents=2, steps=2)
    panel = exp.controls(folder=tmp_path)
    assert panel.world.label == "Tally" and panel.world.value == exp.config.world
    assert panel.policy.label == "Adder" and panel.policy.value == exp.config.policy
    assert ("channel", "channel") in panel.world.options  # the names are offered still
    assert panel.config().run_id is None and panel.config().world == exp.config.world
    run = panel.run()
    assert run is not None and totals(run) == [1, 2, 3, 4]
