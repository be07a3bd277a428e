"""What a run is: its identity covers the user code it runs and every value that code reads.

The property (``vivarium.experiment.digest``): two runs get the same run id only if nothing they read
differs, wherever the value lives (a module global, a closure, a class attribute, an object's
attribute, a reporter's global, a registered factory's global), and a sweep hands back a stored
run only when the whole identity matches. The expected equality is computed here by a strict
structural comparison of the values, not by the digest under test.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.public_goods import notebook
from vivarium import Experiment
from vivarium.errors import IdentityWarning
from vivarium.experiment.build import POLICIES, register_policy

ROOT = Path(__file__).resolve().parents[1]

# A notebook: the cell below runs in a ``__main__`` namespace with no source file, as a kernel's.
NOTEBOOK = textwrap.dedent(
    """
    from vivarium.types import ActionRequest, ActionResult

    G = None          # a module global the world reads
    class Holder:     # a user object whose attribute the world reads
        def __init__(self, value):
            self.value = value
    HELD = Holder(None)

    class Pot:
        TABLE = {"g": None}   # a class attribute the world reads
        def __init__(self, agent_ids, seed):
            self.pot = 0
        def observe(self, agent_id, time_step):
            return {}
        def apply(self, request):
            self.pot += len(repr((G, HELD.value, Pot.TABLE["g"])))
            return ActionResult.ok()
        def state_digest(self):
            return str(self.pot)

    def pot_of(value):  # a class made by a factory: the value in its closure
        class Closed(Pot):
            def apply(self, request):
                self.pot += len(repr(value))
                return ActionResult.ok()
        return Closed

    class Noop:
        def decide(self, *, run_id, time_step, agent_id, observation):
            return ActionRequest(run_id=run_id, time_step=time_step, agent_id=agent_id,
                                 action_name="noop")

    def registered(config, agent, shared):  # a registered factory reading G through Noop2
        return Noop2()

    class Noop2(Noop):
        def decide(self, *, run_id, time_step, agent_id, observation):
            G  # read: part of what the policy does
            return super().decide(run_id=run_id, time_step=time_step, agent_id=agent_id,
                                  observation=observation)
    """
)


def _notebook() -> dict[str, Any]:
    cell: dict[str, Any] = {"__name__": "__main__"}
    exec(NOTEBOOK, cell)
    return cell


# -- the oracle: equal for a run only when equal in type, order and every item -----------------
def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return repr(a) == repr(b)  # -0.0 is not 0.0; nan is nan
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=3),
    st.integers(min_value=2**62, max_value=2**65),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.sampled_from([0.0, -0.0, 1.0, 1]),
    st.text(max_size=3),
)
_arrays = st.builds(
    lambda xs, dtype: np.array(xs, dtype=dtype),
    st.lists(st.integers(0, 3), min_size=0, max_size=4),
    st.sampled_from(["int64", "int32", "float64"]),
)
_values = st.recursive(
    st.one_of(_scalars, _arrays),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3),
    ),
    max_leaves=6,
)
_WHERE = ("global", "object attribute", "class attribute", "closure", "registered factory")


def _run_id(cell: dict[str, Any], where: str, value: Any) -> str:
    """The run id of the notebook's experiment with ``value`` placed ``where``."""
    if where == "global":
        cell["G"] = value
        return Experiment(world=cell["Pot"], policy=cell["Noop"], agents=1, steps=1).run_id
    if where == "object attribute":
        cell["HELD"].value = value
        return Experiment(world=cell["Pot"], policy=cell["Noop"], agents=1, steps=1).run_id
    if where == "class attribute":
        cell["Pot"].TABLE["g"] = value  # mutated in place, as a notebook does
        return Experiment(world=cell["Pot"], policy=cell["Noop"], agents=1, steps=1).run_id
    if where == "closure":
        world = cell["pot_of"](value)
        return Experiment(world=world, policy=cell["Noop"], agents=1, steps=1).run_id
    cell["G"] = value
    register_policy("identity_t", cell["registered"])
    try:
        return Experiment(policy="identity_t", agents=1, steps=1).run_id
    finally:
        POLICIES.pop("identity_t", None)


@settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(a=_values, b=_values, where=st.sampled_from(_WHERE), copy_b=st.booleans())
def test_the_run_id_changes_exactly_when_a_value_the_code_reads_changes(
    a: Any, b: Any, where: str, copy_b: bool
) -> None:
    import copy

    if copy_b:  # an equal value in another object: the same run
        b = copy.deepcopy(a)
    cell = _notebook()
    first = _run_id(cell, where, a)
    second = _run_id(cell, where, b)
    assert (first == second) == _same(a, b), (where, a, b)
    assert _run_id(cell, where, a) == first  # and back again: the first run's id


def test_a_value_changed_after_the_experiment_was_made_names_a_new_run() -> None:
    """The notebook case: ``exp`` made once, then the global changed, then ``exp`` used again."""
    cell = _notebook()
    cell["G"] = 1.5
    exp = Experiment(world=cell["Pot"], policy=cell["Noop"], agents=1, steps=1)
    before = exp.run_id
    cell["G"] = 3.0
    assert exp.run_id != before
    cell["G"] = 1.5
    assert exp.run_id == before


