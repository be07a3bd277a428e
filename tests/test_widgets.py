"""The control panel, driven without a browser: set values, click Run, read the outputs."""

from __future__ import annotations

import base64
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from vivarium import Experiment  # noqa: E402
from vivarium.widgets import ControlPanel  # noqa: E402
from vivarium.worlds.boltzmann import BoltzmannWorld  # noqa: E402
from vivarium.worlds.grid import Grid  # noqa: E402


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
    # the mock's replies in a cassette of their own: a model's cassette never holds them
    assert (tmp_path / "llm-mock.cassette").exists()
    assert not (tmp_path / "llm.cassette").exists()


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


def test_several_servers_show_as_a_comma_list_and_come_back_as_a_list(tmp_path: Path) -> None:
    servers = ["http://127.0.0.1:9/v1", "http://127.0.0.1:10/v1"]
    exp = Experiment(
        name="many", policy="cognitive", agents=1, steps=1,
        llm={"model": "openai/tiny", "api_base": servers},
    )  # fmt: skip
    panel = ControlPanel(exp, folder=tmp_path)
    assert panel.api_base.value == "http://127.0.0.1:9/v1, http://127.0.0.1:10/v1"
    assert panel.config().llm.api_base == servers
    panel.api_base.value = "http://127.0.0.1:9/v1"
    assert panel.config().llm.api_base == "http://127.0.0.1:9/v1"
    assert panel.run() is None  # neither server is there: one line, before any step
    assert "cannot reach" in _error_line(panel)


def test_an_unhealthy_run_is_shown_in_red(tmp_path: Path) -> None:
    from vivarium.experiment.build import POLICIES, register_policy

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


class _WalkingWealth(BoltzmannWorld):
    """Boltzmann wealth on a 5x2 torus: a giver steps one cell along x with every unit given."""

    agent_reporters = {  # noqa: RUF012
        "wealth": lambda w: [w.wealth[a] for a in w.agent_ids],
        "x": lambda w: [w.grid.cell_of(a)[0] for a in w.agent_ids],
    }

    def __init__(self, agent_ids: list[str]) -> None:
        super().__init__(agent_ids, starting_wealth=2)
        self.grid = Grid(5, 2)
        for i, agent in enumerate(agent_ids):
            self.grid.place(agent, (i % 5, i // 5))

    def give(self, giver: str, receiver: str) -> None:
        super().give(giver, receiver)
        x, y = self.grid.cell_of(giver)
        self.grid.move(giver, (x + 1, y))


def test_a_grid_world_is_drawn_live_every_k_steps(tmp_path: Path) -> None:
    from vivarium.experiment.build import WORLDS, register_world

    register_world(
        "panel_walkers", lambda config, plan, shared: _WalkingWealth([p.agent_id for p in plan])
    )
    try:
        experiment = Experiment(name="walk", world="panel_walkers", policy="boltzmann")
        panel = ControlPanel(experiment, folder=tmp_path, world_every=3)
        assert panel.world_box.layout.display == "none"
        panel.agents.value = 6
        panel.steps.value = 7
        run = panel.run()
        assert run is not None
        assert panel.world_steps == [2, 5, 6]  # every 3 steps, and after the last
        assert panel.world_box.layout.display == ""
        assert list(panel.color_by.options) == ["", "wealth"]  # x is a position, not a colour
        assert panel.color_by.value == "wealth"
        (output,) = panel.world_figure.outputs
        assert base64.b64decode(output["data"]["image/png"]).startswith(b"\x89PNG")
        ax = panel.last_world_figure.axes[0]
        assert ax.get_title(loc="left") == "step 6"
        # Where each agent should be, from the trace alone: start cell, one x step per unit given.
        actions = run.actions
        given = actions[(actions["action"] == "give") & actions["success"].astype(bool)]
        moves = given.groupby("agent_id").size()
        order = panel_order(run)
        assert len(order) == 6 and moves.sum() > 0
        expected = [((i % 5 + int(moves.get(a, 0))) % 5, i // 5) for i, a in enumerate(order)]
        (dots,) = ax.collections
        drawn = sorted((round(x), round(y)) for x, y in dots.get_offsets())
        assert drawn == sorted(expected)
        # coloured by final wealth: conserved, so the colours sum to what the agents started with
        assert sum(dots.get_array().tolist()) == 2 * 6
        # another colour after the run redraws the last step without a reporter
        panel.color_by.value = ""
        assert panel.world_steps[-1] == 6 and not panel.last_world_figure.axes[0].get_legend()
        assert len(panel.last_world_figure.axes) == 1  # no colourbar
    finally:
        WORLDS.pop("panel_walkers", None)


def panel_order(run: object) -> list[str]:
    """The run's agents in plan order (the world's ``agent_ids``)."""
    agents = run.agents  # type: ignore[attr-defined]
    sort = "agent_idx" if "agent_idx" in agents.columns else "agent_id"
    return list(agents.sort_values(sort)["agent_id"])


def test_a_world_without_a_grid_shows_no_world_view(tmp_path: Path) -> None:
    panel = ControlPanel(Experiment(name="plain", agents=2, steps=3), folder=tmp_path)
    assert panel.run() is not None
    assert panel.world_steps == [] and panel.world_box.layout.display == "none"
    assert panel.world_figure.outputs == ()


def test_world_every_must_be_a_count() -> None:
    import pytest

    from vivarium.errors import ConfigError

    with pytest.raises(ConfigError, match="world_every must be a whole number >= 1"):
        ControlPanel(Experiment(), world_every=0)


class _Misplaced(BoltzmannWorld):
    """A world whose positions cannot be drawn: the view says so and the run goes on."""

    def positions(self) -> dict[str, object]:
        return dict.fromkeys(self.agent_ids, "nowhere")


def test_a_world_view_that_fails_does_not_stop_the_run(tmp_path: Path) -> None:
    from vivarium.experiment.build import WORLDS, register_world

    register_world(
        "panel_misplaced", lambda config, plan, shared: _Misplaced([p.agent_id for p in plan])
    )
    try:
        # Boltzmann's own agents: random ones would name emit_event, which this world lacks.
        experiment = Experiment(
            name="lost", world="panel_misplaced", policy="boltzmann", agents=2, steps=2
        )
        panel = ControlPanel(experiment, folder=tmp_path, world_every=1)
        run = panel.run()
        assert run is not None and len(run.actions) == 4
        assert panel.world_steps == [0, 1] and panel.last_world_figure is None
        (output,) = panel.world_figure.outputs
        assert output["text"].startswith("world_view: a position is (x, y)")
        assert "done" in panel.status.value
    finally:
        WORLDS.pop("panel_misplaced", None)
