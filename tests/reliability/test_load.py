"""Load: 1,000 LLM agents x 100 steps (mock gateway, 200 calls in flight) and 10,000 random
agents x 20 steps, each in its own process: memory stays bounded and no row is dropped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import ROOT
from vivarium.trace.validate import validate_trace

MAX_RSS_MB = 2048


def load_run(kind: str, agents: int, steps: int, db: Path) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.reliability.load_child",
            kind,
            str(agents),
            str(steps),
            str(db),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "VIVARIUM_PROGRESS": "0"},
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"\n{kind}: {agents} agents x {steps} steps: {report}")
    return report


def test_1000_llm_agents_x_100_steps_with_up_to_200_calls_in_flight(tmp_path: Path) -> None:
    agents, steps = 1000, 100
    db = tmp_path / "llm.sqlite"
    report = load_run("llm", agents, steps, db)
    assert report["peak_rss_mb"] < MAX_RSS_MB
    # Decisions start one after another (each request leaves before the next prompt is built),
    # so with the mock's 3 ms latency the first calls are done before the 200th starts: many
    # are in flight at once, never more than the limit. How many depends on how fast this
    # machine builds prompts (36-45 measured here, on this and the previous version alike), so
    # the floor only says "concurrent, not one at a time". (Reaching the limit exactly is
    # tested in tests/test_engine_async.py.)
    assert 10 <= report["max_in_flight"] <= 200

    assert report["status"] == "complete"
    assert report["steps"] == steps
    assert report["actions"] == agents * steps
    assert report["llm_calls"] == agents * steps
    assert report["agents_per_step"] == [agents]
    assert report["messages"] == report["posts"] > 0
    assert validate_trace(db).status == "ok"


def test_10000_random_agents_x_20_steps(tmp_path: Path) -> None:
    agents, steps = 10_000, 20
    db = tmp_path / "random.sqlite"
    report = load_run("random", agents, steps, db)
    assert report["peak_rss_mb"] < MAX_RSS_MB
    assert report["status"] == "complete"
    assert report["steps"] == steps
    assert report["actions"] == agents * steps
    assert report["agents_per_step"] == [agents]
    assert report["llm_calls"] == report["messages"] == 0
    assert validate_trace(db).status == "ok"
