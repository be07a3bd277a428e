"""Misuse of a run's identity: a public-goods study in a notebook, then things a new user does.

Each case ends in a right result or one clear line, and nothing already made is lost. The
notebook is simulated as a kernel runs it: cells executed in one ``__main__`` namespace that
has no source file.
"""

from __future__ import annotations

import sqlite3
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.public_goods import notebook
from vivarium import Experiment, Run
from vivarium.errors import ConfigError, IdentityWarning, OverrideWarning, TracePathWarning
from vivarium.experiment.build import POLICIES, register_policy


def _notebook() -> dict[str, Any]:
    return notebook()


def _exp(cell: dict[str, Any], **kw: Any) -> Experiment:
    fields = {"name": "pg", "world": cell["PublicGoods"], "policy": cell["Give"], "agents": 2}
    return Experiment(**{**fields, "steps": 3, **kw})


def _final_pots(sweep: Any) -> list[float]:
    frame = sweep.model_vars
    return frame[frame["step"] == frame["step"].max()]["pot"].tolist()


def _rows(path: Path, sql: str) -> list[Any]:
    con = sqlite3.connect(path)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_a_changed_notebook_global_is_a_new_sweep_not_the_old_pots(tmp_path: Path) -> None:
    """Reported: ``R = 3.0`` and the same sweep handed back the R = 1.5 pots as complete."""
    cell = _notebook()
    exp = _exp(cell)
    old = exp.sweep(seed=range(2), folder=tmp_path / "s", backend="inline", progress=False)
    assert _final_pots(old) == [9.0, 9.0]  # 2 agents x 3 steps x 1.5
    cell["R"] = 3.0
    new = exp.sweep(seed=range(2), folder=tmp_path / "s", backend="inline", progress=False)
    assert _final_pots(new) == [18.0, 18.0]
    assert list(new.index["action"]) == ["ran", "ran"]
    for path in old.index["path"]:  # the old results are still there, unchanged
        assert Run.open(path).model_vars["pot"].iloc[-1] == 9.0


def test_run_again_with_a_changed_global_keeps_the_old_trace(tmp_path: Path) -> None:
    """Reported: ``exp.run()`` computed the new result but replaced the old trace."""
    cell = _notebook()
    exp = _exp(cell)
    first = exp.run(folder=tmp_path, progress=False)
    cell["R"] = 3.0
    with pytest.warns(TracePathWarning, match="holds run"):
        second = exp.run(folder=tmp_path, progress=False)
    assert second.path != first.path and second.run_id != first.run_id
    assert Run.open(first.path).model_vars["pot"].iloc[-1] == 9.0
    assert second.model_vars["pot"].iloc[-1] == 18.0


def test_an_llm_temperature_override_keeps_the_model() -> None:
    """Reported: ``Experiment(cfg, llm={"temperature": 0.7})`` answered from the mock."""
    cfg = Experiment(
        policy="cognitive", llm={"model": "openai/smollm2", "api_base": "http://127.0.0.1:9/v1"}
    ).config
    config = Experiment(cfg, llm={"temperature": 0.7}).config
    assert config.llm is not None and config.llm.model == "openai/smollm2"
    assert config.llm.api_base == "http://127.0.0.1:9/v1" and not config.llm.uses_mock


def test_a_reporter_reading_a_global_is_part_of_the_run(tmp_path: Path) -> None:
    """A reporter's code was outside the run id: the sweep handed back the old measurements."""
    cell = _notebook()
    cell["UNIT"] = 1.0
    reporters = {"pot_in_units": eval("lambda world: world.pot / UNIT", cell)}  # noqa: S307
    exp = _exp(cell, model_reporters=reporters)
    first = exp.sweep(seed=[1], folder=tmp_path / "s", backend="inline", progress=False)
    cell["UNIT"] = 100.0
    again = exp.sweep(seed=[1], folder=tmp_path / "s", backend="inline", progress=False)
    assert first.model_vars["pot_in_units"].iloc[-1] == 9.0
    assert again.model_vars["pot_in_units"].iloc[-1] == 0.09


def test_a_registered_factory_reads_its_globals_when_the_run_starts(tmp_path: Path) -> None:
    """Its digest was taken at registration: a global changed afterwards gave the old run."""
    cell = _notebook()
    cell["C"] = 1
    exec(
        textwrap.dedent(
            """
            class GiveC:
                def decide(self, *, run_id, time_step, agent_id, observation):
                    return ActionRequest(run_id=run_id, time_step=time_step,
                                         agent_id=agent_id, action_name="give",
                                         arguments={"c": C})
            """
        ),
        cell,
    )
    register_policy("give_c", lambda config, agent, shared: cell["GiveC"]())
    try:
        exp = Experiment(name="pg", world=cell["PublicGoods"], policy="give_c", agents=2, steps=3)
        one = exp.sweep(seed=[1], folder=tmp_path / "s", backend="inline", progress=False)
        cell["C"] = 2
        two = exp.sweep(seed=[1], folder=tmp_path / "s", backend="inline", progress=False)
    finally:
        POLICIES.pop("give_c", None)
    assert _final_pots(one) == [9.0] and _final_pots(two) == [18.0]


