"""Recorded latencies are true: nothing heavy runs on the event loop while calls are in flight.

Each check runs in a fresh interpreter, so that litellm (3-4 s to import) is not already loaded
by earlier tests: the first reply of a run used to import it for pricing inside the loop,
freezing every call in flight (recorded as ~1,800 ms, or as a ``Timeout`` that never reached
the server).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FIRST_STEP = r"""
import json, sys
from tests.support.fake_openai import FakeOpenAIServer
from vivarium import Experiment

db, graph, transport = sys.argv[1], sys.argv[2] == "graph", sys.argv[3]
with FakeOpenAIServer(latency_ms=5) as server:
    exp = Experiment(
        name="latency", policy="cognitive", agents=8, steps=2, seed=1,
        scheduling="simultaneous",
        llm={"model": "openai/fake", "api_base": server.base_url, "force_tool": True,
             "timeout": 1.0, "num_retries": 0, "graph": graph, "transport": transport},
    )
    run = exp.run(db, progress=False)
    calls = run.llm_calls
    print(json.dumps({
        "requests": server.request_count,
        "latency": calls["latency_ms"].tolist(),
        "step": calls["step"].tolist(),
        "errors": calls["error"].dropna().tolist(),
        "litellm": "litellm" in sys.modules,
    }))
"""


@pytest.mark.parametrize(
    ("graph", "transport", "bound_ms"),
    [("plain", "direct", 300), ("graph", "litellm", 700)],
)
def test_first_step_latencies_are_the_servers_not_an_import(
    tmp_path: Path, graph: str, transport: str, bound_ms: float
) -> None:
    """8 agents at once, 5 ms replies, a 1 s timeout: before, the first step's calls read
    1.8-10 s (direct) or ~6 s (litellm, which also imports code on its first call with tools),
    and several were recorded as ``Timeout`` without reaching the server."""
    out = subprocess.run(
        [sys.executable, "-c", FIRST_STEP, str(tmp_path / "t.sqlite"), graph, transport],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"VIVARIUM_PROGRESS": "0", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["errors"] == []  # no Timeout that never reached the server
    assert result["requests"] == 16 == len(result["latency"])
    # 5 ms replies on a 2-core machine shared with other work: far below the 1 s timeout
    # (litellm spends a few ms of CPU per call, so 8 of its calls at once take longer).
    assert max(result["latency"]) < bound_ms, result["latency"]
    # A local model has no price: the direct transport never needs litellm at all.
    assert result["litellm"] is (transport == "litellm")


def test_a_call_cancelled_by_the_agent_timeout_is_a_row_with_its_latency(tmp_path: Path) -> None:
    """The mock answers in 2 s, the agent timeout is 0.2 s: each decision's one attempt is
    cancelled, and it is still a row of ``llm_calls`` (it used to vanish)."""
    from vivarium import Experiment

    run = Experiment(
        name="slow",
        policy="cognitive",
        agents=2,
        steps=1,
        scheduling="simultaneous",
        llm={
            "mock": True,
            "mock_latency_ms": 2000,
            "agent_timeout": 0.2,
            "on_llm_error": "fallback",  # record the timeouts as fallbacks; "stop" would stop
        },
    ).run(tmp_path / "slow.sqlite", progress=False)
    calls = run.llm_calls
    assert calls["agent_id"].tolist() == ["agent_000", "agent_001"]
    assert calls["error"].tolist() == ["cancelled: agent timeout after 0.2 s"] * 2
    assert calls["latency_ms"].between(1, 1500).all()  # until the cancellation, not 2,000
    assert run.actions["fallback"].all()
