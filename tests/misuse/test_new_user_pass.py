"""A new user's pass over issue 24's mechanisms: cases nobody listed, found by using Vivarium.

A notebook is simulated as a kernel runs it (cells executed in one ``__main__`` namespace with
no source file), a second process by a second connection or a second call while the first
holds the trace, and the command line by ``vivarium.cli.main``. Each case ends in the right
result or in one clear line, with nothing already made lost.
"""

from __future__ import annotations

import sqlite3
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.public_goods import notebook, run_status
from vivarium import Experiment, Run
from vivarium.cli import main
from vivarium.errors import (
    ConfigError,
    OverrideWarning,
    ResumedWarning,
    TraceError,
    TracePathWarning,
)
from vivarium.experiment.runner import resume_run
from vivarium.trace.db import TraceDb
from vivarium.trace.validate import validate_trace


def _notebook(multiplier: str) -> dict[str, Any]:
    """A notebook whose world multiplies each gift by ``multiplier`` (an expression)."""
    return notebook(multiplier)


def _final_pots(sweep: Any) -> list[float]:
    frame = sweep.model_vars
    return frame[frame["step"] == frame["step"].max()]["pot"].tolist()


def _rows(path: Path, table: str) -> list[Any]:
    con = sqlite3.connect(path)
    try:
        return sorted(con.execute(f"SELECT * FROM {table}").fetchall(), key=repr)  # noqa: S608
    finally:
        con.close()


def _stop_at(step: int) -> Any:
    """An ``on_step`` that presses Ctrl-C once step ``step`` is committed."""

    def on_step(done: int, record: Any) -> None:
        if done == step:
            raise KeyboardInterrupt

    return on_step


def _interrupt(exp: Experiment, path: Path, step: int) -> None:
    with pytest.raises(KeyboardInterrupt):
        exp.run(path, progress=False, on_step=_stop_at(step))


