"""Mesa's Boltzmann (grid) and Schelling models written with the public API, both paths.

The models live in ``benchmarks/own_models.py`` (the benchmark against Mesa imports them too).
What is checked:

- the same seed gives the same trace twice on the per-agent path (state hashes, actions);
- total wealth is conserved at every step on both paths (from the ``agent_vars`` frame);
- the batched and per-agent Boltzmann paths agree in distribution. They draw their random
  numbers differently (one generator per agent vs one numpy generator for all), so their
  traces differ run by run; what must agree is the Gini coefficient's distribution. Over 30
  seeds each, we compare the two samples of final Gini with Welch's t-test and a two-sample
  Kolmogorov-Smirnov test (scipy), both at alpha = 0.001 (a false alarm about once in 1,000
  runs of the suite per test), and require the means to lie within 0.03 of each other. As an
  anchor independent of our code, both means must also lie within 0.05 of Mesa's own
  ``BoltzmannWealth`` over the same 30 seeds (its mean is about 0.63 after 60 steps);
- Schelling's share of happy agents rises on both paths and they end in the same range.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import own_models as om  # noqa: E402

from vivarium import Experiment  # noqa: E402

SEEDS = range(30)
STEPS = 60
GRID = {"width": 10, "height": 10}


def _boltzmann(
    tmp_path: Path,
    batched: bool,
    seed: int,
    steps: int = STEPS,
    name: str = "b",
    order: str | None = None,
):
    """A run as the benchmark makes it: batched, the policy draws the agents' order."""
    world = om.BatchBoltzmannWorld if batched else om.BoltzmannGridWorld
    policy = om.BatchBoltzmannPolicy if batched else om.BoltzmannGridPolicy
    return Experiment(
        world=world,
        policy=policy,
        agents=100,
        steps=steps,
        seed=seed,
        order=order or ("sorted" if batched else "shuffle"),
        world_options=GRID,
    ).run(tmp_path / f"{name}-{int(batched)}-{seed}-{order}.sqlite", progress=False)


def _gini(values: np.ndarray) -> float:
    """Mesa's formula, restated here so that the test does not trust ``om.gini``."""
    x = sorted(int(v) for v in values)
    n = len(x)
    b = sum(xi * (n - i) for i, xi in enumerate(x)) / (n * sum(x))
    return 1 + 1 / n - 2 * b


def test_same_seed_same_trace_per_agent(tmp_path: Path) -> None:
    a = _boltzmann(tmp_path, False, 7, steps=20, name="first")
    b = _boltzmann(tmp_path, False, 7, steps=20, name="second")
    assert a.run_id == b.run_id
    assert a.steps["state_hash"].tolist() == b.steps["state_hash"].tolist()
    cols = ["step", "agent_id", "action", "arguments", "success"]
    assert a.actions[cols].equals(b.actions[cols])
    # And a different seed gives a different trace.
    c = _boltzmann(tmp_path, False, 8, steps=20, name="third")
    assert c.steps["state_hash"].tolist() != a.steps["state_hash"].tolist()


def test_per_agent_decisions_follow_the_rules(tmp_path: Path) -> None:
    """Every move goes to a neighbouring cell; every give goes to an agent in that cell."""
    run = _boltzmann(tmp_path, False, 3, steps=15)
    actions = run.actions
    assert set(actions["action"]) == {"move"}
    assert actions["success"].astype(bool).all()
    av = run.agent_vars.set_index(["step", "agent_id"])
    gives = 0
    for row in actions.itertuples():
        args = json.loads(row.arguments)
        before = av.loc[(row.step - 1, row.agent_id)]
        to = args["to"]
        x, y = to % 10, to // 10
        assert max(abs(x - before["x"]), abs(y - before["y"])) == 1
        if "give_to" in args:
            gives += 1
            mate = av.loc[(row.step, args["give_to"])]
            # The receiver was in that cell at the giver's turn: there at the step's end, or
            # it moved away later in the step (then it was there at the start of it).
            start = av.loc[(row.step - 1, args["give_to"])]
            assert (mate["x"], mate["y"]) == (x, y) or (start["x"], start["y"]) == (x, y)
    assert gives > 0


