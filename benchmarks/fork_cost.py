"""What a fork costs against running the changed experiment again: LLM calls and seconds.

    python benchmarks/fork_cost.py [--agents 5] [--steps 12] [--latency-ms 100] [--repeat 3]
                                   [--no-write]

A parent run of ``--agents`` LLM agents (the cognitive policy on the mock model, each reply
after ``--latency-ms``, as a model's would come; simultaneous scheduling, every agent's call
of a step in flight at once) over ``--steps`` steps. Then, for fork steps t at a quarter, a half
and three quarters of the run, one agent's system prompt changed from t on:

- fork: ``parent.fork(t, agent_changes=...).run()``: the steps before t copied, the parent's
  state rebuilt by re-executing them from the trace (no call), then steps t..n-1, each request
  the parent made served from its recording;
- again: the changed experiment run from step 0 (the way without forks: every step, every
  call).

Model calls are counted at the provider (``llm_calls`` rows whose ``source`` is ``model``);
seconds are wall time from the call to the finished run, median of ``--repeat``, each into a
new file. The fork's result is checked: its steps before t are the parent's.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from results import machine, write_section

SECTION = "fork_cost"


def _model_calls(run: Any, first_step: int = 0) -> int:
    """The calls a provider answered, from ``first_step`` on (a fork's before it are copied)."""
    calls = run.llm_calls
    return int(((calls["source"].astype(str) == "model") & (calls["step"] >= first_step)).sum())


def _prefix(path: Path, t: int) -> list[Any]:
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT step, state_hash FROM steps WHERE step < ?", (t,)).fetchall()
    finally:
        con.close()


def measure(agents: int, steps: int, latency_ms: float, repeat: int) -> list[dict[str, Any]]:
    """One row per fork step: the fork's and the full run's calls and median seconds."""
    from vivarium import Experiment

    config = {
        "name": "forkcost",
        "policy": "cognitive",
        "agents": agents,
        "steps": steps,
        "seed": 3,
        "scheduling": "simultaneous",
        "llm": {"mock": True, "mock_latency_ms": latency_ms},
    }
    change = {"agent_001": {"system_prompt": "Answer in five words."}}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        parent = Experiment(**config).run(folder / "parent.sqlite", progress=False)
        for t in sorted({steps // 4, steps // 2, 3 * steps // 4}):
            fork_s, again_s = [], []
            for i in range(repeat):
                started = time.perf_counter()
                child = parent.fork(t, agent_changes=change, db=folder / f"f{t}_{i}.sqlite")
                fork = child.run(progress=False)
                fork_s.append(time.perf_counter() - started)
                assert _prefix(fork.path, t) == _prefix(parent.path, t)
                plain = child.config.model_dump()
                plain.update(fork_of=None, db=None)
                started = time.perf_counter()
                again = Experiment(**plain).run(folder / f"a{t}_{i}.sqlite", progress=False)
                again_s.append(time.perf_counter() - started)
            served = int((fork.llm_calls["source"].astype(str) == "parent").sum())
            rows.append(
                {
                    "t": t,
                    "fork_calls": _model_calls(fork, t),
                    "served": served,
                    "fork_s": statistics.median(fork_s),
                    "again_calls": _model_calls(again),
                    "again_s": statistics.median(again_s),
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=5)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    rows = measure(args.agents, args.steps, args.latency_ms, args.repeat)
    n = args.steps
    lines = [
        "## What a fork costs against running again (`benchmarks/fork_cost.py`)",
        "",
        f"Machine: {machine()}.",
        "",
        f"A parent of {args.agents} LLM agents x {n} steps (the mock model, "
        f"{args.latency_ms:g} ms a reply, simultaneous scheduling); one agent's system prompt "
        "changed from step t on. Fork: `parent.fork(t, agent_changes=...).run()` (the prefix "
        "copied, the parent's state re-executed from the trace, each request the parent made "
        "served from its recording). Again: the changed experiment from step 0. Model calls "
        f"are counted at the provider; seconds are the median of {args.repeat}.",
        "",
        "| fork step t | fork: model calls | served from the parent | fork s | again: model "
        "calls | again s | calls saved | time saved |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['t']} of {n} | {r['fork_calls']} | {r['served']} | {r['fork_s']:.2f} | "
            f"{r['again_calls']} | {r['again_s']:.2f} | "
            f"{1 - r['fork_calls'] / r['again_calls']:.0%} | {1 - r['fork_s'] / r['again_s']:.0%} |"
        )
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_section(SECTION, text)


if __name__ == "__main__":
    main()
