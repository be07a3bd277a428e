"""The control panel, driven without a browser: set values, click Run, read the outputs."""

from __future__ import annotations

import base64
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from vivarium import Experiment  # noqa: E402
from vivarium.widgets import ControlPanel  # noqa: E402


def test_click_run_makes_a_run_and_a_figure(tmp_path: Path) -> None:
    panel = Experiment(name="panel").controls(folder=tmp_path)
    assert isinstance(panel, ControlPanel)
    panel.agents.value = 3
    panel.steps.value = 5
    panel.seed.value = 11
    panel.run_button.click()
    run = panel.run_result
    assert run is not None and len(run.actions) == 15
    assert run.metadata["seed"] == "11"
    assert panel.progress.value == 5 and panel.progress.max == 5
    assert panel.progress.bar_style == "success"
    assert "15 decisions" in panel.status.value
    (output,) = panel.figure.outputs
    png = base64.b64decode(output["data"]["image/png"])
    assert png.startswith(b"\x89PNG")
    ax = panel.last_figure.axes[0]
    assert ax.get_xlabel() == "step" and ax.get_ylabel() == "agent"
    assert "<table" in panel.summary.value and "decisions" in panel.summary.value


def test_llm_fields_show_only_for_llm_policies(tmp_path: Path) -> None:
    panel = ControlPanel(Experiment(), folder=tmp_path)
    assert panel.llm_box.layout.display == "none"
    panel.policy.value = "cognitive"
    assert panel.llm_box.layout.display == ""


def test_llm_run_from_the_panel(tmp_path: Path) -> None:
    panel = ControlPanel(Experiment(name="llm"), folder=tmp_path)
    panel.policy.value = "cognitive"
    panel.scheduling.value = "simultaneous"
    panel.agents.value = 2
    panel.steps.value = 3
    panel.mock.value = True
    panel.cache_mode.value = "record"
    run = panel.run()
    assert run is not None and len(run.llm_calls) == 6
    assert (tmp_path / "llm.cassette").exists()


def test_errors_show_in_the_panel_not_as_tracebacks(tmp_path: Path) -> None:
    panel = ControlPanel(Experiment(), folder=tmp_path)
    panel.agents.value = 0  # a config error
    assert panel.run() is None
    assert "error" in panel.status.value and "\n" not in panel.status.value
    assert panel.progress.bar_style == "danger"
    assert panel.run_button.disabled is False


# -- what the panel offers, and what it refuses -------------------------------------------------
ROOT = Path(__file__).resolve().parent.parent
ECOLOGY_ACTIONS = {"noop", "read_artifact", "write_artifact", "invoke_artifact", "post_message"}


def _error_line(panel: ControlPanel) -> str:
    assert panel.progress.bar_style == "danger"
    assert "error" in panel.status.value and "\n" not in panel.status.value
    return panel.status.value


def test_workflow_is_offered_only_with_agent_folders(tmp_path: Path) -> None:
    plain = ControlPanel(Experiment(), folder=tmp_path)
    assert "workflow" not in plain.policy.options
    assert {"random", "cognitive"} <= set(plain.policy.options)
    eco = Experiment.from_file(ROOT / "data/experiments/ecology.yaml").controls(folder=tmp_path)
    # the folders' agents are listed, fixed to the world they were written for
    assert "alpha_2" in eco.groups.value and "beta_2" in eco.groups.value
    assert eco.world.disabled and eco.world.value == "ecology"
    assert "workflow" not in eco.policy.options  # workflow agents come from their folders


def test_random_agents_in_the_ecology_draw_the_ecologys_actions(tmp_path: Path) -> None:
    panel = ControlPanel(Experiment(name="eco_random"), folder=tmp_path)
    panel.world.value = "ecology"
    panel.agents.value = 4
    panel.steps.value = 6
    run = panel.run()
    assert run is not None, panel.status.value
    actions = run.actions
    assert set(actions["action"]) <= ECOLOGY_ACTIONS
    assert len(set(actions["action"])) >= 3  # not only noop
    assert not actions["error"].fillna("").str.contains("unknown action").any()


def test_the_ecology_panel_keeps_its_workflow_agents_when_agents_change(tmp_path: Path) -> None:
    exp = Experiment.from_file(ROOT / "data/experiments/ecology.yaml")
    panel = exp.controls(folder=tmp_path)
    assert panel.agents.value == 5
    assert Experiment(panel.config()).run_id == exp.run_id  # untouched: the file's own run
    panel.agents.value = 6
    panel.steps.value = 2
    config = panel.config()
    groups = config.agents
    assert [g.agent for g in groups if g.agent] == [g.agent for g in exp.config.agents if g.agent]
    assert sum(g.count for g in groups if not g.agent) == 4 and config.agent_count == 6
    run = panel.run()
    assert run is not None, panel.status.value
    policies = dict(zip(run.agents["agent_id"], run.agents["policy"], strict=True))
    assert policies["alpha_2"] == "workflow" and policies["beta_2"] == "workflow"
    assert sorted(policies.values()).count("random") == 4
    # fewer agents than the folders hold is refused, in one line, and nothing runs
    panel.agents.value = 1
    assert panel.run() is None
    assert "agents: at least 2" in _error_line(panel)


