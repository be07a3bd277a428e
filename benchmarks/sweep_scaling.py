"""Sweep throughput: runs per second of a sweep of small runs, at 1 and 2 workers.

    python benchmarks/sweep_scaling.py [--runs 48] [--agents 100] [--steps 500] [--ray] [--no-write]

Each measurement sweeps ``--runs`` random-agent runs (a grid over ``agents`` and replications)
into a fresh folder, wall time from ``run_sweep`` to the returned ``Sweep`` (process pool
start-up included), then checks the merged actions are the same for every worker count.
``inline`` runs in this process, one run after another (no pool): the cost of a run itself.
``--ray`` adds the Ray backend at 2 workers (Ray's own start-up excluded: it runs once).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from results import RESULTS, machine, write_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SECTION = "sweep_scaling"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=48, help="a multiple of 4")
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--ray", action="store_true", help="also time the Ray backend")
    parser.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = parser.parse_args()
    os.environ["VIVARIUM_PROGRESS"] = "0"

    import vivarium
    from vivarium import Experiment
    from vivarium.sweep import run_sweep

    base = Experiment(name="scaling", agents=args.agents, steps=args.steps, seed=7)
    grid = {"agents": [args.agents, args.agents // 2 or 1, args.agents * 2, args.agents + 1]}
    replications = max(1, args.runs // len(grid["agents"]))
    n_runs = replications * len(grid["agents"])
    cases: list[tuple[str, str, int]] = [("inline", "inline", 1), ("local", "local", 1)]
    cases.append(("local", "local", 2))
    if args.ray:
        import logging

        import ray

        ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
        cases.append(("ray", "ray", 2))

    print(
        f"sweep scaling: {n_runs} runs of ~{args.agents} agents x {args.steps} steps; {machine()}"
    )
    results: dict[tuple[str, int], float] = {}
    reference = None
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeat):
            for label, backend, workers in cases:
                folder = Path(tmp) / f"{label}-{workers}-{rep}"
                start = time.perf_counter()
                sweep = run_sweep(
                    base,
                    grid,
                    folder=folder,
                    backend=backend,  # type: ignore[arg-type]
                    max_workers=workers,
                    replications=replications,
                    progress=False,
                )
                seconds = time.perf_counter() - start
                if not sweep.ok:
                    raise SystemExit(f"{label} sweep failed: {sweep.summary()}")
                actions = sweep.to_polars("actions")
                if reference is None:
                    reference = actions
                elif not actions.equals(reference):
                    raise SystemExit(f"{label} x{workers}: merged actions differ")
                key = (label, workers)
                results[key] = min(results.get(key, seconds), seconds)
                print(f"  {label:6s} x{workers}: {seconds:.2f} s -> {n_runs / seconds:.1f} runs/s")

    base_rate = n_runs / results[("local", 1)]
    lines = [
        "## Sweep scaling (`benchmarks/sweep_scaling.py`)",
        "",
        f"Machine: {machine()}.",
        f"Vivarium {vivarium.__version__}.",
        "",
        f"{n_runs} random-agent runs (grid `agents` = {grid['agents']}, {replications} "
        "replications,",
        f"{args.steps} steps each): wall time of `run_sweep` into a fresh folder, worker start-up",
        f"included, best of {args.repeat}. `inline` runs in the calling process (no pool). The",
        "merged actions are identical for every backend and worker count (checked).",
        "",
        "| backend | workers | seconds | runs / s | speed-up vs local x1 |",
        "|---|---|---|---|---|",
    ]
    for (label, workers), seconds in results.items():
        rate = n_runs / seconds
        lines.append(
            f"| {label} | {workers} | {seconds:.2f} | {rate:.1f} | {rate / base_rate:.2f}x |"
        )
    if not args.no_write:
        write_section(SECTION, "\n".join(lines))
        print(f"wrote {RESULTS}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
