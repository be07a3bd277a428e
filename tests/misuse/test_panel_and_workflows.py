"""Misuse of the control panel and of workflow agents: each ends in a right result or one line,
and nothing already made is lost."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import matplotlib
import pytest
import yaml

matplotlib.use("Agg")

from vivarium import Experiment, Run, TraceDb, WorldEngine, WorldEngineConfig  # noqa: E402
from vivarium.errors import ConfigError  # noqa: E402
from vivarium.widgets import ControlPanel  # noqa: E402
from vivarium.workflow import load_agent  # noqa: E402


def _one_error_line(panel: ControlPanel) -> str:
    status = panel.status.value
    assert "error" in status and "\n" not in status and "Traceback" not in status
    assert panel.progress.bar_style == "danger" and not panel.run_button.disabled
    return status


def test_workflow_policy_without_agent_folders(tmp_path: Path) -> None:
    # A new user writes policy="workflow" with a count of agents: there is no folder to read.
    exp = Experiment(name="wf", policy="workflow", agents=2, steps=2)
    with pytest.raises(ConfigError) as info:
        exp.run(tmp_path / "wf.sqlite", progress=False)
    assert "\n" not in str(info.value) and "agent: <folder with agent.yaml>" in str(info.value)
    assert not (tmp_path / "wf.sqlite").exists()  # refused before a file was made
    # The panel shows the configured policy so that Run says what is wrong, in one line; a
    # panel of a plain experiment never offers it.
    panel = exp.controls(folder=tmp_path / "panel")
    assert panel.run() is None
    assert "a workflow group needs" in _one_error_line(panel)
    assert "workflow" not in Experiment().controls(folder=tmp_path).policy.options


def test_negative_steps_in_the_panel_and_the_engine(tmp_path: Path) -> None:
    panel = Experiment(name="neg", agents=2, steps=3).controls(folder=tmp_path)
    first = panel.run()
    assert first is not None and len(first.actions) == 6
    panel.steps.value = -5
    assert panel.steps.value == -5  # shown as typed, not clamped to a bound
    assert panel.run() is None
    assert "steps" in _one_error_line(panel)
    assert len(Run.open(first.path).actions) == 6  # the earlier run is untouched
    # the engine itself refuses it too, before recording anything
    db = tmp_path / "engine.sqlite"
    trace = TraceDb(db)
    from vivarium.policies.random import RandomAgentPolicy
    from vivarium.worlds import InMemoryChannel

    engine = WorldEngine(
        WorldEngineConfig(run_id="neg"),
        {"a": RandomAgentPolicy.from_seed(1)},
        InMemoryChannel(),
        trace_db=trace,
    )
    with pytest.raises(ConfigError, match=r"^steps: -5 is not a number of steps"):
        engine.run(-5)
    trace.close()
    if db.exists() and db.stat().st_size:
        with sqlite3.connect(db) as con:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
            assert (
                "runs" not in tables or con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
            )


def test_changing_the_world_after_a_run(tmp_path: Path) -> None:
    panel = Experiment(name="switch", agents=3, steps=4, seed=5).controls(folder=tmp_path)
    channel = panel.run()
    assert channel is not None
    panel.world.value = "ecology"
    # the channel result stays on screen, marked as not matching the form any more
    assert "settings changed since this result" in panel.summary.value
    ecology = panel.run()
    assert ecology is not None, panel.status.value
    # random agents in the ecology act in the ecology: none of the channel's emit_event
    assert "emit_event" not in set(ecology.actions["action"])
    assert not ecology.actions["error"].fillna("").str.contains("unknown action").any()
    # both traces kept, each in its own file, and the panel said where the second went
    assert channel.path != ecology.path and Run.open(channel.path).metadata["world"] == "channel"
    assert str(ecology.path) in panel.status.value


def test_a_transition_with_an_empty_condition(tmp_path: Path) -> None:
    folder = tmp_path / "agent"
    folder.mkdir()
    workflow = {
        "states": ["work", "review"],
        "transitions": [
            "work -> review",
            {"from": "review", "to": "work", "condition": "   ", "routine": True},
        ],
        "steps": [{"name": "act", "type": "llm", "in_state": "work", "prompt": "Act."}],
    }
    (folder / "agent.yaml").write_text(yaml.safe_dump({"id": "e", "workflow": workflow}))
    with pytest.raises(ConfigError) as info:
        load_agent(folder)
    assert str(info.value) == (
        f"{folder / 'agent.yaml'}: workflow.transitions[1].condition: the condition is empty "
        "(write an expression, or leave condition out)"
    )
