"""Crashes: a run SIGKILLed at a seeded random step leaves a trace that opens, holds every
committed step intact, validates as incomplete (exit 3, not corrupt) and that ``vvm resume``
finishes into exactly the rows of an uninterrupted run, for random, mock-LLM and replayed runs.

Sweeps killed midway: ``tests/test_sweep.py::test_resume_after_sigkill_runs_only_the_missing_runs``
(random runs) and ``test_a_sweep_of_mock_llm_runs_killed_midway_resumes`` below.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.reliability.helpers import assert_same_trace, rows
from tests.support.fake_openai import FakeOpenAIServer
from vivarium import Experiment, Run
from vivarium.cli import main
from vivarium.trace.validate import validate_trace

CRASH_POINTS = 5  # seeded random kill steps per policy

RANDOM = {
    "name": "crash-random",
    "agents": 200,  # the vectorised path, big enough that a step takes a moment
    "steps": 40,
    "seed": 17,
    "checkpoint_every": 5,
}
RANDOM_POSTS = {
    "name": "crash-posts",
    "agents": 6,
    "steps": 30,
    "seed": 5,
    "action_space": ["noop", "emit_event", "post_message"],
    "order": "shuffle",
    "checkpoint_every": 4,
}
MOCK = {
    "name": "crash-mock",
    "policy": "cognitive",
    "agents": 3,
    "steps": 20,
    "seed": 9,
    "scheduling": "simultaneous",
    "checkpoint_every": 3,
    "llm": {"mock": True, "mock_latency_ms": 2},
}
REPLAY_LLM = {"model": "openai/fake", "force_tool": True, "max_tokens": 32}
REPLAY = {
    "name": "crash-replay",
    "policy": "cognitive",
    "agents": 3,
    "steps": 16,
    "seed": 4,
    "scheduling": "simultaneous",  # no checkpoints: resume redoes the run from step 0
}


@pytest.fixture(scope="module")
def cassette(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A cassette recorded from the fake server for the REPLAY run."""
    folder = tmp_path_factory.mktemp("cassette")
    path = folder / "fake.cassette"
    with FakeOpenAIServer() as server:
        llm = {
            **REPLAY_LLM,
            "api_base": server.base_url,
            "cache": str(path),
            "cache_mode": "record",
        }
        Experiment(**REPLAY, llm=llm).run(folder / "recorded.sqlite", progress=False)
    yield path


def replay_llm(cassette: Path) -> dict[str, Any]:
    return {**REPLAY_LLM, "cache": str(cassette), "cache_mode": "replay"}


def crash_points(name: str, steps: int) -> list[int]:
    return sorted(random.Random(f"crash:{name}").sample(range(1, steps - 1), CRASH_POINTS))


def spawn(config: dict[str, Any], db: Path, kill_at: int) -> subprocess.Popen[bytes]:
    spec = json.dumps({"config": config, "db": str(db), "kill_at": kill_at})
    return subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.child", spec],
        cwd=ROOT,
        env={**os.environ, "VIVARIUM_PROGRESS": "0"},
        stderr=subprocess.PIPE,
    )


def check_crashes(
    tmp_path: Path,
    config: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    resume_flags: tuple[str, ...] = (),
) -> list[tuple[int, int]]:
    """Kill runs of ``config`` at seeded steps; check, resume and compare each one."""
    reference = tmp_path / "reference.sqlite"
    Experiment(**config).run(reference, progress=False)
    assert validate_trace(reference).status == "ok"
    points = crash_points(config["name"], config["steps"])
    killed = {k: tmp_path / f"killed-{k}.sqlite" for k in points}
    children = {k: spawn(config, db, k) for k, db in killed.items()}  # all at once: 2 cores
    outcomes = []
    for k, child in children.items():
        _, err = child.communicate(timeout=120)
        assert child.returncode == -signal.SIGKILL, err.decode()
        db = killed[k]
        run = Run.open(db)  # the trace opens
        assert run.metadata["status"] == "running"
        committed = run.metadata["steps_done"]
        assert committed <= k + 1
        # Every committed step is intact: validate says incomplete (3), not corrupt (1)...
        capsys.readouterr()
        assert main(["validate", str(db)]) == 3
        out = capsys.readouterr().out
        assert out.startswith("INCOMPLETE:"), out
        # ...and the committed rows are exactly the uninterrupted run's first rows.
        for table, step_column in (("steps", 0), ("messages", 1), ("llm_calls", 1)):
            want = [r for r in rows(reference, table) if r[step_column] < committed]
            assert rows(db, table) == want, table
        assert rows(db, "agents") == rows(reference, "agents")
        # vvm resume finishes it into the uninterrupted run, row for row.
        assert main(["resume", str(db), "--no-progress", *resume_flags]) == 0
        assert_same_trace(reference, db)
        assert validate_trace(db).status == "ok"
        outcomes.append((k, committed))
    capsys.readouterr()
    with capsys.disabled():
        print(f"\n{config['name']}: (killed after step, steps committed): {outcomes}")
    return outcomes


def test_random_runs_killed_at_random_steps_resume_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check_crashes(tmp_path / "batch", RANDOM, capsys)
    check_crashes(tmp_path / "posts", RANDOM_POSTS, capsys)


def test_mock_llm_runs_killed_at_random_steps_resume_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check_crashes(tmp_path, MOCK, capsys)


def test_replayed_runs_killed_at_random_steps_resume_exactly(
    tmp_path: Path, cassette: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {**REPLAY, "llm": replay_llm(cassette)}
    flags = ("--cache", str(cassette), "--cache-mode", "replay")
    check_crashes(tmp_path, config, capsys, resume_flags=flags)


def test_a_run_killed_before_its_run_record_is_incomplete_not_corrupt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "unstarted.sqlite"
    from vivarium.trace.db import TraceDb

    TraceDb(db).close()  # the file as a crash between creating the trace and recording the run
    assert main(["validate", str(db)]) == 3
    assert "the run never started" in capsys.readouterr().out
    assert main(["resume", str(db), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no run record" in err and "Traceback" not in err
