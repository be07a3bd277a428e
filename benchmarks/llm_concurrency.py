"""LLM decisions run concurrently within a step: wall time against the ideal and one-at-a-time.

    python benchmarks/llm_concurrency.py [--agents 64] [--steps 5] [--latency-ms 100] [--no-write]

The project's OpenAI-compatible test server answers every call after a fixed latency, from its
own process (so it does not share the client's GIL); agents reach it through the real
LiteLLMGateway, by both of its transports (direct HTTP, the default for an ``openai/`` model on
an ``api_base``, and litellm). The ideal wall time is steps x latency (every call of a step in
flight at once); one-at-a-time is agents x steps x latency.

The CPU each decision costs is measured layer by layer, because on a small machine it, not the
latency, bounds a step of 64 concurrent calls: the engine alone (an async policy that does
nothing), the cognitive policy without and with LangGraph (zero-latency mock), and litellm.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
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
from vivarium.worlds import InMemoryChannel  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import machine, write_section  # noqa: E402

SECTION = "llm_concurrency"


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
        InMemoryChannel(),
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


def fake_server(latency_ms: float) -> tuple[subprocess.Popen[str], str]:
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.support.fake_openai", "--latency-ms", str(latency_ms)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    return server, server.stdout.readline().strip()  # type: ignore[union-attr]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--repeats", type=int, default=5, help="best of N for each concurrent run")
    parser.add_argument("--sequential-steps", type=int, default=1, help="steps timed one at a time")
    parser.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = parser.parse_args()
    n, steps, latency = args.agents, args.steps, args.latency_ms / 1000
    ideal = steps * latency
    server, base = fake_server(args.latency_ms)
    zero, zero_base = fake_server(0)
    rows: list[tuple[str, str, str]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            common: dict[str, Any] = {
                "model": "openai/fake",
                "api_base": base,
                "api_key": "sk-bench",
                "force_tool": True,
            }
            for transport in ("direct", "litellm"):  # imports, opens connections
                timed_run(folder, f"warm{transport}", 4, 1, transport=transport, **common)
            print(f"llm concurrency: {n} agents x {steps} steps, {args.latency_ms:.0f} ms per call")
            print(machine())
            print(f"  wall time, best of {args.repeats} (ideal {ideal:.2f} s):")
            for transport, graph in (
                ("direct", False),
                ("direct", True),
                ("litellm", False),
                ("litellm", True),
            ):
                label = f"{transport} transport, {'LangGraph' if graph else 'plain'} policy"
                walls = sorted(
                    timed_run(
                        folder,
                        f"c{transport}{graph}{k}",
                        n,
                        steps,
                        max_concurrency=n,
                        graph=graph,
                        transport=transport,
                        **common,
                    )
                    for k in range(args.repeats)
                )
                wall, median = walls[0], statistics.median(walls)
                print(
                    f"    {label:38s} {wall:6.2f} s = {wall / ideal:4.2f}x ideal"
                    f" (median {median / ideal:4.2f}x, worst {walls[-1] / ideal:4.2f}x)"
                )
                rows.append(
                    (
                        label,
                        f"{wall:.2f} s",
                        f"{wall / ideal:.2f}x (median {median / ideal:.2f}x, "
                        f"worst {walls[-1] / ideal:.2f}x)",
                    )
                )
            seq = timed_run(
                folder, "seq", n, args.sequential_steps, max_concurrency=1, graph=False, **common
            )
            one_at_a_time = seq / args.sequential_steps * steps
            print(f"    {'one call at a time (direct, plain)':38s} {one_at_a_time:6.2f} s")
            rows.append(
                (
                    "one call at a time (direct, plain)",
                    f"{one_at_a_time:.1f} s",
                    f"{one_at_a_time / ideal:.0f}x",
                )
            )

            cpu: list[tuple[str, float]] = []
            cpu.append(("engine alone", engine_overhead_ms(folder, n, 50)))
            for graph in (False, True):
                mock = timed_run(
                    folder, f"mock{graph}", n, 20, model="mock", mock=True, graph=graph
                )
                policy = "LangGraph" if graph else "plain"
                cpu.append((f"engine + {policy} policy (mock model)", mock / (n * 20) * 1000))
            for transport in ("direct", "litellm"):
                wall = timed_run(
                    folder,
                    f"zero{transport}",
                    n,
                    10,
                    max_concurrency=n,
                    graph=False,
                    transport=transport,
                    **{**common, "api_base": zero_base},
                )
                cpu.append(
                    (
                        f"engine + plain policy + {transport} call (0 ms server)",
                        wall / (n * 10) * 1000,
                    )
                )
            print("  time per decision with no latency (CPU-bound):")
            for label, ms in cpu:
                print(f"    {label:52s} {ms:6.3f} ms")
    finally:
        for process in (server, zero):
            process.terminate()
            process.wait()
    if not args.no_write:
        lines = [
            f"Machine: {machine()}.",
            "",
            f"{n} LLM agents x {steps} steps against the project's OpenAI-compatible test server",
            f"(its own process) answering every call after {args.latency_ms:.0f} ms; `force_tool`, simultaneous",
            f"scheduling, `max_concurrency` {n}. Ideal: every call of a step in flight at once,",
            f"{steps} x {args.latency_ms:.0f} ms = {ideal:.2f} s. Wall time of `Experiment.run`, best of {args.repeats}",
            "(median and worst in brackets: the LangGraph runs are CPU-bound and vary with the machine).",
            "",
            "| path | wall time | vs ideal |",
            "|---|---|---|",
            *[f"| {label} | {wall} | {ratio} |" for label, wall, ratio in rows],
            "",
            "Time per decision when the server answers at once (the run is CPU-bound, so this is",
            "the CPU each decision costs on one core):",
            "",
            "| layer | ms per decision |",
            "|---|---|",
            *[f"| {label} | {ms:.3f} |" for label, ms in cpu],
        ]
        write_section(SECTION, "\n".join(lines))


if __name__ == "__main__":
    main()
