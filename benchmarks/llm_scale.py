"""Ten thousand LLM agents: a run completes, and what it costs in time, memory and trace.

    python benchmarks/llm_scale.py [--agents 10000] [--steps 10] [--latency-ms 100]
                                   [--max-concurrency 1000] [--no-write]

The project's OpenAI-compatible test server, in its own process, answers every call after a
fixed latency; the agents (the plain cognitive policy, ``force_tool``, simultaneous scheduling)
reach it over the direct transport, every prompt and reply kept in the trace. The run itself
happens in a child process, so its peak resident memory is the client's alone.

Reported: the wall time against two floors. The ideal is what the server's latency allows:
each step sends ``agents / max_concurrency`` waves of calls, so steps x waves x latency. The
CPU bound is the client's own CPU time in the run (engine, policies, HTTP, the trace writer):
on a machine with fewer cores than that work needs, no scheduling beats it. Then peak RSS, the
trace's size (and per call), the distinct texts stored, and the calls the server held at once.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from results import machine, write_section  # noqa: E402

SECTION = "llm_scale"
GOAL_CPU_MS = 0.4
GOAL_TEXT_BYTES = 1_000


def child(agents: int, steps: int, concurrency: int, base: str) -> dict[str, Any]:
    """The run, in this (child) process: its numbers as a dict."""
    import resource
    import sqlite3

    from vivarium import Experiment

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "scale.sqlite"
        exp = Experiment(
            name="scale",
            policy="cognitive",
            agents=agents,
            steps=steps,
            seed=1,
            scheduling="simultaneous",
            max_concurrency=concurrency,
            llm={
                "model": "openai/fake",
                "api_base": base,
                "force_tool": True,
                "graph": False,  # the plain policy: LangGraph's own CPU is llm_concurrency's
                "timeout": 120,
            },
        )
        wall, cpu = time.perf_counter(), time.process_time()
        run = exp.run(db, progress=False)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        health = run.health
        con = sqlite3.connect(db)
        try:
            calls, errors = con.execute("SELECT count(*), count(error) FROM llm_calls").fetchone()
            texts, text_bytes = con.execute(
                "SELECT count(*), coalesce(sum(length(body)), 0) FROM llm_texts"
            ).fetchone()
            decisions, fallbacks = con.execute(
                "SELECT count(*), coalesce(sum(fallback), 0) FROM decisions"
            ).fetchone()
        finally:
            con.close()
        return {
            "wall_s": wall,
            "cpu_s": cpu,
            "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "trace_bytes": db.stat().st_size,
            "calls": calls,
            "call_errors": errors,
            "texts": texts,
            "text_bytes": text_bytes,
            "decisions": decisions,
            "fallbacks": fallbacks,
            "healthy": health.ok,
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--max-concurrency", type=int, default=1_000)
    parser.add_argument("--child", metavar="BASE_URL", help=argparse.SUPPRESS)
    parser.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = parser.parse_args()
    if args.child:
        result = child(args.agents, args.steps, args.max_concurrency, args.child)
        print(json.dumps(result))
        return

    from llm_concurrency import Server

    import vivarium

    agents, steps, latency = args.agents, args.steps, args.latency_ms / 1000
    waves = math.ceil(agents / args.max_concurrency)
    ideal = steps * waves * latency
    print(f"llm scale (vivarium {vivarium.__version__}): {machine()}")
    server = Server(args.latency_ms)
    try:
        server.reset()
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, __file__, "--child", server.base, "--agents", str(agents),
             "--steps", str(steps), "--max-concurrency", str(args.max_concurrency)],
            capture_output=True, text=True, check=False, cwd=ROOT,
            env={**os.environ, "VIVARIUM_PROGRESS": "0"},
        )  # fmt: skip
        whole = time.perf_counter() - began
        if done.returncode != 0:
            raise SystemExit(f"the run failed:\n{done.stderr[-3000:]}")
        r = json.loads(done.stdout.strip().splitlines()[-1])
        in_flight = server.max_in_flight()
    finally:
        server.close()
    decisions = agents * steps
    if r["decisions"] != decisions or r["call_errors"] or r["fallbacks"] or not r["healthy"]:
        raise SystemExit(f"the run is not a result: {r}")
    bound = max(ideal, r["cpu_s"])
    cpu_ms = r["cpu_s"] / decisions * 1000
    text_per_call = r["text_bytes"] / r["calls"]  # the distinct texts' bodies: what calls add
    print(
        f"{agents} agents x {steps} steps: {r['wall_s']:.1f} s (ideal {ideal:.1f} s, CPU "
        f"{r['cpu_s']:.1f} s), peak {r['peak_mib']:.0f} MiB, trace {r['trace_bytes'] / 1e6:.1f} MB, "
        f"{in_flight} calls in flight at most"
    )
    lines = [
        "## Ten thousand LLM agents (`benchmarks/llm_scale.py`)",
        "",
        f"Machine: {machine()}.",
        f"Vivarium {vivarium.__version__}.",
        "",
        f"{agents:,} agents x {steps} steps of the plain cognitive policy (`force_tool`, direct",
        f"transport, simultaneous scheduling, `max_concurrency` {args.max_concurrency:,}) against",
        f"the project's test server in its own process, answering after {args.latency_ms:g} ms;",
        "every prompt and reply in the trace. One run, in a child process (peak memory is the",
        f"client's). Ideal = steps x {waves} waves of calls x latency; CPU = the client's own CPU",
        "time in the run (engine, policies, HTTP, trace writer), a floor on one core's worth.",
        "",
        "| | value |",
        "|---|---|",
        f"| decisions (LLM calls) | {decisions:,} ({r['calls']:,}); fallbacks {r['fallbacks']}, "
        f"failed calls {r['call_errors']} |",
        f"| wall time (run) | {r['wall_s']:.1f} s ({whole:.1f} s with the process) |",
        f"| ideal / vs ideal | {ideal:.1f} s / {r['wall_s'] / ideal:.2f}x |",
        f"| client CPU / vs CPU | {r['cpu_s']:.1f} s ({cpu_ms:.2f} ms a "
        f"decision) / {r['wall_s'] / r['cpu_s']:.2f}x |",
        f"| wall vs the larger floor | {r['wall_s'] / bound:.2f}x |",
        f"| calls in flight at the server, at most | {in_flight:,} |",
        f"| peak resident memory | {r['peak_mib']:.0f} MiB |",
        f"| trace | {r['trace_bytes'] / 1e6:.1f} MB ({r['trace_bytes'] / r['calls']:.0f} B a "
        f"call); {r['texts']:,} distinct texts, {r['text_bytes'] / 1e6:.1f} MB |",
        f"| new text stored a call | {text_per_call:.0f} B |",
        "",
        'Goals (issue "Fast with every decision a row"):',
        "",
        f"- client CPU a decision: {cpu_ms:.2f} ms, goal <= {GOAL_CPU_MS} ms: "
        f"{'met' if cpu_ms <= GOAL_CPU_MS else 'NOT met'}",
        f"- new text stored a call: {text_per_call:.0f} B, goal <= {GOAL_TEXT_BYTES:,} B: "
        f"{'met' if text_per_call <= GOAL_TEXT_BYTES else 'NOT met'}",
    ]
    if not args.no_write:
        write_section(SECTION, "\n".join(lines))
        print("wrote benchmarks/RESULTS.md")


if __name__ == "__main__":
    main()
