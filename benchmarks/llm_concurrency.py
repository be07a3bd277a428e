"""LLM decisions run concurrently within a step: is the client ever the bottleneck?

    python benchmarks/llm_concurrency.py [--agents 64] [--steps 5] [--latency-ms 100]
        [--repeats 5] [--wide-agents 256] [--no-write]

The project's OpenAI-compatible test server answers every call after a fixed latency, from its
own process (``benchmarks/counting_server.py``: it does not share the client's GIL, and it
says how many calls it held at once). Agents reach it through the real LiteLLMGateway, by both
of its transports (direct HTTP, the default for an ``openai/`` model on an ``api_base``, and
litellm), with the plain policy and with LangGraph's. Three measures, each against a goal:

1. The whole run, step 0 and the building and reading back included (``Experiment.run``),
   against the ideal (steps x latency: every call of a step in flight at once); best, median
   and worst of ``--repeats``. Goals: <= 1.2x with the plain policy, <= 1.5x with LangGraph
   (direct transport).
2. CPU per decision, layer by layer, when the server answers at once: the client process's
   CPU time (every thread: the event loop, the engine, the trace writer) over the steady steps
   (after step 0), per decision. Goals: engine + policy + direct call + trace with prompts
   <= 0.5 ms plain, <= 1.0 ms LangGraph. LangGraph decisions run in batches (one graph
   invocation for up to 32 concurrent decisions); one row runs it once per decision instead,
   to show what batching saves.
3. ``--wide-agents`` LangGraph agents (``max_concurrency`` as many) against the 100 ms server:
   the most calls the server held at once. Goal: all of them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from vivarium import ActionRequest, Experiment, TraceDb, WorldEngine, WorldEngineConfig  # noqa: E402
from vivarium.policies.cognitive import CognitiveAgentPolicy  # noqa: E402
from vivarium.worlds import InMemoryChannel  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import machine, write_section  # noqa: E402

SECTION = "llm_concurrency"
ONE_BY_ONE = "engine + LangGraph policy, one graph invocation per decision,"
GOAL_WALL = {"plain": 1.2, "LangGraph": 1.5}
GOAL_CPU = {"plain": 0.5, "LangGraph": 1.0}


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


class Server:
    """``counting_server.py`` in its own process: its base URL, and the calls it held at once."""

    def __init__(self, latency_ms: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "benchmarks" / "counting_server.py")]
            + ["--latency-ms", str(latency_ms)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        self.base = self._read()

    def _read(self) -> str:
        return self.process.stdout.readline().strip()  # type: ignore[union-attr]

    def _ask(self, command: str) -> str:
        self.process.stdin.write(command + "\n")  # type: ignore[union-attr]
        self.process.stdin.flush()  # type: ignore[union-attr]
        return self._read()

    def reset(self) -> None:
        """Start counting the calls in flight afresh."""
        self._ask("reset")

    def max_in_flight(self) -> int:
        """The most calls held at once since the last ``reset``."""
        return int(json.loads(self._ask("stats"))["max_in_flight"])

    def close(self) -> None:
        self.process.stdin.close()  # type: ignore[union-attr]
        self.process.wait(timeout=10)


class StepClock:
    """Wall and process CPU time at the end of every step (``Experiment.run``'s ``on_step``)."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, float]] = []

    def __call__(self, step: int, record: Any) -> None:
        self.marks.append((time.perf_counter(), time.process_time()))

    def steady_ms(self, agents: int) -> tuple[float, float]:
        """(wall, CPU) ms per decision over the steps after step 0."""
        (w0, c0), (w1, c1) = self.marks[0], self.marks[-1]
        decisions = agents * (len(self.marks) - 1)
        return (w1 - w0) / decisions * 1000, (c1 - c0) / decisions * 1000


def timed_run(
    folder: Path, name: str, agents: int, steps: int, **llm: object
) -> tuple[float, StepClock]:
    """Seconds of a whole ``Experiment.run`` (build, every step, reading back) and its clock."""
    exp = Experiment(
        name=name,
        policy="cognitive",
        agents=agents,
        steps=steps,
        seed=1,
        scheduling="simultaneous",
        llm=llm,
    )
    clock = StepClock()
    start = time.perf_counter()
    run = exp.run(folder / f"{name}.sqlite", progress=False, on_step=clock)
    elapsed = time.perf_counter() - start
    assert len(run.actions) == agents * steps
    errors = run.llm_calls["error"].notna().sum()
    assert errors == 0, f"{errors} failed calls"
    return elapsed, clock


def engine_alone_ms(folder: Path, agents: int, steps: int) -> tuple[float, float]:
    """(wall, CPU) ms per decision of the engine with a policy that does nothing."""
    trace = TraceDb(folder / "instant.sqlite")
    engine = WorldEngine(
        WorldEngineConfig(run_id="instant", scheduling="simultaneous", max_concurrency=agents),
        {f"agent_{i:03d}": Instant() for i in range(agents)},
        InMemoryChannel(),
        trace_db=trace,
    )
    wall, cpu = time.perf_counter(), time.process_time()
    engine.run(steps)
    trace.close()
    decisions = agents * steps
    return (
        (time.perf_counter() - wall) / decisions * 1000,
        (time.process_time() - cpu) / decisions * 1000,
    )


def spread(values: list[float]) -> tuple[float, float, float]:
    """Best, median and worst."""
    ordered = sorted(values)
    return ordered[0], statistics.median(ordered), ordered[-1]


def verdict(value: float, goal: float) -> str:
    return f"goal <= {goal:g}: {'met' if value <= goal else 'NOT met'}"


def repeat(n: int, measure: Callable[[int], float]) -> list[float]:
    return [measure(k) for k in range(n)]


def main() -> None:  # noqa: PLR0915 - one benchmark, read top to bottom
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--repeats", type=int, default=5, help="runs of each measure")
    parser.add_argument("--cpu-steps", type=int, default=20, help="steps of the CPU runs")
    parser.add_argument("--wide-agents", type=int, default=256, help="agents of the wide run")
    parser.add_argument("--sequential-steps", type=int, default=1, help="steps timed one at a time")
    parser.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = parser.parse_args()
    n, steps, latency = args.agents, args.steps, args.latency_ms / 1000
    ideal = steps * latency
    server, zero = Server(args.latency_ms), Server(0)
    rows: list[tuple[str, str, str, str]] = []
    cpu_rows: list[tuple[str, float, float, float, str]] = []
    goals: list[str] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            common: dict[str, Any] = {
                "model": "openai/fake",
                "api_base": server.base,
                "api_key": "sk-bench",
                "force_tool": True,
            }
            for transport in ("direct", "litellm"):  # imports, opens connections
                for graph in (False, True):
                    timed_run(
                        folder,
                        f"warm{transport}{graph}",
                        n,
                        1,
                        transport=transport,
                        graph=graph,
                        max_concurrency=n,
                        **common,
                    )
            print(f"llm concurrency: {n} agents x {steps} steps, {args.latency_ms:.0f} ms per call")
            print(machine())
            print(f"  whole run incl. step 0, {args.repeats} runs (ideal {ideal:.2f} s):")
            for transport, graph in (
                ("direct", False),
                ("direct", True),
                ("litellm", False),
                ("litellm", True),
            ):
                policy = "LangGraph" if graph else "plain"
                label = f"{transport} transport, {policy} policy"
                walls = repeat(
                    args.repeats,
                    lambda k, t=transport, g=graph: timed_run(
                        folder,
                        f"c{t}{g}{k}",
                        n,
                        steps,
                        max_concurrency=n,
                        graph=g,
                        transport=t,
                        **common,
                    )[0],
                )
                best, median, worst = spread(walls)
                ratios = f"{best / ideal:.2f}x / {median / ideal:.2f}x / {worst / ideal:.2f}x"
                goal = ""
                if transport == "direct":
                    goal = verdict(median / ideal, GOAL_WALL[policy]) + " (median)"
                    goals.append(f"whole run, {label}: median {median / ideal:.2f}x ideal, {goal}")
                print(f"    {label:38s} {best:6.2f} s   {ratios}   {goal}")
                rows.append((label, f"{best:.2f} / {median:.2f} / {worst:.2f} s", ratios, goal))
            seq, _ = timed_run(
                folder, "seq", n, args.sequential_steps, max_concurrency=1, graph=False, **common
            )
            one_at_a_time = seq / args.sequential_steps * steps
            print(f"    {'one call at a time (direct, plain)':38s} {one_at_a_time:6.2f} s")
            rows.append(
                (
                    "one call at a time (direct, plain)",
                    f"{one_at_a_time:.1f} s",
                    f"{one_at_a_time / ideal:.0f}x",
                    "",
                )
            )

            print(
                "  CPU per decision, server answering at once (steady steps; best / median / worst):"
            )
            walls_cpus = [engine_alone_ms(folder, n, 50) for _ in range(args.repeats)]
            cpus = [c for _, c in walls_cpus]
            best, median, worst = spread(cpus)
            cpu_rows.append(("engine alone", best, median, worst, ""))
            zero_llm: dict[str, Any] = {**common, "api_base": zero.base}
            layers: list[tuple[str, str, dict[str, Any]]] = [
                ("engine + plain policy (mock model)", "", {"model": "mock", "mock": True}),
                (
                    "engine + LangGraph policy (mock model)",
                    "",
                    {"model": "mock", "mock": True, "graph": True},
                ),
                (
                    "engine + plain policy + direct call + trace with prompts",
                    "plain",
                    {**zero_llm, "transport": "direct"},
                ),
                (
                    "engine + LangGraph policy + direct call + trace with prompts",
                    "LangGraph",
                    {**zero_llm, "transport": "direct", "graph": True},
                ),
                (
                    f"{ONE_BY_ONE} + direct call + trace with prompts",
                    "",
                    {**zero_llm, "transport": "direct", "graph": True},
                ),
                (
                    "engine + plain policy + litellm call + trace with prompts",
                    "",
                    {**zero_llm, "transport": "litellm"},
                ),
            ]
            for label, goal_of, llm in layers:
                llm = {"graph": False, "max_concurrency": n, **llm}
                # LangGraph decisions go through the graph in batches; this row runs it once per
                # decision instead, what batching saves.
                CognitiveAgentPolicy.batch_decisions = not label.startswith(ONE_BY_ONE)
                measured = [
                    timed_run(folder, f"z{len(cpu_rows)}{k}", n, args.cpu_steps, **llm)[1]
                    for k in range(args.repeats)
                ]
                CognitiveAgentPolicy.batch_decisions = True
                cpus = [clock.steady_ms(n)[1] for clock in measured]
                best, median, worst = spread(cpus)
                goal = verdict(median, GOAL_CPU[goal_of]) + " (median)" if goal_of else ""
                if goal_of:
                    goals.append(f"CPU per decision, {label}: median {median:.3f} ms, {goal}")
                cpu_rows.append((label, best, median, worst, goal))
            for label, best, median, worst, goal in cpu_rows:
                print(f"    {label:62s} {best:6.3f} / {median:6.3f} / {worst:6.3f} ms  {goal}")

            wide = args.wide_agents
            in_flight: list[int] = []
            wide_walls: list[float] = []
            for k in range(args.repeats):
                server.reset()
                wall, _ = timed_run(
                    folder,
                    f"wide{k}",
                    wide,
                    3,
                    max_concurrency=wide,
                    graph=True,
                    transport="direct",
                    **common,
                )
                in_flight.append(server.max_in_flight())
                wide_walls.append(wall)
            low = min(in_flight)
            wide_goal = f"goal {wide}: {'met' if low == wide else 'NOT met'}"
            goals.append(
                f"{wide} LangGraph agents: at most {max(in_flight)} calls in flight "
                f"(fewest in a run {low}), {wide_goal}"
            )
            wb, wm, ww = spread(wide_walls)
            wide_ideal = 3 * latency
            print(
                f"  {wide} LangGraph agents x 3 steps (max_concurrency {wide}): calls in flight at "
                f"the server {', '.join(map(str, in_flight))}; whole run {wb / wide_ideal:.2f}x / "
                f"{wm / wide_ideal:.2f}x / {ww / wide_ideal:.2f}x ideal; {wide_goal}"
            )
    finally:
        server.close()
        zero.close()
    print("  goals:")
    for line in goals:
        print(f"    {line}")
    if not args.no_write:
        lines = [
            f"Machine: {machine()}.",
            "",
            f"{n} LLM agents x {steps} steps against the project's OpenAI-compatible test server",
            f"(its own process, `benchmarks/counting_server.py`) answering every call after "
            f"{args.latency_ms:.0f} ms;",
            f"`force_tool`, simultaneous scheduling, `max_concurrency` {n}. Ideal: every call of a "
            f"step in flight at once, {steps} x {args.latency_ms:.0f} ms = {ideal:.2f} s.",
            f"Whole `Experiment.run` (building, step 0, every step, reading the run back), "
            f"best / median / worst of {args.repeats}:",
            "",
            "| path | wall time | vs ideal | goal |",
            "|---|---|---|---|",
            *[f"| {label} | {wall} | {ratio} | {goal} |" for label, wall, ratio, goal in rows],
            "",
            "CPU per decision when the server answers at once: the client process's CPU time (every",
            "thread: event loop, engine, trace writer) over the steps after step 0, per decision,",
            f"{n} agents x {args.cpu_steps} steps; best / median / worst of {args.repeats}. The LangGraph",
            "policy's concurrent decisions go through one batch graph invocation (up to 32 decisions,",
            "`vivarium.policies.graph_batch`); the row 'one graph invocation per decision' is the",
            "same run with `CognitiveAgentPolicy.batch_decisions = False`:",
            "",
            "| layer | CPU ms per decision | goal |",
            "|---|---|---|",
            *[
                f"| {label} | {best:.3f} / {median:.3f} / {worst:.3f} | {goal} |"
                for label, best, median, worst, goal in cpu_rows
            ],
            "",
            f"{args.wide_agents} LangGraph agents x 3 steps, `max_concurrency` {args.wide_agents}, "
            f"{args.latency_ms:.0f} ms server: calls in flight at once at the server, per run: "
            f"{', '.join(map(str, in_flight))}; whole run {wb:.2f} / {wm:.2f} / {ww:.2f} s "
            f"(ideal {wide_ideal:.2f} s).",
            "",
            "Goals:",
            "",
            *[f"- {line}" for line in goals],
        ]
        write_section(SECTION, "\n".join(lines))


if __name__ == "__main__":
    main()