# -- 1. identity: a value read through a module of one's own ---------------------------------
def test_a_parameter_module_changed_in_the_notebook_is_a_new_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``import params; params.R = 3.0``: the sweep handed back the R = 1.5 pots as complete.

    Before: only the file ``params.py`` was digested, not the value ``R`` has now.
    """
    (tmp_path / "nup_params.py").write_text("R = 1.5\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "nup_params", raising=False)
    cell = _notebook("nup_params.R")
    exec("import nup_params", cell)
    try:
        exp = Experiment(
            name="pg", world=cell["PublicGoods"], policy=cell["Give"], agents=2, steps=3
        )
        old = exp.sweep(seed=[1], folder=tmp_path / "s", backend="inline", progress=False)
        cell["nup_params"].R = 3.0
        new = exp.sweep(seed=[1], folder=tmp_path / "s", backend="inline", progress=False)
    finally:
        sys.modules.pop("nup_params", None)
    assert _final_pots(old) == [9.0]  # 2 agents x 3 steps x 1.5
    assert _final_pots(new) == [18.0]
    assert Run.open(old.index["path"][0]).model_vars["pot"].iloc[-1] == 9.0  # kept


def test_a_module_imported_inside_the_method_counts_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "nup_local.py").write_text("R = 1.5\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "nup_local", raising=False)
    cell = _notebook("1.0")
    exec("def multiplier():\n    import nup_local\n    return nup_local.R\n", cell)
    __import__("nup_local")  # imported by an earlier run
    try:
        exp = Experiment(
            name="pg", world=cell["PublicGoods"], policy=cell["Give"], agents=2, steps=3
        )
        before = exp.run_id
        sys.modules["nup_local"].R = 3.0
        after = exp.run_id
    finally:
        sys.modules.pop("nup_local", None)
    assert before != after


# -- 2. identity: options that JSON cannot hold ----------------------------------------------
RULED = (
    "class Ruled(PublicGoods):\n"
    "    def __init__(self, agent_ids, seed, rule):\n"
    "        super().__init__(agent_ids, seed)\n"
    "        self.rule = rule\n"
    "    def apply(self, request):\n"
    "        self.pot += self.rule(request.arguments['c'])\n"
    "        return ActionResult.ok()\n"
    "K = 2\n"
    "def double(c):\n    return K * c\n"
)


def test_a_function_given_as_a_world_option_is_part_of_the_run_not_its_address(
    tmp_path: Path,
) -> None:
    """Before: recorded as ``"<function double at 0x7f...>"``: a run id that changed with each
    kernel and not with the function's code or the values it reads; a sweep handed back the
    K = 2 pots for K = 5, and the cell run again after Ctrl-C gave the world that text."""
    cell = _notebook("1.0")
    exec(RULED, cell)
    exp = Experiment(
        name="wo", world=cell["Ruled"], policy=cell["Give"], agents=2, steps=4,
        world_options={"rule": cell["double"]},
    )  # fmt: skip
    old = exp.sweep(seed=[1], folder=tmp_path / "s", backend="inline", progress=False)
    cell["K"] = 5
    new = exp.sweep(seed=[1], folder=tmp_path / "s", backend="inline", progress=False)
    assert _final_pots(old) == [16.0] and _final_pots(new) == [40.0]
    recorded = Run.open(new.index["path"][0]).metadata["config"]["world_options"]["rule"]
    assert recorded.startswith("<python double@") and "0x" not in recorded
    # Ctrl-C, then the same cell again: resumed with the function, as if never stopped.
    path = tmp_path / "r.sqlite"
    _interrupt(exp, path, 1)
    with pytest.warns(ResumedWarning):
        done = exp.run(path, progress=False)
    assert done.model_vars["pot"].iloc[-1] == 40.0
    assert _rows(path, "steps") == _rows(Path(new.index["path"][0]), "steps")


def test_a_run_given_an_object_option_resumed_elsewhere_says_how_in_one_line(
    tmp_path: Path,
) -> None:
    from vivarium.experiment.config import OPTION_OBJECTS

    cell = _notebook("1.0")
    exec(RULED, cell)
    exp = Experiment(
        name="wo", world=cell["Ruled"], policy=cell["Give"], agents=2, steps=4,
        world_options={"rule": cell["double"]},
    )  # fmt: skip
    path = tmp_path / "r.sqlite"
    _interrupt(exp, path, 1)
    before = path.read_bytes()
    OPTION_OBJECTS.clear()  # as in another process
    with pytest.raises(ConfigError) as err:
        Run.open(path).resume(world=cell["Ruled"], policy=cell["Give"], progress=False)
    line = str(err.value)
    assert "\n" not in line and "world_options.rule was given as a Python object (double)" in line
    assert path.read_bytes() == before
    with pytest.raises(ConfigError, match=r"world_options.rule \(double\) .*worker processes"):
        exp.sweep(seed=[1, 2], folder=tmp_path / "s", backend="local", progress=False)
    # Plain options (numpy values included) are recorded as they are: their ids are unchanged.
    import numpy as np

    plain = Experiment(world="boltzmann", world_options={"width": np.int64(5)})
    assert plain.run_id == Experiment(world="boltzmann", world_options={"width": 5}).run_id


# -- 3. overrides: a number of agents over agent groups --------------------------------------
GROUPS = {
    "name": "grp",
    "agents": [{"policy": "cognitive", "count": 2}, {"policy": "random", "count": 3}],
    "llm": {"model": "mock"},
    "steps": 2,
}


def test_agents_n_over_a_config_of_agent_groups_is_refused_not_turned_random(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: ``vvm run groups.yaml --agents 10`` ran 10 random agents, the LLM agents gone."""
    file = tmp_path / "groups.yaml"
    file.write_text(yaml.safe_dump(GROUPS))
    with pytest.raises(ConfigError) as err:
        Experiment.from_file(file, agents=10)
    line = str(err.value)
    assert (
        "\n" not in line
        and "agents: the config gives agent groups (cognitive x2, random x3)" in line
    )
    base = Experiment.from_file(file).config
    with pytest.raises(ConfigError, match="agent groups"):
        Experiment(base, agents=10)
    with pytest.raises(ConfigError, match="agent groups"):
        Experiment(base).sweep(agents=[5, 10], folder=tmp_path / "s", backend="inline")
    db = tmp_path / "grp.sqlite"
    assert main(["run", str(file), "--agents", "10", "--db", str(db), "--no-progress"]) == 2
    assert "agent groups" in capsys.readouterr().err and not db.exists()
    # Naming the policy too replaces the groups on purpose.
    config = Experiment(base, agents=4, policy="random").config
    assert (config.agents, config.policy) == (4, "random")


