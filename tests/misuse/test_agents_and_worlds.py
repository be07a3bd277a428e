"""Misuse of LLM and workflow agents in worlds: each ends in a right result or one clear line,
and nothing already made is lost."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, run_cli
from vivarium import Experiment, Run, TraceDb
from vivarium.errors import ConfigError
from vivarium.experiment.runner import resume_run


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def agent_copy(tmp_path: Path, name: str = "alpha_2", **changes: object) -> Path:
    folder = tmp_path / "agents" / name
    shutil.copytree(ROOT / "data/agents" / name, folder)
    data = yaml.safe_load((folder / "agent.yaml").read_text())
    data.update(changes)
    (folder / "agent.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


def test_force_tool_naming_a_tool_the_world_lacks(tmp_path: Path) -> None:
    # A user copies the channel's `force_tool: emit_event` into an ecology config.
    db = tmp_path / "eco.sqlite"
    kept = Experiment(name="eco", world="ecology", agents=2, steps=2, action_space=["noop"])
    kept.run(db)
    before = db.read_bytes()
    exp = Experiment(
        name="eco",
        world="ecology",
        policy="cognitive",
        agents=2,
        steps=2,
        llm={"mock": True, "force_tool": "emit_event"},
    )
    with pytest.raises(ConfigError) as err:
        exp.run(db, overwrite=True)
    assert "llm.force_tool: 'emit_event' is not an action of the ecology world" in one_line(err)
    assert db.read_bytes() == before  # refused before the file was touched


def test_force_tool_typo_on_the_command_line(tmp_path: Path) -> None:
    cfg = tmp_path / "eco.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "name": "eco",
                "world": "ecology",
                "policy": "cognitive",
                "agents": 1,
                "steps": 2,
                "llm": {"mock": True, "force_tool": "read_artefact"},
            }
        )
    )
    out = run_cli("run", str(cfg), "--db", str(tmp_path / "t.sqlite"))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "'read_artefact' is not an action of the ecology world" in lines[0]
    assert not (tmp_path / "t.sqlite").exists()


def test_an_agent_folder_with_a_typo_d_field(tmp_path: Path) -> None:
    folder = agent_copy(tmp_path, enabeld=False)  # meant `enabled`
    exp = Experiment(
        name="typo", world="ecology", steps=2, agents=[{"policy": "workflow", "agent": str(folder)}]
    )
    with pytest.raises(ConfigError) as err:
        exp.run(tmp_path / "t.sqlite")
    message = one_line(err)
    assert str(folder / "agent.yaml") in message and "enabeld: unknown field" in message
    assert not (tmp_path / "t.sqlite").exists()


def test_every_agent_disabled(tmp_path: Path) -> None:
    alpha = agent_copy(tmp_path, "alpha_2", enabled=False)
    beta = agent_copy(tmp_path, "beta_2", enabled=False)
    exp = Experiment(
        name="off",
        world="ecology",
        steps=2,
        agents=[
            {"policy": "workflow", "agent": str(alpha)},
            {"policy": "workflow", "agent": str(beta)},
        ],
    )
    with pytest.raises(ConfigError) as err:
        exp.run(tmp_path / "t.sqlite")
    assert "every agent is disabled" in one_line(err)
    assert not (tmp_path / "t.sqlite").exists()


def test_an_llm_agent_in_the_ecology_over_its_quota(tmp_path: Path) -> None:
    # The user sets a small token budget and expects spending to stop there.
    exp = Experiment(
        name="budget",
        world="ecology",
        policy="cognitive",
        agents=1,
        steps=8,
        llm={"mock": True, "force_tool": "read_artifact"},
        world_options={"llm_token_quota": 200},
    )
    run = exp.run(tmp_path / "t.sqlite")
    calls = run.llm_calls
    tokens = (calls["prompt_tokens"] + calls["completion_tokens"]).tolist()
    assert sum(tokens[:-1]) <= 200 < sum(tokens)  # the last call was the one that crossed it
    stopped = run.actions[run.actions["step"] > calls["step"].max()]
    assert len(stopped) == 8 - len(calls)
    assert stopped["error"].str.startswith("over quota: llm tokens").all()
    assert run.validate().status == "ok"


def test_a_code_step_reading_context_and_one_with_a_misspelt_variable(tmp_path: Path) -> None:
    folder = tmp_path / "counter"
    folder.mkdir()
    workflow = {
        "states": ["work"],
        "variables": {"visits": 0},
        "steps": [
            {"name": "count", "type": "code", "code": "visits = context.get('visits', 0) + 1"},
            {"name": "act", "type": "llm", "prompt": "Act."},
        ],
    }
    (folder / "agent.yaml").write_text(yaml.safe_dump({"id": "counter", "workflow": workflow}))
    exp = Experiment(
        name="ctx", world="ecology", steps=3, agents=[{"policy": "workflow", "agent": str(folder)}]
    )
    run = exp.run(tmp_path / "t.sqlite")
    assert not run.actions["metadata"].str.contains('"status":"failed"').any()
    workflow["steps"][0]["code"] = "visits = visit + 1"  # a typo the run would refuse each time
    (folder / "agent.yaml").write_text(yaml.safe_dump({"id": "counter", "workflow": workflow}))
    with pytest.raises(ConfigError) as err:
        exp.run(tmp_path / "t2.sqlite")
    assert "workflow.steps[0].code: unknown name 'visit'" in one_line(err)


def test_resume_from_the_notebooks_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "proj"
    shutil.copytree(ROOT / "data", root / "data", ignore=shutil.ignore_patterns("cassettes"))
    (root / "notebooks").mkdir()
    monkeypatch.chdir(root)
    exp = Experiment.from_file("data/experiments/ecology.yaml", steps=4, checkpoint_every=2)
    trace = TraceDb(root / "part.sqlite")
    exp.build(trace).run(3, finish=False)
    trace.close()
    monkeypatch.chdir(root / "notebooks")
    assert resume_run("../part.sqlite").metadata["status"] == "complete"
    assert Run.open(root / "part.sqlite").validate().status == "ok"
