"""Autonomous mode: rate-limited agent loops on a virtual clock, deterministic."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import run_cli
from vivarium import Experiment, Run
from vivarium.engine.autonomous import RateTracker, VirtualClock
from vivarium.errors import ConfigError, VivariumError


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


def test_rate_tracker_refuses_limits_that_are_not_limits() -> None:
    import pytest

    from vivarium.errors import ConfigError

    clock = VirtualClock()
    for limits, expected in [
        ({"actions": (-5, 60.0)}, "actions: -5 is not an amount allowed (a number > 0)"),
        ({"tokens": (10, 0)}, "tokens: a window of 0 seconds is not a window (a number > 0)"),
        ({"actions": (float("nan"), 60.0)}, "actions: nan is not an amount allowed"),
        ({"actions": 30}, "actions: expected (amount allowed, window in seconds), got 30"),
    ]:
        with pytest.raises(ConfigError) as info:
            RateTracker(limits, clock)
        assert str(info.value).startswith("rate limit " + expected), str(info.value)


# --- issue 11, case 2: autonomous runs end, show their progress, and never end silently short


def _readme_config(tmp_path: Path, agents: int = 50) -> Path:
    cfg = tmp_path / "experiment.yaml"
    cfg.write_text(
        f"name: baseline\nworld: channel\npolicy: random\nagents: {agents}\nsteps: 200\nseed: 7\n"
    )
    return cfg


@pytest.mark.timeout(120)
def test_readme_autonomous_run_finishes(tmp_path: Path) -> None:
    """`vvm run experiment.yaml --duration 300` with the README's config (it used to spin
    forever at 68.44 s): 50 agents, 30 actions a minute each, for five minutes."""
    db = tmp_path / "readme.sqlite"
    out = run_cli("run", str(_readme_config(tmp_path)), "--duration", "300", "--db", str(db))
    assert out.returncode == 0, out.stderr
    run = Run.open(db)
    assert run.metadata["status"] == "complete" and run.validate().status == "ok"
    per_agent = run.actions.groupby("agent_id", observed=True).size()
    assert len(per_agent) == 50 and set(per_agent) == {30 * 5}
    clocks = run.steps["clock"]
    assert clocks.is_monotonic_increasing and clocks.is_unique and clocks.max() < 300


def test_rate_tracker_gives_capacity_at_the_time_it_names() -> None:
    """Waiting for capacity ends with capacity, whatever rounding a float clock does
    (8.46 + 60 is 68.46000000000001: a window is full at 68.46 itself)."""

    @given(
        stamps=st.lists(st.floats(0, 1e4, allow_subnormal=False), min_size=1, max_size=5),
        window=st.floats(1e-3, 1e3),
        allowed=st.integers(1, 3),
    )
    def check(stamps: list[float], window: float, allowed: int) -> None:
        clock = VirtualClock()
        tracker = RateTracker({"actions": (allowed, window)}, clock)
        for stamp in sorted(stamps):
            clock.sleep_until(stamp)
            tracker.wait_for_capacity("a", "actions")
            assert tracker.has_capacity("a", "actions"), clock.now()
            tracker.consume("a", "actions")

    check()
    clock = VirtualClock(8.46)
    tracker = RateTracker({"actions": (1, 60.0)}, clock)
    tracker.consume("a", "actions")
    clock.sleep_until(68.46)
    assert not tracker.has_capacity("a", "actions")
    assert tracker.capacity_at("a", "actions") == 8.46 + 60 > 68.46


class _Bar:
    """Stands in for tqdm: records what the run asks of its progress bar."""

    made: list[_Bar] = []

    def __init__(self, **options: object) -> None:
        self.options, self.updates, self.closed = options, [], False
        _Bar.made.append(self)

    def update(self, n: float = 1) -> None:
        self.updates.append(n)

    def close(self) -> None:
        self.closed = True


def test_autonomous_progress_bar_counts_clock_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tqdm.auto

    monkeypatch.setattr(tqdm.auto, "tqdm", _Bar)
    _Bar.made = []
    exp = Experiment(name="bar", agents=3, seed=1, mode="autonomous", autonomous={"duration": 12.5})
    run = exp.run(tmp_path / "bar.sqlite", progress=True)
    (bar,) = _Bar.made
    assert bar.options["total"] == 12.5 and bar.options["unit"] == "s" and bar.closed
    # The bar moves forward to each step's clock and ends at the duration, not past it.
    assert all(n > 0 for n in bar.updates)
    assert sum(bar.updates) == pytest.approx(12.5) and sum(bar.updates) <= 12.5
    positions = [sum(bar.updates[: i + 1]) for i in range(len(bar.updates))]
    clocks = run.steps["clock"].tolist()
    assert positions[: len(clocks) - 1] == pytest.approx(clocks[1:])

    _Bar.made = []
    exp.run(tmp_path / "quiet.sqlite", progress=False)
    monkeypatch.setenv("VIVARIUM_PROGRESS", "0")
    exp.run(tmp_path / "quiet2.sqlite")
    assert _Bar.made == []


def test_cli_autonomous_progress_bar(tmp_path: Path) -> None:
    cfg = _readme_config(tmp_path, agents=3)
    shown = run_cli(
        "run", str(cfg), "--duration", "30", "--db", str(tmp_path / "a.sqlite"),
        env={"VIVARIUM_PROGRESS": "1"},
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "100%" in shown.stderr and "30.0/30 s of virtual time" in shown.stderr
    quiet = run_cli(
        "run", str(cfg), "--duration", "30", "--db", str(tmp_path / "b.sqlite"), "--no-progress",
        env={"VIVARIUM_PROGRESS": "1"},
    )  # fmt: skip
    assert quiet.returncode == 0 and "virtual time" not in quiet.stderr


def test_real_clock_run_acts_in_wall_clock_time(tmp_path: Path) -> None:
    start = time.monotonic()
    run = Experiment(
        name="real", agents=2, seed=1, mode="autonomous",
        autonomous={"duration": 1.5, "think_s": 0.5, "clock": "real"},
    ).run(tmp_path / "real.sqlite")  # fmt: skip
    elapsed = time.monotonic() - start
    # Agents at 0 and 0.25 s, then every 0.5 s: 0, .25, .5, .75, 1, 1.25 (recorded as planned).
    assert run.steps["clock"].tolist() == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]
    assert elapsed >= 1.25 and run.metadata["status"] == "complete"


def test_max_events_cap_is_not_a_complete_run(tmp_path: Path) -> None:
    db = tmp_path / "cap.sqlite"
    exp = Experiment(
        name="cap", agents=3, seed=1, mode="autonomous",
        autonomous={"duration": 30, "max_events": 5},
    )  # fmt: skip
    with pytest.raises(VivariumError, match=r"max_events=5 engine steps, at 1\.66667 s of 30 s"):
        exp.run(db)
    run = Run.open(db)
    assert run.metadata["status"] == "failed" and "max_events" in run.metadata["error"]
    assert len(run.steps) == 5 and run.validate().status == "incomplete"
    out = run_cli("run", str(_readme_config(tmp_path, 3)), "--duration", "30",
                  "--db", str(tmp_path / "cli.sqlite"))  # fmt: skip
    assert out.returncode == 0, out.stderr  # the default cap is far above 90 steps


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "-inf", "1e-12", "soon"])
def test_bad_duration_flag_is_one_line(tmp_path: Path, value: str) -> None:
    out = run_cli("run", str(_config(tmp_path)), f"--duration={value}",
                  "--db", str(tmp_path / "x.sqlite"))  # fmt: skip
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and "duration" in out.stderr
    assert not (tmp_path / "x.sqlite").exists()


@pytest.mark.parametrize(
    "field", ["duration", "think_s", "actions_per_minute", "llm_tokens_per_minute", "max_events"]
)
@pytest.mark.parametrize("value", [-1, 0, float("nan"), float("inf"), float("-inf")])
def test_bad_autonomous_settings_are_one_line(field: str, value: float) -> None:
    with pytest.raises(ConfigError) as info:
        Experiment(name="x", agents=2, mode="autonomous", autonomous={field: value})
    message = str(info.value)
    assert "\n" not in message and f"autonomous.{field}" in message
