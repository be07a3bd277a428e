"""Mesa-style reporters: recorded per step in their own tables, read back as frames.

Expected values are rebuilt from the trace's ``actions`` frame (every successful ``give`` moves
one unit), never from the reporters under test.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest

from vivarium import Experiment
from vivarium.engine.reporters import ReporterError
from vivarium.experiment.build import register_world
from vivarium.trace.run import TraceRun
from vivarium.worlds.boltzmann import BoltzmannWorld

N_AGENTS, STEPS, START = 6, 8, 3


class ReportingWorld(BoltzmannWorld):
    """Boltzmann wealth with a model reporter (total, transfers) and agent reporters."""

    model_reporters = {
        "total": lambda w: sum(w.wealth.values()),
        "transfers": lambda w: w.transfers,
        "richest": lambda w: max(w.wealth, key=lambda a: (w.wealth[a], a)),
    }
    agent_reporters = {
        "wealth": lambda w: np.array([w.wealth[a] for a in w.agent_ids]),
        "broke": lambda w: {a: w.wealth[a] == 0 for a in w.agent_ids},
        "label": lambda w: [f"{a}:{w.wealth[a]}" for a in w.agent_ids],
    }


class FailingWorld(BoltzmannWorld):
    """A world whose model reporter breaks at step 2 (its 4th call: init, 0, 1, 2)."""

    model_reporters = {"bad": lambda w: w.bad()}
    calls = 0

    def bad(self) -> float:
        self.calls += 1
        return 1 / (4 - self.calls)


def _world(cls: type) -> Any:
    def make(config: Any, plan: list[Any], shared: dict[str, Any]) -> Any:
        return cls([p.agent_id for p in plan], **dict(config.world_options))

    return make


register_world("reporting_boltzmann", _world(ReportingWorld))
register_world("failing_boltzmann", _world(FailingWorld))
register_world("plain_boltzmann", _world(BoltzmannWorld))


def _experiment(world: str = "reporting_boltzmann", **fields: Any) -> Experiment:
    fields.setdefault("checkpoint_every", 2)
    return Experiment(
        world=world,
        policy="boltzmann",
        agents=N_AGENTS,
        steps=STEPS,
        seed=7,
        world_options={"starting_wealth": START},
        **fields,
    )


def _wealth_by_step(run: TraceRun) -> dict[int, dict[str, int]]:
    """Each agent's wealth after every step (-1: before step 0), replayed from the actions."""
    actions = run.actions
    ids = sorted(run.agents["agent_id"].astype(str))
    wealth = dict.fromkeys(ids, START)
    out = {-1: dict(wealth)}
    for step in range(STEPS):
        rows = actions[actions["step"] == step]
        for agent, action, args, ok in zip(
            rows["agent_id"].astype(str),
            rows["action"],
            rows["arguments"],
            rows["success"],
            strict=True,
        ):
            if action == "give" and ok:
                wealth[agent] -= 1
                wealth[json.loads(args)["to"]] += 1
        out[step] = dict(wealth)
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> TraceRun:
    return _experiment().run(tmp_path_factory.mktemp("rep") / "run.sqlite", progress=False)


def test_model_vars_match_the_replayed_actions(run: TraceRun) -> None:
    expected = _wealth_by_step(run)
    frame = run.model_vars
    assert list(frame.columns) == ["run_id", "step", "total", "transfers", "richest"]
    assert frame["step"].tolist() == list(range(-1, STEPS))  # init row, as Mesa collects
    assert frame["total"].tolist() == [START * N_AGENTS] * (STEPS + 1)
    gives = run.actions[(run.actions["action"] == "give") & run.actions["success"]]
    per_step = gives.groupby("step").size().reindex(range(STEPS), fill_value=0)
    assert frame["transfers"].tolist() == [0, *np.cumsum(per_step).tolist()]
    richest = [max(w, key=lambda a: (w[a], a)) for _, w in sorted(expected.items())]
    assert frame["richest"].tolist() == richest
    assert frame["total"].dtype == np.int64