@pytest.mark.parametrize(
    ("batched", "order"), [(False, "shuffle"), (True, "sorted"), (True, "shuffle")]
)
def test_total_wealth_is_conserved_every_step(tmp_path: Path, batched: bool, order: str) -> None:
    run = _boltzmann(tmp_path, batched, 5, steps=30, order=order)
    totals = run.agent_vars.groupby("step")["wealth"].sum()
    assert len(totals) == 31  # the initial state, then every step
    assert (totals == 100).all()
    assert (run.agent_vars["wealth"] >= 0).all()
    # The Gini reporter is Mesa's formula on the recorded wealth.
    last = run.agent_vars[run.agent_vars["step"] == 29]["wealth"].to_numpy()
    assert run.model_vars["gini"].iloc[-1] == pytest.approx(_gini(last))


def _gives_one_by_one(agents: np.ndarray, wealth: np.ndarray, mate: np.ndarray) -> np.ndarray:
    """Mesa's rule as a plain loop: in position order, give one unit to the mate if you can."""
    wealth = wealth.copy()
    gave = np.zeros(len(agents), dtype=bool)
    for k, (agent, to) in enumerate(zip(agents.tolist(), mate.tolist(), strict=True)):
        if to >= 0 and wealth[agent] > 0:
            wealth[agent] -= 1
            wealth[to] += 1
            gave[k] = True
    return gave


def test_batched_gives_are_those_of_agents_giving_one_after_another() -> None:
    """The vectorised rule picks exactly the givers of the sequential loop, chains included."""
    rng = np.random.default_rng(11)
    chains = 0
    for _ in range(3000):
        n = int(rng.integers(1, 40))
        agents = rng.permutation(n)
        wealth = rng.integers(0, 3, n)
        mate = np.where(rng.random(n) < 0.8, rng.integers(0, n, n), -1)
        mate = np.where(mate == agents, -1, mate)
        expected = _gives_one_by_one(agents, wealth, mate)
        chains += int((expected & (wealth[agents] == 0)).sum())
        assert (om.sequential_gives(agents, wealth, mate) == expected).all()
    assert chains > 100  # broke agents that gave what they had just received were tested


def test_batched_records_every_decision(tmp_path: Path) -> None:
    run = _boltzmann(tmp_path, True, 2, steps=10)
    actions = run.actions
    assert len(actions) == 100 * 10
    assert set(actions["action"]) == {"wander"}
    results = actions["result"].map(json.loads)
    assert all(0 <= r["to"] < 100 for r in results)
    # Each recorded give matches a unit of wealth moved: the sum of gives per agent and step.
    av = run.agent_vars.set_index(["step", "agent_id"])["wealth"]
    for step in (3, 7):
        rows = actions[actions["step"] == step]
        change = {a: 0 for a in av.loc[step].index}
        for agent, r in zip(rows["agent_id"], results[rows.index], strict=True):
            if "give_to" in r:
                change[agent] -= 1
                change[r["give_to"]] += 1
        for agent, delta in change.items():
            assert av.loc[(step, agent)] - av.loc[(step - 1, agent)] == delta


def test_gini_distributions_agree(tmp_path: Path) -> None:
    stats = pytest.importorskip("scipy.stats")
    mesa_examples = pytest.importorskip("mesa.examples")
    per_agent = [_boltzmann(tmp_path, False, s).model_vars["gini"].iloc[-1] for s in SEEDS]
    batched = [_boltzmann(tmp_path, True, s).model_vars["gini"].iloc[-1] for s in SEEDS]
    assert stats.ttest_ind(per_agent, batched, equal_var=False).pvalue > 0.001
    assert stats.ks_2samp(per_agent, batched).pvalue > 0.001
    assert abs(np.mean(per_agent) - np.mean(batched)) < 0.03
    mesa = []
    for s in SEEDS:
        model = mesa_examples.BoltzmannWealth(n=100, width=10, height=10, seed=s)
        for _ in range(STEPS):
            model.step()
        mesa.append(_gini([a.wealth for a in model.agents]))
    for ours in (per_agent, batched):
        assert abs(np.mean(ours) - np.mean(mesa)) < 0.05


def _schelling(tmp_path: Path, batched: bool, seed: int):
    world = om.BatchSchellingWorld if batched else om.SchellingWorld
    policy = om.BatchSchellingPolicy if batched else om.SchellingPolicy
    return Experiment(
        world=world,
        policy=policy,
        agents=om.schelling_agents(20, 20, 0.8),
        steps=15,
        seed=seed,
        order="shuffle",
        world_options={"width": 20, "height": 20, "homophily": 0.6},
    ).run(tmp_path / f"s-{int(batched)}-{seed}.sqlite", progress=False)


