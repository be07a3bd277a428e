"""``vivarium.trace.status``: finished, resumable and first fallback, asked of a trace file."""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path

from vivarium import Experiment
from vivarium.errors import RunHealthWarning
from vivarium.experiment.build import POLICIES, register_policy
from vivarium.trace.status import first_fallback, is_finished, is_resumable
from vivarium.types import ActionRequest


def _run(tmp_path: Path) -> tuple[Path, str]:
    exp = Experiment(name="status", agents=2, steps=3, seed=5, checkpoint_every=1)
    run = exp.run(tmp_path / "status.sqlite", progress=False)
    return run.path, run.run_id


def test_a_complete_trace_is_finished_and_not_resumable(tmp_path: Path) -> None:
    path, run_id = _run(tmp_path)
    assert is_finished(path, run_id)
    assert not is_resumable(path, run_id)
    assert not is_finished(path, "another-run")  # a trace of another run is not this one's
    assert first_fallback(path) is None  # random agents never fall back


def test_an_interrupted_trace_with_committed_steps_is_resumable(tmp_path: Path) -> None:
    path, run_id = _run(tmp_path)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE runs SET status = 'interrupted'")
    assert not is_finished(path, run_id)
    assert is_resumable(path, run_id)
    assert not is_resumable(path, "another-run")
    with sqlite3.connect(path) as con:
        con.execute("DELETE FROM checkpoints")
    # No checkpoint is needed: a resume re-executes the committed steps from the trace.
    assert is_resumable(path, run_id)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE runs SET steps_done = 0")
    assert not is_resumable(path, run_id)  # nothing committed to keep: the run is redone


class _BrokenOnStep2:
    """A policy that raises on step 2: that step's decisions fall back."""

    def decide(self, *, run_id, time_step, agent_id, observation):  # type: ignore[no-untyped-def]
        if time_step == 2:
            raise RuntimeError("broken on step 2")
        return ActionRequest(
            run_id=run_id, time_step=time_step, agent_id=agent_id, action_name="noop"
        )


def test_the_first_fallback_is_named(tmp_path: Path) -> None:
    register_policy("broken_on_step_2", lambda config, agent, shared: _BrokenOnStep2())
    try:
        exp = Experiment(name="broken", policy="broken_on_step_2", agents=2, steps=3, seed=5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RunHealthWarning)
            run = exp.run(tmp_path / "broken.sqlite", progress=False)
    finally:
        POLICIES.pop("broken_on_step_2", None)
    fallback = first_fallback(run.path)
    assert fallback is not None
    assert (fallback.step, fallback.agent_id) == (2, "agent_000")
    assert "broken on step 2" in (fallback.error or "")


def test_missing_or_foreign_files_answer_no(tmp_path: Path) -> None:
    missing = tmp_path / "missing.sqlite"
    foreign = tmp_path / "foreign.sqlite"
    foreign.write_text("not a database")
    for path in (missing, foreign):
        assert not is_finished(path, "x")
        assert not is_resumable(path, "x")
        assert first_fallback(path) is None