def test_zero_steps_is_a_run_and_negative_values_are_refused(tmp_path: Path) -> None:
    panel = ControlPanel(Experiment(name="zero"), folder=tmp_path)
    panel.steps.value = 0
    assert panel.steps.value == 0  # not clamped to 1
    run = panel.run()
    assert run is not None and len(run.actions) == 0
    assert panel.progress.bar_style == "success"
    for field, value in (("steps", -3), ("agents", 0), ("seed", -1)):
        fresh = ControlPanel(Experiment(name="bad"), folder=tmp_path / field)
        getattr(fresh, field).value = value
        assert getattr(fresh, field).value == value  # shown as typed, not silently clamped
        assert fresh.run() is None
        line = _error_line(fresh)
        assert f"{field}:" in line
        assert not (tmp_path / field).exists() or not any((tmp_path / field).iterdir())


def test_results_are_marked_stale_when_the_settings_change(tmp_path: Path) -> None:
    panel = ControlPanel(Experiment(name="stale", agents=2, steps=2), folder=tmp_path)
    panel.run()
    assert "<table" in panel.summary.value and "settings changed" not in panel.summary.value
    panel.seed.value = 99
    assert "settings changed since this result" in panel.summary.value
    assert "<table" in panel.summary.value  # the old result stays, marked
    panel.run()
    assert "settings changed" not in panel.summary.value


def test_api_base_and_key_fields_and_the_key_is_never_shown(tmp_path: Path) -> None:
    secret = "sk-panel-secret-4242"
    panel = ControlPanel(Experiment(name="keyed", agents=1, steps=1), folder=tmp_path)
    assert panel.api_base.layout.display == "none" or panel.llm_box.layout.display == "none"
    panel.policy.value = "cognitive"
    assert panel.api_base in panel.llm_box.children and panel.api_key in panel.llm_box.children
    panel.mock.value = False
    panel.model.value = "openai/tiny"
    panel.api_base.value = "http://127.0.0.1:9/v1"  # nothing listens on port 9
    panel.api_key.value = secret
    assert panel.api_key.value == ""  # taken out of the widget (and its saved state) at once
    assert "set" in panel.api_key.placeholder
    config = panel.config()
    assert config.llm.api_base == "http://127.0.0.1:9/v1"
    assert config.llm.api_key.get_secret_value() == secret
    assert secret not in repr(config) and secret not in config.model_dump_json()
    assert panel.run() is None  # the server is not there: one line, before any step
    line = _error_line(panel)
    assert "cannot reach" in line and secret not in line
    for path in tmp_path.rglob("*"):
        assert not path.is_file() or secret.encode() not in path.read_bytes()


def test_an_unhealthy_run_is_shown_in_red(tmp_path: Path) -> None:
    from vivarium.build import POLICIES, register_policy

    class Exploding:
        def decide(self, **_: object) -> None:
            raise RuntimeError("boom")

    register_policy("panel_exploding", lambda config, agent, shared: Exploding())
    try:
        panel = ControlPanel(Experiment(name="sick", agents=2, steps=2), folder=tmp_path)
        panel.policy.value = "panel_exploding"
        run = panel.run()
        assert run is not None and not run.health.ok
        assert "color:#b00" in panel.status.value
        assert "4 of 4 decisions" in panel.status.value  # health's own line
        assert panel.progress.bar_style == "warning"
    finally:
        POLICIES.pop("panel_exploding", None)


def test_each_click_keeps_the_previous_runs_trace(tmp_path: Path) -> None:
    from vivarium import Run

    panel = ControlPanel(Experiment(name="clicks", agents=2, steps=2, seed=1), folder=tmp_path)
    first = panel.run()
    panel.seed.value = 2
    second = panel.run()
    assert first is not None and second is not None and first.path != second.path
    assert Run.open(first.path).metadata["seed"] == "1"
    assert Run.open(second.path).metadata["seed"] == "2"
    assert str(second.path) in panel.status.value  # the panel says where this run went
    assert [str(r.path) for r in panel.runs] == [str(first.path), str(second.path)]


def test_an_action_space_for_another_world_is_refused(tmp_path: Path) -> None:
    exp = Experiment(name="spaced", agents=2, steps=2, action_space=["noop", "emit_event"])
    panel = exp.controls(folder=tmp_path)
    assert Experiment(panel.config()).run_id == exp.run_id
    assert panel.run() is not None
    panel.world.value = "ecology"
    assert panel.run() is None
    line = _error_line(panel)
    assert "action_space: &#x27;emit_event&#x27; is not an action of the ecology world" in line
