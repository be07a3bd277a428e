"""Agent folders resolve the same way when a run is recorded and when it is resumed, from
whichever folder the resume is started (notebooks run from ``notebooks/``)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import ROOT
from vivarium import Experiment, TraceDb
from vivarium.errors import ConfigError
from vivarium.experiment.runner import resume_run


def project(tmp_path: Path) -> Path:
    """A copy of the project's data, with an empty notebooks/ folder, as a user has it."""
    root = tmp_path / "proj"
    shutil.copytree(ROOT / "data/agents", root / "data/agents")
    shutil.copytree(ROOT / "data/experiments", root / "data/experiments")
    (root / "notebooks").mkdir()
    (root / "runs").mkdir()
    return root


def interrupted(exp: Experiment, db: Path, steps: int) -> None:
    trace = TraceDb(db)
    exp.build(trace).run(steps, finish=False)
    trace.close()


def steps_rows(db: Path) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT * FROM steps ORDER BY step").fetchall()
    finally:
        con.close()


def test_resume_from_the_notebooks_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path)
    monkeypatch.chdir(root)
    exp = Experiment.from_file("data/experiments/ecology.yaml", steps=6, checkpoint_every=2)
    interrupted(exp, root / "runs/part.sqlite", 3)
    exp.run(root / "runs/full.sqlite")
    monkeypatch.chdir(root / "notebooks")
    resumed = resume_run("../runs/part.sqlite")
    assert resumed.metadata["status"] == "complete"
    assert steps_rows(root / "runs/part.sqlite") == steps_rows(root / "runs/full.sqlite")


def test_a_config_made_in_code_resumes_from_another_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No config file: the folder is relative to where the run started (the project root)."""
    root = project(tmp_path)
    monkeypatch.chdir(root)
    exp = Experiment(
        name="code",
        world="ecology",
        steps=4,
        checkpoint_every=1,
        agents=[{"policy": "workflow", "agent": "data/agents/beta_2"}],
        llm={"mock": True},
    )
    interrupted(exp, root / "runs/part.sqlite", 2)
    monkeypatch.chdir(root / "notebooks")
    assert resume_run(root / "runs/part.sqlite").metadata["status"] == "complete"


def test_a_run_started_in_notebooks_resumes_from_the_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = project(tmp_path)
    monkeypatch.chdir(root / "notebooks")
    exp = Experiment.from_file("../data/experiments/ecology.yaml", steps=4, checkpoint_every=2)
    (root / "notebooks/runs").mkdir()
    interrupted(exp, root / "notebooks/runs/part.sqlite", 2)
    monkeypatch.chdir(root)
    assert resume_run("notebooks/runs/part.sqlite").metadata["status"] == "complete"


def test_an_edited_agent_folder_is_still_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = project(tmp_path)
    monkeypatch.chdir(root)
    exp = Experiment.from_file("data/experiments/ecology.yaml", steps=6, checkpoint_every=2)
    part = root / "runs/part.sqlite"
    interrupted(exp, part, 3)
    prompt = root / "data/agents/alpha_2/system_prompt.md"
    prompt.write_text(prompt.read_text() + "\nBe bold.\n")
    before = part.read_bytes()
    monkeypatch.chdir(root / "notebooks")
    with pytest.raises(ConfigError) as err:
        resume_run("../runs/part.sqlite")
    message = str(err.value)
    assert "\n" not in message
    assert "data/agents/alpha_2 has changed" in message
    assert part.read_bytes() == before  # nothing cut or relabelled


def test_a_missing_agent_folder_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path)
    monkeypatch.chdir(root)
    exp = Experiment.from_file("data/experiments/ecology.yaml", steps=6, checkpoint_every=2)
    part = root / "runs/part.sqlite"
    interrupted(exp, part, 3)
    shutil.rmtree(root / "data/agents/beta_2")
    with pytest.raises(ConfigError, match="data/agents/beta_2 .*not found"):
        resume_run(part)
