"""Phase 1 throughput: random agents traced to SQLite and loaded back as a DataFrame.

    python benchmarks/phase1.py [--agents 1000] [--steps 1000] [--repeat 3]

Times the whole path a researcher pays for: deciding, applying, hashing, committing every step
to SQLite, and reading the actions table back as a pandas DataFrame.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

from vivarium import Experiment


def run_once(agents: int, steps: int, folder: Path, batch: bool = True) -> tuple[float, float, int]:
    exp = Experiment(name="bench", agents=agents, steps=steps, seed=42)
    db = folder / f"bench-{agents}x{steps}-{int(batch)}.sqlite"
    start = time.perf_counter()
    if batch:
        run = exp.run(db, progress=False)
    else:
        from vivarium.engine.engine import WorldEngine
        from vivarium.facade import Run
        from vivarium.trace.db import TraceDb

        trace = TraceDb(db)
        engine: WorldEngine = exp.build(trace)
        engine.config = engine.config.model_copy(update={"batch": False})
        engine.run(steps)
        trace.close()
        run = Run.open(db)
    simulated = time.perf_counter() - start
    frame = run.actions
    total = time.perf_counter() - start
    return simulated, total, len(frame)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--general", action="store_true", help="also time the per-agent path")
    args = parser.parse_args()
    decisions = args.agents * args.steps
    print(f"phase1 benchmark: {args.agents} agents x {args.steps} steps = {decisions:,} decisions")
    print(f"python {platform.python_version()} on {platform.machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        modes = [True, False] if args.general else [True]
        for batch in modes:
            best = None
            for _ in range(args.repeat):
                sim, total, rows = run_once(args.agents, args.steps, Path(tmp), batch)
                assert rows == decisions, (rows, decisions)
                best = total if best is None else min(best, total)
                print(
                    f"  {'batch' if batch else 'per-agent'}: run+trace {sim:.2f} s, "
                    f"+DataFrame {total:.2f} s -> {decisions / total:,.0f} decisions/s"
                )
            assert best is not None
            print(
                f"best ({'batch' if batch else 'per-agent'}): {decisions / best:,.0f} decisions/s"
            )


if __name__ == "__main__":
    main()