def test_a_world_instance_changed_before_its_first_run_is_named_as_it_runs(tmp_path: Path) -> None:
    cell = _notebook()
    exec("class Scaled(PublicGoods):\n    pass\n", cell)
    world = cell["Scaled"](["agent_000"], 0)
    exp = Experiment(name="inst", world=world, policy=cell["Give"], agents=1, steps=1)
    named = exp.run_id
    world.pot = 100.0  # changed after it was given: that is the state the first run uses
    changed = exp.run_id
    assert changed != named
    run = exp.run(tmp_path / "i.sqlite", progress=False)
    assert run.model_vars["pot"].iloc[-1] == 101.5 and run.run_id == changed
    # (after its first run, every run starts from the state it was given in: the name again)
    assert exp.run_id == named


def test_resume_with_a_changed_global_says_what_changed(tmp_path: Path) -> None:
    """Before: 'given as a Python object, unknown in this process: pass it again' (it was)."""
    cell = _notebook()
    exp = _exp(cell, steps=4)
    path = tmp_path / "r.sqlite"

    def stop(step: int, record: Any) -> None:
        if step == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        exp.run(path, progress=False, on_step=stop)
    before = path.read_bytes()
    cell["R"] = 3.0
    with pytest.raises(ConfigError) as err:
        Run.open(path).resume(world=cell["PublicGoods"], policy=cell["Give"], progress=False)
    line = str(err.value)
    assert "\n" not in line and "world PublicGoods has changed since the run was recorded" in line
    assert path.read_bytes() == before  # left as it was
    cell["R"] = 1.5
    done = Run.open(path).resume(world=cell["PublicGoods"], policy=cell["Give"], progress=False)
    assert done.metadata["status"] == "complete" and done.model_vars["pot"].iloc[-1] == 12.0


def test_from_file_world_options_keep_the_files_other_options(tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text(yaml.safe_dump({"world": "boltzmann", "world_options": {"width": 5}}))
    config = Experiment.from_file(file, world_options={"height": 4}).config
    assert config.world_options == {"width": 5, "height": 4}  # before: {"height": 4}


def test_a_sweep_axis_of_llm_settings_keeps_the_model(tmp_path: Path) -> None:
    from vivarium.sweep.plan import plan_sweep

    base = Experiment(policy="cognitive", llm={"model": "openai/smollm2", "max_tokens": 64})
    runs = plan_sweep(base.config, {"llm": [{"temperature": 0.2}, {"temperature": 0.9}]})
    for run, temperature in zip(runs, (0.2, 0.9), strict=True):
        llm = run.config.llm
        assert llm is not None and (llm.model, llm.max_tokens) == ("openai/smollm2", 64)
        assert llm.temperature == temperature


def test_naming_a_model_over_a_mock_config_runs_that_model(tmp_path: Path) -> None:
    """``from_file(..., llm={"model": ...})`` over ``mock: true`` kept answering from the mock."""
    file = tmp_path / "mock.yaml"
    file.write_text(yaml.safe_dump({"policy": "cognitive", "llm": {"model": "mock", "mock": True}}))
    with pytest.warns(OverrideWarning, match="openai/smollm2 now answers"):
        config = Experiment.from_file(file, llm={"model": "openai/smollm2"}).config
    assert config.llm is not None and not config.llm.uses_mock


def test_a_changed_input_file_is_a_new_run_and_refuses_a_resume(tmp_path: Path) -> None:
    prices = tmp_path / "prices.csv"
    prices.write_text("a,1\n")
    cell = _notebook()
    exp = _exp(cell, steps=4, input_files=[str(prices)])
    path = tmp_path / "f.sqlite"

    def stop(step: int, record: Any) -> None:
        if step == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        exp.run(path, progress=False, on_step=stop)
    before = exp.run_id
    prices.write_text("a,2\n")
    assert exp.run_id != before
    with pytest.raises(ConfigError, match=r"input file .*prices.csv has changed") as err:
        Run.open(path).resume(world=cell["PublicGoods"], policy=cell["Give"], progress=False)
    assert "\n" not in str(err.value)
    prices.unlink()
    with pytest.raises(ConfigError, match=r"input_files: .*prices.csv does not exist"):
        _ = exp.run_id


def test_a_declared_input_must_be_plain_data() -> None:
    with pytest.raises(ConfigError) as err:
        Experiment(inputs={"client": object()})
    assert "\n" not in str(err.value) and "inputs: client: object is not a plain value" in str(
        err.value
    )
    one = Experiment(inputs={"data_version": "2026-11"}).run_id
    assert Experiment(inputs={"data_version": "2026-12"}).run_id != one
    assert Experiment().run_id not in (one,)  # no declared input: the id it always had


def test_a_value_that_cannot_be_digested_is_said_once(tmp_path: Path) -> None:
    import socket

    cell = _notebook()
    with socket.socket() as sock:
        cell["R"] = 1.5
        cell["LOG_TO"] = sock
        exec(
            "class Logged(PublicGoods):\n    def observe(self, a, t):\n        LOG_TO\n        return {}\n",
            cell,
        )
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            exp = Experiment(
                name="sock", world=cell["Logged"], policy=cell["Give"], agents=1, steps=1
            )
            exp.run(tmp_path / "s.sqlite", progress=False)
            exp.run(tmp_path / "s.sqlite", progress=False)
    lines = [str(w.message) for w in said if issubclass(w.category, IdentityWarning)]
    assert len(lines) == 1 and "LOG_TO" in lines[0] and "socket" in lines[0]