def test_agent_vars_match_the_replayed_actions(run: TraceRun) -> None:
    expected = _wealth_by_step(run)
    frame = run.agent_vars
    assert list(frame.columns) == ["run_id", "step", "agent_id", "wealth", "broke", "label"]
    assert len(frame) == (STEPS + 1) * N_AGENTS
    for row in frame.itertuples():
        want = expected[row.step][row.agent_id]
        assert row.wealth == want
        assert row.broke == (want == 0)
        assert row.label == f"{row.agent_id}:{want}"
    assert frame["wealth"].dtype == np.int64 and frame["broke"].dtype == bool


def test_polars_frames(run: TraceRun) -> None:
    model = run.frame("model_vars", "polars")
    agents = run.frame("agent_vars", "polars")
    assert isinstance(model, pl.DataFrame) and isinstance(agents, pl.DataFrame)
    assert model["total"].to_list() == run.model_vars["total"].tolist()
    assert agents["wealth"].to_list() == run.agent_vars["wealth"].tolist()
    assert agents["agent_id"].dtype == pl.Categorical


def test_names_recorded_not_in_the_config(run: TraceRun) -> None:
    con = sqlite3.connect(run.path)
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    con.close()
    assert json.loads(meta["reporters"]) == {
        "model": ["total", "transfers", "richest"],
        "agent": ["wealth", "broke", "label"],
    }
    assert "reporter" not in json.dumps(run.metadata["config"])
    assert run.validate().ok


def test_parquet_round_trip(run: TraceRun, tmp_path: Path) -> None:
    paths = run.to_parquet(tmp_path / "out")
    for name in ("model_vars", "agent_vars"):
        back = pd.read_parquet(paths[name])
        pd.testing.assert_frame_equal(back, run.frame(name), check_categorical=False)
        assert pl.read_parquet(paths[name]).equals(run.frame(name, "polars"))


def test_a_run_without_reporters_has_empty_frames_and_no_tables(tmp_path: Path) -> None:
    plain = _experiment("plain_boltzmann").run(tmp_path / "plain.sqlite", progress=False)
    assert list(plain.model_vars.columns) == ["run_id", "step"] and plain.model_vars.empty
    assert list(plain.agent_vars.columns) == ["run_id", "step", "agent_id"]
    assert plain.agent_vars.empty
    con = sqlite3.connect(plain.path)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    con.close()
    assert not tables & {"model_vars", "agent_vars"}
    assert set(plain.to_parquet(tmp_path / "out")) == set(plain.frame_names) - {
        "model_vars",
        "agent_vars",
    }


def test_resume_rewrites_reporter_rows_like_steps(run: TraceRun, tmp_path: Path) -> None:
    """A run cut after step 4 and resumed ends with the uninterrupted run's frames and file."""
    path = tmp_path / "cut.sqlite"
    full = _experiment().run(path, progress=False)
    want_model, want_agents = full.model_vars, full.agent_vars
    con = sqlite3.connect(path)
    with con:  # as if killed after step 4 (with rows of a later step that was never committed)
        con.execute("DELETE FROM steps WHERE step > 4")
        con.execute("DELETE FROM checkpoints WHERE step > 3")
        con.execute("UPDATE model_vars SET value = 999 WHERE step = 6")
        con.execute("UPDATE runs SET status = 'interrupted', steps_done = 5")
    con.close()
    resumed = type(full).open(path).resume(progress=False)
    pd.testing.assert_frame_equal(resumed.model_vars, want_model)
    pd.testing.assert_frame_equal(resumed.agent_vars, want_agents)
    assert resumed.validate().ok
    con = sqlite3.connect(path)
    counts = [
        con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("model_vars", "agent_vars")
    ]
    con.close()
    assert counts == [3 * (STEPS + 1), 3 * (STEPS + 1)]  # no duplicate or stale rows


