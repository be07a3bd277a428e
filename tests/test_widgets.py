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
    panel.policy.value = "workflow"  # a workflow agent needs an agent folder: a config error
    assert panel.run() is None
    assert "error" in panel.status.value and "\n" not in panel.status.value
    assert panel.progress.bar_style == "danger"
    assert panel.run_button.disabled is False
