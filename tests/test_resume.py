"""Checkpoints and resume: an interrupted run, resumed, equals one that never stopped."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.conftest import run_cli
from vivarium import Experiment, Run, TraceDb
from vivarium.errors import ConfigError
from vivarium.experiment import resume_run
from vivarium.trace.validate import validate_trace

TABLES = ("runs", "agents", "steps", "messages", "llm_calls", "transitions", "checkpoints")


def rows(db: Path, table: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
    finally:
        con.close()


def interrupted(exp: Experiment, db: Path, steps: int) -> None:
    """Run only ``steps`` steps and leave the run open, as a killed process would."""
    trace = TraceDb(db)
    exp.build(trace).run(steps, finish=False)
    trace.close()


@pytest.mark.parametrize("checkpoint_every", [None, 1, 4])
@pytest.mark.parametrize(
    "fields",
    [
        {"agents": 6},  # the vectorised random path
        {"agents": 3, "action_space": ["noop", "emit_event", "post_message"], "order": "shuffle"},
        {"agents": 3, "policy": "cognitive", "scheduling": "simultaneous", "llm": {"mock": True}},
    ],
    ids=["random-batch", "random-posts", "mock-llm"],
)
def test_resume_equals_uninterrupted(
    tmp_path: Path, checkpoint_every: int | None, fields: dict
) -> None:
    exp = Experiment(name="r", steps=11, seed=5, checkpoint_every=checkpoint_every, **fields)
    full, part = tmp_path / "full.sqlite", tmp_path / "part.sqlite"
    exp.run(full)
    interrupted(exp, part, 7)
    assert validate_trace(part).status == "incomplete"
    resumed = resume_run(part)
    assert resumed.metadata["status"] == "complete"
    for table in TABLES:
        assert rows(full, table) == rows(part, table), table
    assert validate_trace(part).status == "ok"


def test_resume_of_a_complete_run_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "done.sqlite"
    Experiment(agents=2, steps=3).run(db)
    before = db.read_bytes()
    assert Run.open(db).resume().metadata["status"] == "complete"
    assert db.read_bytes() == before


def test_vvm_resume(tmp_path: Path) -> None:
    exp = Experiment(name="cli", agents=4, steps=9, seed=2, checkpoint_every=2)
    full, part = tmp_path / "full.sqlite", tmp_path / "part.sqlite"
    exp.run(full)
    interrupted(exp, part, 5)
    out = run_cli("resume", str(part))
    assert out.returncode == 0, out.stderr
    assert "9 steps x 4 agents -> 36 decisions" in out.stdout
    assert rows(full, "steps") == rows(part, "steps")


def test_checkpoints_are_small_for_random_agents(tmp_path: Path) -> None:
    db = tmp_path / "ck.sqlite"
    Experiment(agents=50, steps=4, checkpoint_every=2).run(db)
    (size,) = rows(db, "checkpoints")[0][3:4]
    assert len(size) < 50 * 80  # seed + word count per agent, not 625-word generator states


def ecology_with_copied_agent(tmp_path: Path) -> tuple[Experiment, Path]:
    """The ecology config with its workflow agent read from a copy the test may edit."""
    import shutil

    from tests.conftest import ROOT

    folder = tmp_path / "alpha_2"
    shutil.copytree(ROOT / "data/agents/alpha_2", folder)
    exp = Experiment(
        name="eco",
        world="ecology",
        steps=6,
        seed=2,
        checkpoint_every=2,
        agents=[{"policy": "workflow", "agent": str(folder)}, {"policy": "random", "count": 2}],
        llm={"mock": True},
    )
    return exp, folder


def test_an_agent_folder_is_part_of_the_runs_identity(tmp_path: Path) -> None:
    exp, folder = ecology_with_copied_agent(tmp_path)
    same, _ = ecology_with_copied_agent(tmp_path / "again")  # same files, another place
    digest = exp.config.identity()["agents"][0]["spec_digest"]
    assert digest == same.config.identity()["agents"][0]["spec_digest"]
    assert len(digest) == 64 and exp.config.identity()["agents"][1]["spec_digest"] is None
    before = exp.config.resolved_run_id()
    prompt = folder / "system_prompt.md"
    prompt.write_text(prompt.read_text() + "\nBe brief.\n")
    edited = exp.config.identity()["agents"][0]["spec_digest"]
    assert edited != digest and exp.config.resolved_run_id() != before


def test_resume_refuses_an_agent_folder_edited_since_the_run_began(tmp_path: Path) -> None:
    exp, folder = ecology_with_copied_agent(tmp_path)
    part = tmp_path / "part.sqlite"
    interrupted(exp, part, 3)
    recorded = Run.open(part).metadata["config"]["agents"][0]["spec_digest"]
    assert recorded == exp.config.identity()["agents"][0]["spec_digest"]
    agent_file = folder / "agent.yaml"
    original = agent_file.read_text()
    agent_file.write_text(original + "\n# edited\n")
    with pytest.raises(ConfigError, match="has changed since the run was recorded"):
        resume_run(part)
    agent_file.write_text(original)  # put back: the run resumes and completes
    assert resume_run(part).metadata["status"] == "complete"
