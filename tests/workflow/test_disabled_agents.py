"""``enabled: false`` (in an agent folder or a config group) leaves the agent out of the run, and
the trace says so; a run left with no agent at all is refused in one line."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import ROOT
from vivarium import Experiment, Run, TraceDb
from vivarium.errors import ConfigError
from vivarium.experiment.runner import resume_run


def disabled_copy(tmp_path: Path, name: str = "alpha_2") -> Path:
    folder = tmp_path / "agents" / name
    shutil.copytree(ROOT / "data/agents" / name, folder)
    spec = folder / "agent.yaml"
    text = spec.read_text()
    assert "enabled: true" in text
    spec.write_text(text.replace("enabled: true", "enabled: false"))
    return folder


def mixed(folder: Path, **fields: object) -> Experiment:
    return Experiment(
        name="dis",
        world="ecology",
        steps=3,
        seed=1,
        agents=[
            {"policy": "workflow", "agent": str(folder)},
            {"policy": "random", "count": 2, "action_space": ["noop", "read_artifact"]},
        ],
        llm={"mock": True},
        **fields,
    )


def agents_table(db: Path) -> list[str]:
    con = sqlite3.connect(db)
    try:
        return [r[0] for r in con.execute("SELECT agent_id FROM agents ORDER BY agent_idx")]
    finally:
        con.close()


def test_a_disabled_agent_folder_does_not_act(tmp_path: Path) -> None:
    run = mixed(disabled_copy(tmp_path)).run(tmp_path / "t.sqlite")
    assert set(run.actions["agent_id"]) == {"agent_000", "agent_001"}
    assert len(run.actions) == 3 * 2
    assert run.llm_calls.empty
    assert agents_table(run.path) == ["agent_000", "agent_001"]
    assert run.metadata["agents"] == 2
    assert run.metadata["policy"] == "random"
    # the trace says the group was left out, and why
    groups = run.metadata["config"]["agents"]
    assert groups[0]["enabled"] is False
    assert "enabled" not in groups[1]
    assert run.validate().status == "ok"


def test_a_disabled_agent_has_no_account_in_the_ecology(tmp_path: Path) -> None:
    engine = mixed(disabled_copy(tmp_path)).build(None)
    assert engine.world.agent_ids == ("agent_000", "agent_001")


def test_enabled_agents_record_what_they_did_before(tmp_path: Path) -> None:
    """The flag is recorded only for a group left out: other run ids do not change."""
    exp = Experiment.from_file(ROOT / "data/experiments/ecology.yaml")
    groups = exp.config.identity()["agents"]
    assert all("enabled" not in g for g in groups)


def test_a_group_disabled_in_the_config_is_left_out(tmp_path: Path) -> None:
    exp = Experiment(
        name="dis",
        steps=2,
        agents=[
            {"policy": "random", "count": 2},
            {"policy": "random", "id": "x", "enabled": False},
        ],
    )
    run = exp.run(tmp_path / "t.sqlite")
    assert set(run.actions["agent_id"]) == {"agent_000", "agent_001"}


def test_every_agent_disabled_is_one_line(tmp_path: Path) -> None:
    folder = disabled_copy(tmp_path)
    exp = Experiment(
        name="none", world="ecology", steps=2, agents=[{"policy": "workflow", "agent": str(folder)}]
    )
    with pytest.raises(ConfigError) as err:
        exp.run(tmp_path / "t.sqlite")
    message = str(err.value)
    assert "\n" not in message
    assert "every agent is disabled" in message and str(folder) in message


def test_a_run_with_a_disabled_agent_resumes(tmp_path: Path) -> None:
    exp = mixed(disabled_copy(tmp_path), checkpoint_every=1)
    full, part = tmp_path / "full.sqlite", tmp_path / "part.sqlite"
    exp.run(full)
    trace = TraceDb(part)
    exp.build(trace).run(2, finish=False)
    trace.close()
    resumed = resume_run(part)
    assert resumed.metadata["status"] == "complete"
    assert Run.open(full).actions.equals(resumed.actions)
    assert json.dumps(resumed.metadata["config"]) == json.dumps(Run.open(full).metadata["config"])
