"""Many small runs: a Vivarium sweep against Mesa's ``batch_run``, on the same model.

    python benchmarks/sweep_vs_mesa.py [--runs 1000] [--workers 2] [--repeat 1] [--no-write]

The model is Mesa's Boltzmann wealth at Mesa's small benchmark size (100 agents on 10 x 10,
125 steps), once per seed. Mesa: the installed ``mesa.examples.BoltzmannWealth`` through
``mesa.batchrunner.batch_run`` (``number_processes`` workers, data collected at the end as by
default) and its results as a DataFrame. Vivarium: the same model written with the public API
(``benchmarks/own_models.py``, per agent, every decision a row of a trace per run) through
``Experiment.sweep(seed=[...], max_workers=...)`` and the merged ``model_vars`` frame. Each
side is timed as a whole process (interpreter, imports, pool start-up, every run, the frame),
sides alternating, best of ``--repeat``. Goal (issue "Fast with every decision a row"): the
sweep beats ``batch_run``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from results import machine, measure_in_child, write_section  # noqa: E402

SECTION = "sweep_vs_mesa"
HERE = Path(__file__).resolve().parent
SIZE = {"n": 100, "width": 10, "height": 10}
STEPS = 125


def mesa_side(runs: int, workers: int) -> dict[str, Any]:
    import pandas as pd
    from mesa.batchrunner import batch_run
    from mesa.examples import BoltzmannWealth

    results = batch_run(
        BoltzmannWealth,
        parameters={**SIZE, "seed": list(range(runs))},
        number_processes=workers,
        iterations=1,
        max_steps=STEPS,
        display_progress=False,
    )
    frame = pd.DataFrame(results)
    return {"runs": int(frame["RunId"].nunique()), "rows": len(frame)}


def vivarium_side(runs: int, workers: int) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    import own_models as om

    from vivarium import Experiment

    exp = Experiment(
        name="sweep",
        world=om.BoltzmannGridWorld,
        policy=om.BoltzmannGridPolicy,
        agents=SIZE["n"],
        steps=STEPS,
        order="shuffle",  # Mesa's shuffle_do
        world_options={"width": SIZE["width"], "height": SIZE["height"]},
    )
    with tempfile.TemporaryDirectory() as tmp:
        sweep = exp.sweep(seed=list(range(runs)), folder=Path(tmp) / "sweep", max_workers=workers)
        frame = sweep.model_vars
        assert sweep.ok, sweep.summary()
        return {"runs": int(frame["run"].nunique()), "rows": len(frame)}


def _whole_process(side: str, runs: int, workers: int) -> tuple[float, dict[str, Any]]:
    """``side`` in a fresh process (``results.measure_in_child``), timed start to exit."""
    began = time.perf_counter()
    result = measure_in_child(__file__, side, runs, workers)
    return time.perf_counter() - began, result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=3, metavar=("SIDE", "RUNS", "WORKERS"))
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = parser.parse_args()
    if args.child:
        side, runs, workers = args.child[0], int(args.child[1]), int(args.child[2])
        fn = {"mesa": mesa_side, "vivarium": vivarium_side}[side]
        print(json.dumps(fn(runs, workers)))
        return

    import mesa

    import vivarium

    print(f"sweep vs Mesa {mesa.__version__} (vivarium {vivarium.__version__}): {machine()}")
    best: dict[str, float] = {}
    for i in range(args.repeat):
        for side in ("mesa", "vivarium") if i % 2 == 0 else ("vivarium", "mesa"):
            seconds, result = _whole_process(side, args.runs, args.workers)
            assert result["runs"] == args.runs, (side, result)
            print(f"  {side:8s}: {seconds:.2f} s for {args.runs} runs ({result['rows']} rows)")
            best[side] = min(best.get(side, float("inf")), seconds)
    ratio = best["mesa"] / best["vivarium"]
    met = ratio >= 1
    print(f"{args.runs} runs on {args.workers} workers: the sweep is {ratio:.2f}x batch_run")
    per = {side: 1000 * s / args.runs for side, s in best.items()}
    lines = [
        "## Many small runs: a sweep vs Mesa's batch_run (`benchmarks/sweep_vs_mesa.py`)",
        "",
        f"Machine: {machine()}.",
        f"Mesa {mesa.__version__}, Vivarium {vivarium.__version__}.",
        "",
        f"Boltzmann wealth, {SIZE['n']} agents on {SIZE['width']} x {SIZE['height']}, {STEPS} "
        f"steps, one run a seed, {args.runs} seeds on {args.workers} workers. Mesa:",
        "`batch_run` of `mesa.examples.BoltzmannWealth` (data at the end, as by default) and its",
        "DataFrame. Vivarium: `Experiment.sweep` of `benchmarks/own_models.py`'s per-agent model",
        "(every decision a row of each run's trace) and the merged `model_vars`. Whole process",
        f"each, sides alternating, best of {args.repeat}. Speed-up = Mesa time / Vivarium time.",
        "",
        "| runs | workers | Mesa s | Vivarium s | Mesa ms a run | Vivarium ms a run | speed-up |",
        "|---|---|---|---|---|---|---|",
        f"| {args.runs:,} | {args.workers} | {best['mesa']:.1f} | {best['vivarium']:.1f} | "
        f"{per['mesa']:.0f} | {per['vivarium']:.0f} | **{ratio:.2f}x** |",
        "",
        f"Goal (the sweep beats `batch_run`): {'met' if met else 'not met'}.",
    ]
    if not args.no_write:
        write_section(SECTION, "\n".join(lines))
        print("wrote RESULTS.md")


if __name__ == "__main__":
    main()
