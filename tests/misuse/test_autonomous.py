"""Misuse of autonomous mode: each ends in a right result or one clear line, and committed
steps are never lost."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tests.support.signals import ctrl_c_in_child
from vivarium import Experiment, Run


def _config(tmp_path: Path, agents: int = 50) -> Path:
    cfg = tmp_path / "experiment.yaml"
    cfg.write_text(f"name: baseline\nworld: channel\npolicy: random\nagents: {agents}\nseed: 7\n")
    return cfg


def _rows(db: Path) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return [
            row
            for table in ("runs", "agents", "steps", "messages")
            for row in con.execute(f"SELECT * FROM {table} ORDER BY rowid")
        ]
    finally:
        con.close()


def test_duration_with_a_unit_is_one_line(tmp_path: Path) -> None:
    """`--duration 5min`: seconds are a number; nothing runs, no trace is made."""
    db = tmp_path / "x.sqlite"
    out = run_cli("run", str(_config(tmp_path)), "--duration", "5min", "--db", str(db))
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert "--duration" in lines[0] and "'5min'" in lines[0] and not db.exists()


def test_duration_shorter_than_think_time(tmp_path: Path) -> None:
    """Agents start one after another within their first think time (2 s / 4 agents apart);
    in a 0.5 s run only the first has started, and it acts once. A complete, right run."""
    run = Experiment(
        name="short", agents=4, seed=3, mode="autonomous",
        autonomous={"duration": 0.5, "think_s": 2.0},
    ).run(tmp_path / "short.sqlite")  # fmt: skip
    assert run.metadata["status"] == "complete" and run.validate().status == "ok"
    assert run.actions["agent_id"].tolist() == ["agent_000"]
    assert run.steps["clock"].tolist() == [0.0]


@pytest.mark.timeout(180)
def test_ctrl_c_keeps_committed_steps_and_resume_finishes_the_run(tmp_path: Path) -> None:
    """Ctrl-C during `vvm run --duration 300`: exit 130, one line, the committed steps stay and
    the trace says interrupted; `vvm resume` then ends with the rows of an uninterrupted run
    (it redoes the autonomous run, never turning it into a stepped one)."""
    cfg, db = _config(tmp_path), tmp_path / "cut.sqlite"
    env = {**os.environ, "VIVARIUM_PROGRESS": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "vivarium.cli", "run", str(cfg), "--duration", "300", "--db", str(db)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=ctrl_c_in_child,
    )  # fmt: skip
    steps, deadline = 0, time.monotonic() + 120
    while steps < 100 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            steps = con.execute("SELECT count(*) FROM steps").fetchone()[0]
            con.close()
        except sqlite3.Error:
            pass
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == ["vvm run: interrupted; committed steps are kept"]
    cut = Run.open(db)
    assert cut.metadata["status"] == "interrupted" and len(cut.steps) >= 100
    assert cut.validate().status == "incomplete"

    resumed = run_cli("resume", str(db))
    assert resumed.returncode == 0, resumed.stderr
    whole = tmp_path / "whole.sqlite"
    assert run_cli("run", str(cfg), "--duration", "300", "--db", str(whole)).returncode == 0
    run = Run.open(db)
    assert run.metadata["status"] == "complete" and len(run.actions) == 50 * 150
    assert run.steps["clock"].notna().all() and run.steps["clock"].max() < 300
    assert _rows(db) == _rows(whole)