# -- 4. overrides: a server given to a run the mock answers ----------------------------------
def test_a_server_given_over_a_mock_config_says_it_is_not_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: ``vvm run mock.yaml --api-base URL`` answered from the mock without a word."""
    file = tmp_path / "mock.yaml"
    file.write_text(
        yaml.safe_dump(
            {
                "name": "mk",
                "policy": "cognitive",
                "agents": 1,
                "steps": 1,
                "llm": {"model": "openai/smollm2", "mock": True},
            }
        )
    )
    url = "http://127.0.0.1:9/v1"
    with pytest.warns(OverrideWarning, match=r"api_base http://127.0.0.1:9/v1 is not used"):
        Experiment.from_file(file, llm={"api_base": url})
    db = tmp_path / "mk.sqlite"
    assert main(["run", str(file), "--api-base", url, "--db", str(db), "--no-progress"]) == 0
    notes = [ln for ln in capsys.readouterr().err.splitlines() if "is not used" in ln]
    assert len(notes) == 1 and "mock" in notes[0]
    # The panel sends the api_base the config already has: nothing to say.
    with warnings.catch_warnings():
        warnings.simplefilter("error", OverrideWarning)
        Experiment(Experiment.from_file(file).config, llm={"api_base": None, "temperature": 0.5})


# -- 5. resume: settings that are the run, not how calls are made ------------------------------
def test_resume_with_another_temperature_says_it_is_another_run(tmp_path: Path) -> None:
    """Before: 'the prompt changed ... not reproducible from its inputs': it was the temperature."""
    exp = Experiment(name="t", policy="cognitive", agents=2, steps=4, llm={"model": "mock"})
    path = tmp_path / "t.sqlite"
    _interrupt(exp, path, 1)
    before = path.read_bytes()
    for given, field in (
        ({"temperature": 0.9}, "temperature"),
        ({"system_prompt": "Be brief."}, "system_prompt"),
        ({"model": "openai/other", "timeout": 5}, "model"),
    ):
        with pytest.raises(ConfigError) as err:
            Run.open(path).resume(llm=given, progress=False)
        line = str(err.value)
        assert "\n" not in line and f"llm.{field} is part of what the run is" in line, line
        assert path.read_bytes() == before
    done = Run.open(path).resume(llm={"timeout": 5.0, "temperature": 0.0}, progress=False)
    assert done.metadata["status"] == "complete"


# -- 6. resume: a checkpoint that holds less than the world's state ----------------------------
MILESTONE = textwrap.dedent(
    """
    from vivarium.types import ActionRequest, ActionResult

    class Milestone:
        '''Pays 100 at its 20th gift; its snapshot forgets the gifts counted so far.'''
        def __init__(self, agent_ids, seed):
            self.pot = 0
            self.gifts = []
        def observe(self, agent_id, time_step):
            return {"pot": self.pot}
        def apply(self, request):
            self.gifts.append(request.time_step)
            self.pot += 100 if len(self.gifts) == 20 else 1
            return ActionResult.ok({"pot": self.pot})
        def state_digest(self):
            return str(self.pot)
        def snapshot(self):
            return {"pot": self.pot}
        def restore(self, state):
            self.pot = state["pot"]

    class Give:
        def decide(self, *, run_id, time_step, agent_id, observation):
            return ActionRequest(run_id=run_id, time_step=time_step, agent_id=agent_id,
                                 action_name="give")
    """
)


def test_a_checkpoint_missing_part_of_the_state_resumes_from_the_start(tmp_path: Path) -> None:
    """Before: refused as 'not reproducible from its inputs', though it is, from its start."""
    cell: dict[str, Any] = {"__name__": "__main__"}
    exec(MILESTONE, cell)
    exp = Experiment(
        name="ms",
        world=cell["Milestone"],
        policy=cell["Give"],
        agents=2,
        steps=14,
        checkpoint_every=4,
    )
    full, cut = tmp_path / "full.sqlite", tmp_path / "cut.sqlite"
    exp.run(full, progress=False)
    _interrupt(exp, cut, 11)  # checkpoints at 3, 7, 11; the 20th gift is at step 9
    done = Run.open(cut).resume(progress=False)
    assert done.metadata["status"] == "complete"
    for table in ("steps", "decisions", "checkpoints"):
        assert _rows(cut, table) == _rows(full, table)


# -- 7. one file: validate while a resume re-executes ----------------------------------------
def test_validate_while_a_resume_re_executes_says_running(tmp_path: Path) -> None:
    """Before: 'INCOMPLETE ... resume it with `vvm resume`', which the writer's lock refuses."""
    exp = Experiment(name="v", agents=2, steps=6)
    path = tmp_path / "v.sqlite"
    _interrupt(exp, path, 3)
    seen: list[str] = []

    def on_step(step: int, record: Any) -> None:
        if step == 1:  # re-executed, not written: the trace still says interrupted
            seen.append(validate_trace(path).status)

    with exp._started():
        resume_run(path, progress=False, on_step=on_step)
    assert seen == ["running"]
    assert validate_trace(path).status == "ok"