def test_an_array_changed_in_place_names_a_new_run() -> None:
    cell = _notebook()
    cell["G"] = np.zeros(3)
    exp = Experiment(world=cell["Pot"], policy=cell["Noop"], agents=1, steps=1)
    before = exp.run_id
    cell["G"][1] = 2.0
    assert exp.run_id != before


def test_experiment_reporters_are_part_of_the_identity() -> None:
    cell = _notebook()
    cell["SCALE"] = 2
    reporter = eval("lambda world: world.pot * SCALE", cell)  # noqa: S307 - a notebook's lambda
    exp = Experiment(
        world=cell["Pot"], policy=cell["Noop"], agents=1, steps=1,
        model_reporters={"scaled": reporter},
    )  # fmt: skip
    plain = Experiment(world=cell["Pot"], policy=cell["Noop"], agents=1, steps=1)
    before = exp.run_id
    assert before != plain.run_id  # what it records is part of the run
    cell["SCALE"] = 3
    assert exp.run_id != before


def test_a_value_that_cannot_be_digested_is_said_once_and_never_reused(tmp_path: Path) -> None:
    cell = _notebook()
    cell["G"] = (x for x in range(3))  # a generator: nothing tells when it changes
    with pytest.warns(IdentityWarning, match=r"cannot be digested") as said:
        exp = Experiment(world=cell["Pot"], policy=cell["Noop"], agents=1, steps=2)
        first = exp.sweep(seed=[1], folder=tmp_path / "s", backend="inline", progress=False)
    assert len([w for w in said if issubclass(w.category, IdentityWarning)]) == 1
    assert "G" in str(said[0].message) and "generator" in str(said[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error", IdentityWarning)  # said once: not again
        second = exp.sweep(seed=[1], folder=tmp_path / "s", backend="inline", progress=False)
    assert list(first.index["action"]) == ["ran"]
    assert list(second.index["action"]) == ["ran"]  # run again, never handed back
    assert "opaque_inputs" in second.runs[0].metadata["config"]


def test_library_values_count_by_value_and_process_bound_ones_by_type() -> None:
    from vivarium.experiment.digest import digest_code
    from vivarium.gateways.stack import GatewaySettings, build_gateway

    cell = _notebook()
    cell["G"] = build_gateway(GatewaySettings(mock=True), seed=1)  # a process-bound stack
    one = digest_code(cell["Pot"])
    cell["G"] = build_gateway(GatewaySettings(mock=True), seed=1)
    assert digest_code(cell["Pot"]).digest == one.digest and not one.opaque
    cell["G"] = Path("a.csv")  # a library value: by its pickle bytes
    a = digest_code(cell["Pot"]).digest
    cell["G"] = Path("b.csv")
    assert digest_code(cell["Pot"]).digest != a


def test_user_code_held_by_a_library_object_counts_by_its_code() -> None:
    """An action registry (a library object) holds the user's handler: its code and reads count."""
    from vivarium.experiment.digest import digest_code

    cell: dict[str, Any] = {"__name__": "__main__"}
    exec(
        textwrap.dedent(
            """
            from pydantic import BaseModel
            from vivarium.types import ActionResult
            from vivarium.worlds.registry import ActionRegistry
            K = 1
            class Args(BaseModel):
                x: int = 0
            ACTIONS = ActionRegistry()
            @ACTIONS.action("act", "Act.", Args)
            def act(world, request, args):
                return ActionResult.ok(K)
            class World:
                registry = ACTIONS
            """
        ),
        cell,
    )
    one = digest_code(cell["World"])
    assert not one.opaque and "act.K" in one.reads
    cell["K"] = 2
    assert digest_code(cell["World"]).digest != one.digest


_PROCESS_SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from vivarium import Experiment
cell = {{"__name__": "__main__"}}
exec({notebook!r}, cell)
import collections
cell["G"] = {{"b": {{3, 1, 2}}, "a": frozenset({{"x", "y"}}), "c": 1.5,
             "d": collections.deque([{{"p", "q", "r", "s"}}])}}  # a set inside a library object
print(Experiment(world=cell["Pot"], policy=cell["Noop"], agents=1, steps=1).run_id)
"""


def test_the_same_code_and_values_give_the_same_id_in_every_process(tmp_path: Path) -> None:
    script = tmp_path / "ids.py"
    script.write_text(_PROCESS_SCRIPT.format(root=str(ROOT), notebook=NOTEBOOK))
    ids = set()
    for seed in ("0", "1", "2"):
        out = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
        )
        assert out.returncode == 0, out.stderr
        ids.add(out.stdout.strip())
    assert len(ids) == 1, ids


# -- sweeps hand back a stored run only when the whole identity matches ---------------------
@settings(max_examples=8, deadline=None, derandomize=True)
@given(rates=st.lists(st.sampled_from([1.0, 1.5, 3.0]), min_size=2, max_size=4))
def test_a_sweep_hands_back_only_results_of_the_values_now(
    rates: list[float], tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("sweep")
    cell = notebook(gift="t + 1")
    exp = Experiment(world=cell["PublicGoods"], policy=cell["Give"], agents=2, steps=3)
    for rate in rates:
        cell["R"] = rate
        sweep = exp.sweep(seed=range(2), folder=folder, backend="inline", progress=False)
        final = sweep.model_vars[sweep.model_vars["step"] == 2]["pot"].tolist()
        # two agents give 1, 2 and 3 at steps 0, 1 and 2: the pot is 12 R in every run
        assert all(math.isclose(pot, 12 * rate) for pot in final), (rate, final)
