"""Sweeps of worlds and policies given as Python objects defined where workers cannot import them.

A notebook cell's classes live in a module named ``__main__`` (or, in some kernels, in a module
made at run time with no file behind it): the sweep sends them to its workers by value.
"""

from __future__ import annotations

import json
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

from vivarium import Experiment
from vivarium.sweep import Sweep

CELL = textwrap.dedent(
    """
    import hashlib
    from vivarium.types import ActionRequest, ActionResult

    class Tally:
        def __init__(self, agent_ids, start=0):
            self.total = start
        def observe(self, agent_id, time_step):
            return {"time_step": time_step}
        def apply(self, request):
            self.total += request.arguments["amount"]
            return ActionResult.ok({"total": self.total})
        def state_digest(self):
            return hashlib.sha256(str(self.total).encode()).hexdigest()

    class Adder:
        def __init__(self, amount=1):
            self.amount = amount
        def decide(self, *, run_id, time_step, agent_id, observation):
            return ActionRequest(run_id=run_id, time_step=time_step, agent_id=agent_id,
                                 action_name="add", arguments={"amount": self.amount})
    """
)


def cell_in_main() -> dict[str, Any]:
    """The cell run as a notebook runs it: in a namespace whose module is ``__main__``."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(CELL, namespace)
    assert namespace["Tally"].__module__ == "__main__"
    return namespace


def totals_by_run(sweep: Sweep) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for run, rows in sweep.actions.groupby("run"):
        out[int(run)] = [json.loads(r)["total"] for r in rows["result"]]
    return out


def experiment(ns: dict[str, Any]) -> Experiment:
    return Experiment(
        name="cell",
        world=ns["Tally"],
        policy=ns["Adder"],
        agents=2,
        steps=3,
        world_options={"start": 1},
        policy_options={"amount": 3},
    )


EXPECTED = [1 + 3 * i for i in range(1, 7)]  # 2 agents x 3 steps adding 3, from 1


def test_classes_of_a_notebook_cell_run_in_a_local_sweep(tmp_path: Path) -> None:
    sweep = experiment(cell_in_main()).sweep(seed=[1, 2], folder=tmp_path / "s", max_workers=2)
    assert sweep.ok, sweep.summary()
    assert totals_by_run(sweep) == {0: EXPECTED, 1: EXPECTED}


def test_classes_of_a_module_made_at_run_time_run_in_a_local_sweep(tmp_path: Path) -> None:
    # An IPython-like namespace: a module in sys.modules with no file a worker could import.
    module = types.ModuleType("notebook_cell_w1")
    sys.modules[module.__name__] = module
    try:
        exec(CELL, module.__dict__)
        assert module.Tally.__module__ == "notebook_cell_w1"
        ns = vars(module)
        sweep = experiment(ns).sweep(seed=[1, 2], folder=tmp_path / "s", max_workers=2)
    finally:
        del sys.modules[module.__name__]
    assert sweep.ok, sweep.summary()
    assert totals_by_run(sweep) == {0: EXPECTED, 1: EXPECTED}


def test_a_world_instance_starts_every_sweep_run_afresh(tmp_path: Path) -> None:
    ns = cell_in_main()
    world = ns["Tally"]([], start=10)
    exp = Experiment(world=world, policy=ns["Adder"], agents=2, steps=2)
    expected = [11, 12, 13, 14]
    for backend in ("local", "inline"):
        sweep = exp.sweep(seed=[1, 2], folder=tmp_path / backend, backend=backend)
        assert sweep.ok, sweep.summary()
        assert totals_by_run(sweep) == {0: expected, 1: expected}, backend


def test_a_sweep_axis_of_policy_classes(tmp_path: Path) -> None:
    ns = cell_in_main()

    class Double(ns["Adder"]):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__(amount=2)

    exp = Experiment(world=ns["Tally"], agents=1, steps=2)
    sweep = exp.sweep(policy=[ns["Adder"], Double], folder=tmp_path / "s", max_workers=2)
    assert sweep.ok, sweep.summary()
    assert totals_by_run(sweep) == {0: [1, 2], 1: [2, 4]}


@pytest.fixture
def ray_local(ray_once: Any) -> Any:
    """The test process's one local Ray (``tests.conftest.ray_once``: never restarted)."""
    return ray_once


def test_classes_of_a_notebook_cell_run_on_ray(ray_local: Any, tmp_path: Path) -> None:
    exp = experiment(cell_in_main())
    on_ray = exp.sweep(seed=[1, 2], folder=tmp_path / "ray", backend="ray", max_workers=2)
    inline = exp.sweep(seed=[1, 2], folder=tmp_path / "in", backend="inline")
    assert on_ray.ok, on_ray.summary()
    assert totals_by_run(on_ray) == {0: EXPECTED, 1: EXPECTED}
    assert on_ray.actions.equals(inline.actions)
