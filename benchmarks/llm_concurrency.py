"""LLM decisions run concurrently within a step: wall time against the ideal and one-at-a-time.

    python benchmarks/llm_concurrency.py [--agents 64] [--steps 5] [--latency-ms 100]

A local OpenAI-compatible server (the project's test server) answers every call after a fixed
latency; agents reach it through the real LiteLLMGateway. The ideal wall time is
steps x latency (every call of a step in flight at once); one-at-a-time is agents x steps x
latency. Engine overhead per decision is measured separately with the zero-latency mock.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.support.fake_openai import FakeOpenAIServer  # noqa: E402
from vivarium import Experiment  # noqa: E402


def timed_run(folder: Path, name: str, agents: int, steps: int, **llm: object) -> tuple[float, int]:
    exp = Experiment(
        name=name,
        policy="cognitive",
        agents=agents,
        steps=steps,
        seed=1,
        scheduling="simultaneous",
        llm=llm,
    )
    start = time.perf_counter()
    run = exp.run(folder / f"{name}.sqlite", progress=False)
    elapsed = time.perf_counter() - start
    assert len(run.actions) == agents * steps
    return elapsed, len(run.llm_calls)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--sequential-steps", type=int, default=1, help="steps timed one at a time")
    args = parser.parse_args()
    latency = args.latency_ms / 1000
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeOpenAIServer(latency_ms=args.latency_ms) as server,
    ):
        folder = Path(tmp)
        common = {
            "model": "openai/fake",
            "api_base": server.base_url,
            "api_key": "sk-bench",
            "force_tool": True,
        }
        timed_run(folder, "warmup", 2, 1, **common)  # imports litellm, opens connections
        wall, calls = timed_run(
            folder, "concurrent", args.agents, args.steps, max_concurrency=args.agents, **common
        )
        ideal = args.steps * latency
        seq_wall, _ = timed_run(
            folder, "one_at_a_time", args.agents, args.sequential_steps, max_concurrency=1, **common
        )
        one_at_a_time = seq_wall / args.sequential_steps * args.steps
        decisions = args.agents * args.steps
        print(
            f"llm concurrency: {args.agents} agents x {args.steps} steps, {args.latency_ms:.0f} ms per call"
        )
        print(f"  concurrent wall time   {wall:6.2f} s  ({calls} calls)")
        print(f"  ideal (steps x latency){ideal:6.2f} s  -> {wall / ideal:.2f}x ideal")
        print(
            f"  one at a time          {one_at_a_time:6.2f} s  -> {one_at_a_time / wall:.1f}x slower"
        )
        mock_steps = 50
        mock_wall, _ = timed_run(
            folder, "overhead", args.agents, mock_steps, model="mock", mock=True
        )
        per = mock_wall / (args.agents * mock_steps) * 1000
        print(f"  engine overhead (mock, no latency): {per:.3f} ms per LLM decision")
        print(f"  decisions: {decisions}")


if __name__ == "__main__":
    main()