def test_schelling_share_happy_rises_on_both_paths(tmp_path: Path) -> None:
    finals = {}
    for batched in (False, True):
        ends = []
        for seed in range(5):
            run = _schelling(tmp_path, batched, seed)
            share = run.model_vars["share_happy"].to_numpy()
            assert share[-1] > share[0] + 0.2  # starts near half happy, ends mostly happy
            # share_happy is the mean of the agents' own happy flags at each step.
            flags = run.agent_vars.groupby("step")["happy"].mean().to_numpy()
            np.testing.assert_allclose(flags, share)
            # Agents stay on distinct cells.
            last = run.agent_vars[run.agent_vars["step"] == run.agent_vars["step"].max()]
            assert not last.duplicated(["x", "y"]).any()
            ends.append(share[-1])
        finals[batched] = np.mean(ends)
    assert 0.8 < finals[False] <= 1.0
    assert 0.8 < finals[True] <= 1.0
    assert abs(finals[False] - finals[True]) < 0.1


def test_schelling_movers_were_unhappy(tmp_path: Path) -> None:
    """Per agent: an agent moves exactly when it was unhappy before the step."""
    run = _schelling(tmp_path, False, 1)
    av = run.agent_vars.set_index(["step", "agent_id"])["happy"]
    actions = run.actions
    for row in actions[actions["step"].isin([0, 1, 2])].itertuples():
        was_happy = bool(av.loc[(row.step - 1, row.agent_id)])
        assert (row.action == "noop") == was_happy


def test_an_llm_policy_is_offered_the_worlds_actions(tmp_path: Path) -> None:
    """The cognitive policy (mock model) calls the world's own tools, checked by its registry."""
    run = Experiment(
        world=om.SchellingWorld,
        policy="cognitive",
        agents=4,
        steps=2,
        seed=3,
        world_options={"width": 4, "height": 4},
        llm={"model": "mock", "mock": True, "force_tool": True},
    ).run(tmp_path / "llm.sqlite", progress=False)
    actions = run.actions
    # force_tool makes the mock call the registry's default tool, with arguments it fills from
    # the tool's JSON schema: "move" with an integer "to".
    assert set(actions["action"]) == {"move"}
    assert not actions["fallback"].astype(bool).any()
    for args, ok, error in zip(
        actions["arguments"], actions["success"], actions["error"], strict=True
    ):
        to = json.loads(args)["to"]
        assert isinstance(to, int)
        # A cell off the board or taken is refused with the world's reason, not an exception.
        assert bool(ok) or error == f"cell {to} is not empty"


@settings(max_examples=40, deadline=None)
@given(
    width=st.integers(3, 9),
    height=st.integers(3, 9),
    radius=st.integers(1, 2),
    torus=st.booleans(),
    homophily=st.sampled_from([0.0, 0.25, 0.4, 0.5, 1.0]),
    density=st.floats(0.2, 0.9),
    seed=st.integers(0, 10_000),
    moves=st.integers(0, 30),
)
def test_schelling_per_agent_assessment_is_the_numpy_rule(
    width: int,
    height: int,
    radius: int,
    torus: bool,
    homophily: float,
    density: float,
    seed: int,
    moves: int,
) -> None:
    # The per-agent world assesses each agent in Python, as Mesa's assign_state; the reporters
    # and the batched world use the numpy rule. They agree on any grid, after any moves, but a
    # torus narrower than the neighbourhood (2 * radius + 1 cells), where two offsets wrap onto
    # one cell: there the numpy rule counts that cell once an offset, the Python one (as Mesa's
    # grid) once.
    assume(not torus or min(width, height) >= 2 * radius + 1)
    agents = max(1, min(width * height - 1, int(density * width * height)))
    ids = [f"a{i}" for i in range(agents)]
    world = om.SchellingWorld(
        ids, seed=seed, width=width, height=height, homophily=homophily, radius=radius,
        torus=torus,
    )  # fmt: skip
    rng = np.random.default_rng(seed)
    for _ in range(moves):
        world.move(ids[int(rng.integers(agents))], world.empty[int(rng.integers(len(world.empty)))])
        assert world.assess_each() == world.happy().tolist()
    assert world.assess_each() == world.happy().tolist()
