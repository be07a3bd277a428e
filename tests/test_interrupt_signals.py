"""Ctrl-C and SIGTERM leave a trace marked ``interrupted``, never ``running``.

The new-user pass of issue 16: ``timeout -s INT`` (which signals the process, then its whole
process group: two SIGINTs) once left a trace ``running`` though ``vvm`` said "interrupted";
SIGTERM always did (exit 143, no message). Signals are sent to this process at chosen points
(``signal.raise_signal``), so each window is hit every time.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vivarium import Experiment, Run
from vivarium.engine.interrupts import interrupts_deferred
from vivarium.trace.db import TraceDb
from vivarium.types import ActionRequest

# Every test here sends SIGINT to this process: it must raise, however the suite was started.
pytestmark = pytest.mark.usefixtures("ctrl_c")


class SignalAt:
    """Posts each step (the signals come from the engine, see ``_signals``).

    The signal is not sent by the policy itself: what a policy reads is part of its run's
    identity (a class attribute changed between the run and its resume would be other code).
    """

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """Post."""
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name="post_message",
            arguments={"content": "hi"},
        )


class _Signals:
    """Which signal the engine sends to this process, and before which step (None: none)."""

    SIGNAL: int = signal.SIGINT
    SIGNAL_STEP: int | None = 3


@pytest.fixture(autouse=True)
def _defaults(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from vivarium.engine.engine import WorldEngine

    monkeypatch.setattr(_Signals, "SIGNAL", signal.SIGINT)
    monkeypatch.setattr(_Signals, "SIGNAL_STEP", 3)
    original = WorldEngine.step

    def step(self: WorldEngine, t: int | None = None, **kwargs: Any) -> Any:
        if (self.next_step if t is None else t) == _Signals.SIGNAL_STEP:
            signal.raise_signal(_Signals.SIGNAL)
        return original(self, t, **kwargs)

    monkeypatch.setattr(WorldEngine, "step", step)
    yield


def _exp(**kw: Any) -> Experiment:
    fields = {"name": "sig", "policy": SignalAt, "agents": 2, "steps": 8, "checkpoint_every": 2}
    return Experiment(**{**fields, **kw})


def _status(path: Path) -> tuple[str, int]:
    con = sqlite3.connect(path)
    try:
        status, done = con.execute("SELECT status, steps_done FROM runs").fetchone()
    finally:
        con.close()
    return status, done


def test_a_second_sigint_while_the_end_is_recorded_is_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The second SIGINT of `timeout -s INT` lands while the first one's end is recorded.
    original = TraceDb.finish_run

    def finish_run(self: TraceDb, *args: Any, **kwargs: Any) -> None:
        signal.raise_signal(signal.SIGINT)
        original(self, *args, **kwargs)

    monkeypatch.setattr(TraceDb, "finish_run", finish_run)
    path = tmp_path / "t.sqlite"
    with pytest.raises(KeyboardInterrupt):
        _exp().run(path, progress=False)
    assert _status(path) == ("interrupted", 3)
    monkeypatch.setattr(TraceDb, "finish_run", original)
    monkeypatch.setattr(_Signals, "SIGNAL_STEP", None)
    # and it resumes, as an interrupted run does
    run = Run.open(path).resume(progress=False, policy=SignalAt)
    assert run.metadata["status"] == "complete" and run.health.ok


def test_a_sigint_while_the_run_is_recorded_marks_it_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: the KeyboardInterrupt left the run record unwritten, or written as running.
    original = TraceDb.begin_run

    def begin_run(self: TraceDb, *args: Any, **kwargs: Any) -> None:
        signal.raise_signal(signal.SIGINT)
        original(self, *args, **kwargs)

    monkeypatch.setattr(TraceDb, "begin_run", begin_run)
    monkeypatch.setattr(_Signals, "SIGNAL_STEP", None)
    path = tmp_path / "t.sqlite"
    with pytest.raises(KeyboardInterrupt):
        _exp().run(path, progress=False)
    assert _status(path) == ("interrupted", 0)


class _Killed(Exception):  # noqa: N818 - what SIGTERM does here when nothing handles it
    pass


def test_sigterm_stops_a_run_as_ctrl_c_does_and_the_handler_is_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def killed(signum: int, frame: Any) -> None:  # stands for "the process dies"
        raise _Killed

    previous = signal.signal(signal.SIGTERM, killed)
    try:
        monkeypatch.setattr(_Signals, "SIGNAL", signal.SIGTERM)
        path = tmp_path / "t.sqlite"
        with pytest.raises(KeyboardInterrupt) as info:
            _exp().run(path, progress=False)
        assert getattr(info.value, "signum", None) == signal.SIGTERM
        assert _status(path) == ("interrupted", 3)
        assert signal.getsignal(signal.SIGTERM) is killed  # restored
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        # the resume is covered too, and restores them as well
        monkeypatch.setattr(_Signals, "SIGNAL_STEP", 5)
        with pytest.raises(KeyboardInterrupt):
            Run.open(path).resume(progress=False, policy=SignalAt)
        assert _status(path)[0] == "interrupted"
        assert signal.getsignal(signal.SIGTERM) is killed
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_signal_inside_a_deferred_block_is_raised_when_it_ends() -> None:
    done = []
    with pytest.raises(KeyboardInterrupt), interrupts_deferred():
        signal.raise_signal(signal.SIGINT)
        done.append("after the signal")  # the block is not cut
    assert done == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _wait_for_steps(path: Path, proc: subprocess.Popen[str]) -> None:
    """Until the run has committed a step (no time is asserted: the cap only ends a hang)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if path.exists() and _status(path)[1] > 0:
                return
        except (sqlite3.Error, TypeError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"the run never started: {proc.poll()}")


@pytest.mark.parametrize(("sig", "code", "word"), [(signal.SIGTERM, 143, " by SIGTERM")])
def test_vvm_marks_the_trace_interrupted_on_sigterm(
    tmp_path: Path, sig: int, code: int, word: str
) -> None:
    path = tmp_path / "t.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-m", "vivarium.cli", "phase1", "--steps", "100000000", "--agents"]
        + ["2", "--db", str(path), "--no-progress", "--checkpoint-every", "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_steps(path, proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert err.strip() == f"vvm phase1: interrupted{word}; committed steps are kept"
    assert _status(path)[0] == "interrupted"
