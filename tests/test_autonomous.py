"""Autonomous mode: rate-limited agent loops on a virtual clock, deterministic."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.conftest import run_cli
from vivarium import Experiment
from vivarium.engine.autonomous import RateTracker, VirtualClock


def test_rate_tracker_rolling_window() -> None:
    clock = VirtualClock()
    tracker = RateTracker({"actions": (3, 10.0)}, clock)
    for _ in range(3):
        assert tracker.has_capacity("a", "actions")
        tracker.consume("a", "actions")
        clock.sleep_until(clock.now() + 1)
    assert not tracker.has_capacity("a", "actions")
    assert tracker.has_capacity("b", "actions")  # per agent
    assert tracker.time_until_capacity("a", "actions") == 7.0  # first use at t=0 expires at 10
    tracker.wait_for_capacity("a", "actions")
    assert clock.now() == 10.0 and tracker.has_capacity("a", "actions")
    assert tracker.has_capacity("a", "unlimited", 1e9)


def test_autonomous_run_respects_rate_and_duration(tmp_path: Path) -> None:
    exp = Experiment(
        name="auto",
        agents=3,
        seed=1,
        mode="autonomous",
        autonomous={"duration": 30, "think_s": 1.0, "actions_per_minute": 10},
    )
    run = exp.run(tmp_path / "a.sqlite")
    per_agent = run.actions.groupby("agent_id", observed=True).size().tolist()
    assert per_agent == [10, 10, 10]  # 10 per minute, 30 s of virtual time
    assert run.steps["clock"].max() < 30 and run.steps["clock"].is_monotonic_increasing
    assert run.metadata["status"] == "complete" and run.metadata["steps"] == len(run.steps)
    assert run.validate().status == "ok"


def test_autonomous_virtual_clock_is_deterministic(tmp_path: Path) -> None:
    digests = []
    for name in ("x", "y"):
        db = tmp_path / f"{name}.sqlite"
        out = run_cli("run", str(_config(tmp_path)), "--duration", "12", "--db", str(db))
        assert out.returncode == 0, out.stderr
        digests.append(hashlib.sha256(db.read_bytes()).hexdigest())
    assert digests[0] == digests[1]


def _config(tmp_path: Path) -> Path:
    cfg = tmp_path / "auto.yaml"
    cfg.write_text(
        "name: auto\nagents: 3\nseed: 4\naction_space: [noop, emit_event, post_message]\n"
    )
    return cfg


def test_bad_duration_is_one_line(tmp_path: Path) -> None:
    out = run_cli("run", str(_config(tmp_path)), "--duration", "-3")
    assert out.returncode == 2 and "--duration must be > 0" in out.stderr
