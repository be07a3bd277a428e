"""The public API: Experiment, Run, configs, light import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import vivarium
from vivarium import ConfigError, Experiment, Run
from vivarium.experiment.config import ExperimentConfig, load_config

ROOT = Path(__file__).resolve().parents[1]


def test_import_is_light() -> None:
    code = (
        "import sys, vivarium\n"
        "heavy = ['pandas', 'polars', 'litellm', 'langgraph', 'ray', 'matplotlib', 'ipywidgets', 'pyarrow', 'numpy']\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == ""


def test_public_names() -> None:
    for name in (
        "Experiment",
        "Run",
        "stable_agent_seed",
        "WorldEngine",
        "WorldEngineConfig",
        "InMemoryChannel",
        "TraceDb",
        "RunMetadata",
        "RandomAgentPolicy",
        "ActionRequest",
    ):
        assert getattr(vivarium, name) is not None
    with pytest.raises(AttributeError):
        vivarium.NoSuchThing  # noqa: B018


def test_experiment_run_returns_run_with_frames(tmp_path: Path) -> None:
    exp = Experiment(name="demo", agents=5, steps=20, seed=42)
    run = exp.run(tmp_path / "demo.sqlite")
    assert isinstance(run, Run)
    assert len(run.actions) == 100 and run.metadata["status"] == "complete"
    assert run.run_id == exp.run_id and run.run_id.startswith("demo-")
    assert "agents=5" in repr(run) and "<table>" in run._repr_html_()
    again = Run.open(tmp_path / "demo.sqlite")
    assert again.actions.equals(run.actions)
    assert run.config == exp.config.model_copy(update={"db": None})


def test_default_db_goes_to_runs_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run = Experiment(name="here", agents=1, steps=2).run()
    assert run.path == Path("runs/here.sqlite") and run.path.exists()


def test_bad_arguments_raise_one_line_config_error() -> None:
    with pytest.raises(ConfigError) as err:
        Experiment(agents=0, steps=-1)
    message = str(err.value)
    assert "\n" not in message
    assert "agents" in message and "steps" in message


def test_unknown_names_are_one_line_when_the_run_is_built(tmp_path: Path) -> None:
    # Config validation does not know which names exist; building the run checks them, before
    # the trace file is touched, in one line that lists the known names.
    db = tmp_path / "never.sqlite"
    with pytest.raises(ConfigError) as err:
        Experiment(world="mars", agents=[{"policy": "random"}, {"policy": "genius"}]).run(db)
    message = str(err.value)
    assert "\n" not in message and not db.exists()
    assert message.startswith("config: world: unknown world 'mars' (known: boltzmann, channel,")
    assert "agents.1.policy: unknown policy 'genius' (known: boltzmann, cognitive," in message


def test_config_from_yaml_and_json(tmp_path: Path) -> None:
    y = tmp_path / "c.yaml"
    y.write_text("name: y\nagents: 3\nseed: 7\norder: shuffle\n")
    cfg = load_config(y)
    assert isinstance(cfg, ExperimentConfig) and cfg.agents == 3 and cfg.order == "shuffle"
    j = tmp_path / "c.json"
    j.write_text(json.dumps({"name": "j", "steps": 2}))
    exp = Experiment.from_file(j, agents=2)
    assert exp.config.steps == 2 and exp.config.agents == 2


def test_progress_bar_counts_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Experiment(name="bar", agents=2, steps=7).run(tmp_path / "b.sqlite", progress=True)
    err = capsys.readouterr().err
    assert "7/7" in err


def test_on_step_callback_sees_every_step(tmp_path: Path) -> None:
    seen: list[int] = []
    Experiment(agents=2, steps=5).run(tmp_path / "cb.sqlite", on_step=lambda t, rec: seen.append(t))
    assert seen == [0, 1, 2, 3, 4]
