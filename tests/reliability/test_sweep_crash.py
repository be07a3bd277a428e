"""A sweep of mock-LLM runs killed midway (SIGKILL to the sweep process) resumes: finished runs
are kept, the interrupted one resumes from its checkpoint, and the merged frames equal a sweep
that never stopped. (Random runs: ``tests/test_sweep.py``, the same claim.)"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_sweep import assert_same_frames, checkpoints, group_alive, index_rows
from vivarium import Experiment
from vivarium.sweep import run_sweep

SCRIPT = """
from tests.reliability.test_sweep_crash import GRID, base
from vivarium.sweep import run_sweep
run_sweep(base(), GRID, folder={folder!r}, max_workers=1, progress=False)
"""
GRID = {"agents": [2, 3], "order": ["sorted", "shuffle"]}


def base() -> Experiment:
    return Experiment(
        name="llm-killed",
        policy="cognitive",
        agents=2,
        steps=16,
        seed=8,
        scheduling="simultaneous",
        checkpoint_every=3,
        llm={"mock": True, "mock_latency_ms": 15},
    )


def test_a_sweep_of_mock_llm_runs_killed_midway_resumes(tmp_path: Path) -> None:
    folder = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT.format(folder=str(folder))],
        cwd=ROOT,
        env={**os.environ, "VIVARIUM_PROGRESS": "0"},
        start_new_session=True,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            found = index_rows(folder)
            if any(r[1] == "complete" for r in found) and any(
                r[1] == "running" and checkpoints(folder / r[3]) for r in found
            ):
                break
            if proc.poll() is not None:
                pytest.fail(f"the sweep ended before it was killed: {proc.stderr.read().decode()}")
            time.sleep(0.01)
        else:
            pytest.fail("no run completed within 90 s")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        time.sleep(0.8)  # the workers' watchdog notices within 0.25 s
        leftover = group_alive(proc.pid)
    finally:
        if group_alive(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    assert not leftover, "a worker outlived the killed sweep"

    before = index_rows(folder)
    done = {r[0] for r in before if r[1] == "complete"}
    midway = {r[0] for r in before if r[1] == "running"}
    assert done and len(midway) == 1 and len(before) == 4
    resumed = run_sweep(base(), GRID, folder=folder, max_workers=2, progress=False)
    assert resumed.ok
    for row in resumed.index.itertuples():
        if row.run in done:
            assert row.attempts == 1
        elif row.run in midway:
            assert (row.action, row.attempts) == ("resumed", 2)
    clean = run_sweep(base(), GRID, folder=tmp_path / "clean", backend="inline")
    assert_same_frames(resumed, clean)
    n = sum(a * 16 for a in GRID["agents"]) * len(GRID["order"])
    assert len(resumed.actions) == len(resumed.llm_calls) == n  # nothing lost
