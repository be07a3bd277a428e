"""Running one config into a trace (``vivarium.experiment.runner``), below the sweep, panel and facade."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vivarium import Experiment, Run
from vivarium.experiment.runner import progress_enabled, resume_run, run_experiment
from vivarium.trace.run import TraceRun

HIGHER = ("vivarium.sweep", "vivarium.widgets", "vivarium.facade")


def _loaded_after(module: str) -> set[str]:
    """The vivarium modules a fresh interpreter has loaded after importing ``module``."""
    code = (
        f"import sys, {module}\n"
        "print('\\n'.join(m for m in sys.modules if m.startswith('vivarium')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_the_runner_imports_nothing_above_it() -> None:
    loaded = _loaded_after("vivarium.experiment.runner")
    assert "vivarium.experiment.runner" in loaded
    above = sorted(m for m in loaded if m.startswith(HIGHER))
    assert not above, f"vivarium.experiment.runner imports {above}"


def test_the_panel_does_not_import_the_experiment_facade() -> None:
    loaded = _loaded_after("vivarium.widgets")
    assert "vivarium.widgets" in loaded
    assert not any(m.startswith("vivarium.facade") for m in loaded)


def test_a_config_runs_into_a_trace_read_back_as_the_callers_run(tmp_path: Path) -> None:
    config = Experiment(name="plain", agents=2, steps=3, seed=4).config
    run = run_experiment(config, tmp_path / "plain.sqlite", progress=False)
    assert type(run) is TraceRun  # the trace's own reader by default
    assert run.metadata["status"] == "complete" and len(run.actions) == 6
    again = run_experiment(config, tmp_path / "plain.sqlite", progress=False, open_run=Run.open)
    assert type(again) is Run and again.config == config
    # The same run (same run id): its trace is replaced, not appended to.
    assert again.path == run.path and again.run_id == run.run_id and len(again.actions) == 6


def test_resume_of_a_finished_run_opens_it_with_the_callers_reader(tmp_path: Path) -> None:
    done = Experiment(name="done", agents=2, steps=2).run(tmp_path / "done.sqlite", progress=False)
    assert type(resume_run(done.path, progress=False)) is TraceRun
    assert type(done.resume(progress=False)) is Run


@pytest.mark.parametrize(
    ("given", "env", "shown"),
    [(True, "0", True), (False, "1", False), (None, "0", False), (None, "off", False)]
    + [(None, "1", True), (None, None, True)],
)
def test_progress_bars_follow_the_call_then_the_environment(
    monkeypatch: pytest.MonkeyPatch, given: bool | None, env: str | None, shown: bool
) -> None:
    if env is None:
        monkeypatch.delenv("VIVARIUM_PROGRESS", raising=False)
    else:
        monkeypatch.setenv("VIVARIUM_PROGRESS", env)
    assert progress_enabled(given) is shown