def test_resume_from_the_start_redoes_the_init_row(tmp_path: Path) -> None:
    path = tmp_path / "start.sqlite"
    full = _experiment(checkpoint_every=None).run(path, progress=False)
    want = full.model_vars
    con = sqlite3.connect(path)
    with con:
        con.execute("DELETE FROM steps WHERE step > 1")
        con.execute("UPDATE runs SET status = 'interrupted', steps_done = 2")
    con.close()
    resumed = type(full).open(path).resume(progress=False)
    pd.testing.assert_frame_equal(resumed.model_vars, want)


def test_experiment_reporters_add_to_and_override_the_worlds(tmp_path: Path) -> None:
    exp = _experiment(
        model_reporters={"total": lambda w: -1, "n": lambda w: len(w.wealth)},
        agent_reporters={"double": lambda w: [2 * w.wealth[a] for a in w.agent_ids]},
    )
    # what a run records is part of what it is: its reporters' code is in its identity
    assert exp.run_id != _experiment().run_id
    run = exp.run(tmp_path / "exp.sqlite", progress=False)
    frame = run.model_vars
    assert list(frame.columns) == ["run_id", "step", "total", "transfers", "richest", "n"]
    assert set(frame["total"]) == {-1} and set(frame["n"]) == {N_AGENTS}
    agents = run.agent_vars
    assert (agents["double"] == 2 * agents["wealth"]).all()


def test_experiment_reporters_on_a_world_without_any(tmp_path: Path) -> None:
    run = _experiment(
        "plain_boltzmann", model_reporters={"total": lambda w: float(sum(w.wealth.values()))}
    ).run(tmp_path / "p.sqlite", progress=False)
    assert run.model_vars["total"].tolist() == [float(START * N_AGENTS)] * (STEPS + 1)
    assert run.agent_vars.empty


def test_bad_reporters_are_refused_in_one_line() -> None:
    with pytest.raises(Exception, match=r"model_reporters\['x'\]: not callable"):
        _experiment(model_reporters={"x": 3})
    with pytest.raises(Exception, match="agent_reporters: expected a dict"):
        _experiment(agent_reporters=[len])


def test_a_reporter_that_raises_fails_the_run_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "fail.sqlite"
    with pytest.raises(ReporterError, match="model reporter 'bad' failed at step 2: ZeroDivision"):
        _experiment("failing_boltzmann").run(path, progress=False)
    run = TraceRun.open(path)
    assert run.metadata["status"] == "failed"
    assert "model reporter 'bad'" in run.metadata["error"]
    assert run.metadata["steps_done"] == 2  # steps 0 and 1 kept, with their reporter rows
    assert run.model_vars["step"].tolist() == [-1, 0, 1]


def test_agent_reporter_of_the_wrong_length(tmp_path: Path) -> None:
    exp = _experiment(agent_reporters={"short": lambda w: [1, 2]})
    with pytest.raises(ReporterError, match="agent reporter 'short' .* 2 values for 6 agents"):
        exp.run(tmp_path / "short.sqlite", progress=False)


@pytest.mark.parametrize("backend", ["inline", "local"])
def test_sweep_frames_carry_the_reporters(tmp_path: Path, backend: str) -> None:
    sweep = _experiment().sweep(
        folder=tmp_path / backend, backend=backend, seed=[1, 2], progress=False
    )
    assert sweep.ok
    model = sweep.model_vars
    assert len(model) == 2 * (STEPS + 1)
    assert set(model["total"]) == {START * N_AGENTS}
    assert list(model.columns[:5]) == ["run_id", "run", "replication", "seed", "step"]
    agents = sweep.frame("agent_vars", "polars")
    assert agents.height == 2 * (STEPS + 1) * N_AGENTS
    for one in sweep.runs:  # each run's rows are that run's frame
        mine = agents.filter(pl.col("run_id") == one.run_id)["wealth"].to_list()
        assert mine == one.agent_vars["wealth"].tolist()


