"""LLM decisions run concurrently within a step: wall time against the ideal and one-at-a-time.

    python benchmarks/llm_concurrency.py [--agents 64] [--steps 5] [--latency-ms 100]

The project's OpenAI-compatible test server answers every call after a fixed latency, from its
own process (so it does not share the client's GIL); agents reach it through the real
LiteLLMGateway. The ideal wall time is steps x latency (every call of a step in flight at
once); one-at-a-time is agents x steps x latency.

The CPU each decision costs is measured layer by layer, because on a small machine it, not the
latency, bounds a step of 64 concurrent calls: the engine alone (an async policy that does
nothing), the cognitive policy without and with LangGraph (zero-latency mock), and litellm.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from vivarium import ActionRequest, Experiment, TraceDb, WorldEngine, WorldEngineConfig  # noqa: E402


class Instant:
    """An async policy that does no work: what is left is the engine's own cost."""

    async def adecide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: Any
    ) -> ActionRequest:
        await asyncio.sleep(0)
        return ActionRequest.model_construct(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name="noop",
            arguments={},
            reasoning=None,
            metadata={},
        )

    def decide(self, **kw: Any) -> ActionRequest:
        raise AssertionError("async only")


def engine_overhead_ms(folder: Path, agents: int, steps: int) -> float:
    trace = TraceDb(folder / "instant.sqlite")
    engine = WorldEngine(
        WorldEngineConfig(run_id="instant", scheduling="simultaneous", max_concurrency=agents),
        {f"agent_{i:03d}": Instant() for i in range(agents)},
        trace_db=trace,
    )
    start = time.perf_counter()
    engine.run(steps)
    trace.close()
    return (time.perf_counter() - start) / (agents * steps) * 1000


def timed_run(folder: Path, name: str, agents: int, steps: int, **llm: object) -> float:
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
    errors = run.llm_calls["error"].notna().sum()
    assert errors == 0, f"{errors} failed calls"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--sequential-steps", type=int, default=1, help="steps timed one at a time")
    args = parser.parse_args()
    n, steps, latency = args.agents, args.steps, args.latency_ms / 1000
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.support.fake_openai", "--latency-ms", str(args.latency_ms)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        base = server.stdout.readline().strip()  # type: ignore[union-attr]
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            common: dict[str, Any] = {
                "model": "openai/fake",
                "api_base": base,
                "api_key": "sk-bench",
                "force_tool": True,
            }
            timed_run(folder, "warmup", 4, 1, **common)  # imports litellm, opens connections
            print(f"llm concurrency: {n} agents x {steps} steps, {args.latency_ms:.0f} ms per call")
            print(f"python {platform.python_version()}, {os.cpu_count()} cores")
            for graph in (True, False):
                label = "LangGraph policy" if graph else "plain policy    "
                wall = timed_run(
                    folder, f"conc{graph}", n, steps, max_concurrency=n, graph=graph, **common
                )
                ideal = steps * latency
                print(
                    f"  {label} concurrent: {wall:6.2f} s = {wall / ideal:4.1f}x ideal ({ideal:.2f} s)"
                )
            seq = timed_run(
                folder, "seq", n, args.sequential_steps, max_concurrency=1, graph=False, **common
            )
            one_at_a_time = seq / args.sequential_steps * steps
            print(
                f"  one call at a time: {one_at_a_time:6.2f} s (measured over {args.sequential_steps} step(s))"
            )
            print("CPU per decision (no latency):")
            print(f"  engine alone                  {engine_overhead_ms(folder, n, 50):6.3f} ms")
            for graph in (False, True):
                mock = timed_run(
                    folder, f"mock{graph}", n, 20, model="mock", mock=True, graph=graph
                )
                label = "engine + LangGraph policy" if graph else "engine + plain policy    "
                print(f"  {label}     {mock / (n * 20) * 1000:6.3f} ms")
            zero = subprocess.Popen(
                [sys.executable, "-m", "tests.support.fake_openai", "--latency-ms", "0"],
                stdout=subprocess.PIPE,
                text=True,
                cwd=ROOT,
            )
            try:
                zero_base = zero.stdout.readline().strip()  # type: ignore[union-attr]
                wall = timed_run(
                    folder,
                    "zero",
                    n,
                    10,
                    max_concurrency=n,
                    graph=False,
                    **{**common, "api_base": zero_base},
                )
                print(f"  + litellm (0 ms server)       {wall / (n * 10) * 1000:6.3f} ms")
            finally:
                zero.terminate()
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