def test_a_second_resume_is_told_to_wait_not_to_use_another_db(tmp_path: Path) -> None:
    exp = Experiment(name="busy", agents=2, steps=5)
    path = tmp_path / "busy.sqlite"
    _interrupt(exp, path, 2)
    holder = TraceDb.for_resume(path, from_step=3)  # another process resuming it
    try:
        with pytest.raises(TraceError) as err:
            Run.open(path).resume(progress=False)
    finally:
        holder.close()
    line = str(err.value)
    assert "\n" not in line and "--db" not in line and "let it finish, then resume it" in line
    assert run_status(path) == ("interrupted", 3)


# -- 8. the wrong folder: what a run recorded by a relative path -----------------------------
def _project(tmp_path: Path, llm: dict[str, Any] | None = None, **fields: Any) -> Path:
    project = tmp_path / "project"
    (project / "notebooks").mkdir(parents=True)
    data = {"name": "study", "agents": 2, "steps": 5, **fields}
    if llm is not None:
        data["llm"] = llm
    (project / "study.yaml").write_text(yaml.safe_dump(data))
    return project


def test_resume_from_the_notebooks_folder_uses_the_projects_cassette(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a second cassette appeared in notebooks/cassettes/ and took the rest of the replies."""
    llm = {"model": "mock", "cache": "cassettes/c.sqlite", "cache_mode": "auto"}
    project = _project(tmp_path, llm, policy="cognitive")
    (project / "cassettes").mkdir()
    monkeypatch.chdir(project)
    exp = Experiment.from_file("study.yaml")
    full = exp.run("runs/full.sqlite", progress=False)
    calls = _rows(Path("cassettes/c.sqlite"), "replies")
    Path("cassettes/c.sqlite").unlink()
    _interrupt(exp, Path("runs/cut.sqlite"), 1)
    monkeypatch.chdir(project / "notebooks")
    done = Run.open("../runs/cut.sqlite").resume(progress=False)
    assert done.metadata["status"] == "complete"
    assert not (project / "notebooks" / "cassettes").exists()
    assert _rows(project / "cassettes" / "c.sqlite", "replies") == calls  # every reply, one file
    assert _rows(project / "runs" / "cut.sqlite", "meta") == _rows(project / full.path, "meta")


def test_resume_from_the_notebooks_folder_finds_the_input_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: 'input_files: data/prices.csv does not exist (from .../notebooks)'."""
    project = _project(tmp_path, input_files=["data/prices.csv"])
    (project / "data").mkdir()
    (project / "data" / "prices.csv").write_text("a,1\n")
    monkeypatch.chdir(project)
    exp = Experiment.from_file("study.yaml")
    _interrupt(exp, Path("runs/cut.sqlite"), 1)
    monkeypatch.chdir(project / "notebooks")
    assert main(["resume", "../runs/cut.sqlite", "--no-progress", "--no-validate"]) == 0
    assert run_status(project / "runs" / "cut.sqlite") == ("complete", 5)
    (project / "notebooks" / "data").mkdir()  # another file by that name here: not the run's
    (project / "notebooks" / "data" / "prices.csv").write_text("a,2\n")
    monkeypatch.chdir(project)
    _interrupt(exp, Path("runs/again.sqlite"), 1)
    monkeypatch.chdir(project / "notebooks")
    done = Run.open("../runs/again.sqlite").resume(progress=False)  # the file it recorded
    assert done.metadata["status"] == "complete"


# -- 9. a reused name: two notebooks at once -----------------------------------------------
def test_two_notebooks_running_other_seeds_at_once_keep_both_runs(tmp_path: Path) -> None:
    """Before: the second was refused ('being written by another run'), though a finished
    run at the default path makes it go beside, as a loop over seeds expects."""
    first = Experiment(name="demo", agents=2, steps=5, seed=1)
    default = tmp_path / "demo.sqlite"
    with pytest.raises(KeyboardInterrupt):
        first.run(folder=tmp_path, progress=False, on_step=_stop_at(1))
    writer = TraceDb.for_resume(default, from_step=2)  # the first notebook is writing it
    try:
        second = Experiment(name="demo", agents=2, steps=5, seed=2)
        with pytest.warns(TracePathWarning, match="is being written by run demo-"):
            run = second.run(folder=tmp_path, progress=False)
        assert run.path == tmp_path / f"{second.run_id}.sqlite"
        assert run.metadata["status"] == "complete"
        with pytest.raises(TraceError, match="is being written by another run"):
            first.run(folder=tmp_path, progress=False)  # the same run twice at once: refused
    finally:
        writer.close()
    assert run_status(default) == ("interrupted", 2)


def test_a_notebook_loading_the_projects_config_replays_its_cassette(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: ``from_file("../study.yaml")`` from notebooks/ asked the model every reply again
    (0 cache hits) and recorded them into a second cassette, notebooks/cassettes/c.sqlite."""
    llm = {"model": "mock", "cache": "cassettes/c.sqlite", "cache_mode": "auto"}
    project = _project(tmp_path, llm, policy="cognitive", input_files=["data/prices.csv"])
    (project / "cassettes").mkdir()
    (project / "data").mkdir()
    (project / "data" / "prices.csv").write_text("a,1\n")
    monkeypatch.chdir(project)
    root = Experiment.from_file("study.yaml").run("runs/root.sqlite", progress=False)
    monkeypatch.chdir(project / "notebooks")
    exp = Experiment.from_file("../study.yaml")
    assert exp.run_id == root.run_id
    run = exp.run("../runs/nb.sqlite", progress=False)
    hits = run.llm_calls["cache_hit"]
    assert len(hits) == 10 and bool(hits.all())  # every reply from the project's cassette
    assert not (project / "notebooks" / "cassettes").exists()


def test_the_health_of_a_run_being_written_says_so_not_resume_it(tmp_path: Path) -> None:
    """Before: a run polled while it ran said 'not finished (running) ... resume with
    run.resume()', and that resume would have been refused (a process is writing it)."""
    path = tmp_path / "live.sqlite"
    seen: list[Any] = []

    def peek(step: int, record: Any) -> None:
        if step == 2:  # as a second notebook polling Run.open sees it
            seen.append(Run.open(path).health)

    done = Experiment(agents=2, steps=5).run(path, progress=False, on_step=peek)
    [live] = seen
    assert not live.ok and len(live.problems) == 1
    assert live.problems[0].startswith("still being written: ")
    assert "resume" not in live.problems[0].replace("a resume of it", "")
    assert done.health.ok  # and when it ends, a clean result