def test_experiment_reporters_in_an_inline_sweep(tmp_path: Path) -> None:
    sweep = _experiment("plain_boltzmann", model_reporters={"n": lambda w: len(w.wealth)}).sweep(
        folder=tmp_path / "s", backend="inline", seed=[1, 2], progress=False
    )
    assert sweep.model_vars["n"].tolist() == [N_AGENTS] * 2 * (STEPS + 1)


def test_validate_checks_the_reporter_rows(tmp_path: Path) -> None:
    path = tmp_path / "v.sqlite"
    _experiment().run(path, progress=False)
    con = sqlite3.connect(path)
    with con:
        con.execute("UPDATE agent_vars SET data = x'00' WHERE step = 3 AND reporter = 'wealth'")
    con.close()
    report = TraceRun.open(path).validate()
    assert report.status == "corrupt"
    assert report.problems == ["agent_vars: 'wealth' at step 3 does not hold 6 values"]
    con = sqlite3.connect(path)
    with con:
        con.execute("DELETE FROM agent_vars")
        con.execute("INSERT INTO model_vars VALUES (99, 'total', 'int', 1)")
    con.close()
    assert TraceRun.open(path).validate().problems == [
        "model_vars: rows for steps 99..99 not in steps"
    ]


def test_experiment_reporters_reach_local_workers(tmp_path: Path) -> None:
    """Reporters given to the Experiment (lambdas, outside its config) travel to worker
    processes with the sweep's objects and are recorded there as in this process."""
    exp = _experiment("plain_boltzmann", model_reporters={"n": lambda w: len(w.wealth)})
    sweep = exp.sweep(folder=tmp_path / "s", backend="local", seed=[1, 2], progress=False)
    assert sweep.model_vars["n"].tolist() == [N_AGENTS] * 2 * (STEPS + 1)


def test_experiment_reporters_that_cannot_travel_are_one_line(tmp_path: Path) -> None:
    import threading

    lock = threading.Lock()  # cannot be pickled
    exp = _experiment("plain_boltzmann", model_reporters={"n": lambda w: lock and 1})
    with pytest.raises(Exception, match="reporters cannot be sent to worker processes"):
        exp.sweep(folder=tmp_path / "s", backend="local", seed=[1, 2], progress=False)


def test_resume_needs_the_experiment_reporters_again(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    total = {"total2": lambda w: sum(w.wealth.values())}
    full = _experiment(model_reporters=total).run(path, progress=False)
    want = full.model_vars
    con = sqlite3.connect(path)
    with con:
        con.execute("DELETE FROM steps WHERE step > 4")
        con.execute("UPDATE runs SET status = 'interrupted', steps_done = 5")
    con.close()
    before = TraceRun.open(path)
    with pytest.raises(ReporterError, match="recorded model reporter 'total2': resume it with"):
        type(full).open(path).resume(progress=False)
    after = TraceRun.open(path)  # refused before anything was written
    assert after.metadata == before.metadata and after.metadata["status"] == "interrupted"
    pd.testing.assert_frame_equal(after.model_vars, before.model_vars)
    resumed = type(full).open(path).resume(progress=False, model_reporters=total)
    pd.testing.assert_frame_equal(resumed.model_vars, want)


def test_values_in_the_worlds_own_agent_order(tmp_path: Path) -> None:
    """A world built with its agents in another order: its arrays are mapped to the agents."""

    def make(config: Any, plan: list[Any], shared: dict[str, Any]) -> Any:
        ids = [p.agent_id for p in plan][::-1]
        return ReportingWorld(ids, **dict(config.world_options))

    register_world("reversed_boltzmann", make)
    run = _experiment("reversed_boltzmann").run(tmp_path / "rev.sqlite", progress=False)
    expected = _wealth_by_step(run)
    frame = run.agent_vars
    assert frame["wealth"].tolist() == [
        expected[s][a] for s, a in zip(frame["step"], frame["agent_id"].astype(str), strict=True)
    ]
    assert frame["label"].tolist() == [
        f"{a}:{w}" for a, w in zip(frame["agent_id"].astype(str), frame["wealth"], strict=True)
    ]
