"""A run's fixed cost: a small run to its analysis-ready frame, Vivarium against Mesa.

    python benchmarks/fixed_cost.py [--runs 50] [--agents 100] [--no-write]

What every run pays whatever its size, and what a sweep of many small runs pays once a run.
The model is ``phase1_vs_mesa.py``'s (random agents, ``noop`` or ``emit_event``), ``--agents``
agents for one step:

- Mesa: ``DecisionModel(agents, seed)``, one ``step()``, the DataCollector's agent-vars frame;
- Vivarium: ``Experiment(agents=..., steps=1, seed=...).run(path)`` (creating the trace file,
  recording the run, the step, committing and closing it one self-contained file), then
  ``run.actions``. Its parts are timed as well: the run, the frame, and an empty trace made
  and closed (``TraceDb``), the file's share of the run.

Each side in a fresh child process, after warm-up runs: ``--runs`` runs one after the other,
each into a new file, timed from building the model to the frame; best / median / worst.
Goal (issue "Fast with every decision a row"): Vivarium's median at most 10 ms.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from phase1_vs_mesa import SEED, decision_model
from results import machine, measure_in_child, write_section

SECTION = "fixed_cost"
GOAL_MS = 10.0
WARM_UP = 5


def _spread(seconds: list[float]) -> list[float]:
    """Best, median and worst, in ms."""
    return [min(seconds) * 1e3, statistics.median(seconds) * 1e3, max(seconds) * 1e3]


def mesa_side(agents: int, runs: int) -> dict[str, Any]:
    DecisionModel = decision_model()  # noqa: N806 - a class

    def once() -> float:
        start = time.perf_counter()
        model = DecisionModel(agents, SEED)
        model.step()
        frame = model.datacollector.get_agent_vars_dataframe()
        assert len(frame) == agents
        return time.perf_counter() - start

    for _ in range(WARM_UP):
        once()
    return {"total": _spread([once() for _ in range(runs)])}


def vivarium_side(agents: int, runs: int) -> dict[str, Any]:
    from vivarium import Experiment
    from vivarium.trace.db import TraceDb

    parts: dict[str, list[float]] = {"total": [], "run": [], "frame": [], "trace": []}
    with tempfile.TemporaryDirectory() as tmp:

        def once(i: int) -> None:
            start = time.perf_counter()
            run = Experiment(name=f"small{i}", agents=agents, steps=1, seed=SEED).run(
                Path(tmp) / f"run{i}.sqlite", progress=False
            )
            ran = time.perf_counter()
            frame = run.actions
            done = time.perf_counter()
            assert len(frame) == agents
            made = time.perf_counter()
            TraceDb(Path(tmp) / f"empty{i}.sqlite").close()
            closed = time.perf_counter()
            for name, seconds in (
                ("total", done - start),
                ("run", ran - start),
                ("frame", done - ran),
                ("trace", closed - made),
            ):
                parts[name].append(seconds)

        for i in range(WARM_UP):
            once(-1 - i)
        for values in parts.values():
            values.clear()
        for i in range(runs):
            once(i)
    return {name: _spread(values) for name, values in parts.items()}


def child(side: str, agents: int, runs: int) -> None:
    import json

    result = mesa_side(agents, runs) if side == "mesa" else vivarium_side(agents, runs)
    print(json.dumps(result))


def _cell(values: list[float]) -> str:
    return " / ".join(f"{v:.1f}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--child", nargs=3, metavar=("SIDE", "AGENTS", "RUNS"))
    parser.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), int(args.child[2]))
        return

    import mesa

    import vivarium

    print(f"fixed cost vs Mesa {mesa.__version__} (vivarium {vivarium.__version__}): {machine()}")
    mesa_result = measure_in_child(__file__, "mesa", args.agents, args.runs)
    ours = measure_in_child(__file__, "vivarium", args.agents, args.runs)
    print(f"  Mesa: {_cell(mesa_result['total'])} ms (best / median / worst)")
    for name in ("total", "run", "frame", "trace"):
        print(f"  Vivarium {name}: {_cell(ours[name])} ms")
    median = ours["total"][1]
    lines = [
        "## A run's fixed cost (`benchmarks/fixed_cost.py`)",
        "",
        f"Machine: {machine()}.",
        f"Mesa {mesa.__version__}, Vivarium {vivarium.__version__}.",
        "",
        f"{args.agents} random agents x 1 step to an analysis-ready frame, {args.runs} runs one",
        "after the other in one process (each side in its own, after warm-up runs), each timed",
        "from building the model to the frame. Mesa: `phase1_vs_mesa.py`'s model, one step, the",
        "DataCollector's agent-vars frame. Vivarium: `Experiment(...).run(path)` (the trace",
        "created, the run recorded, the step, the file committed and closed) and `run.actions`;",
        "its parts: the run, the frame, and an empty trace made and closed (`TraceDb`).",
        "",
        "| | ms: best / median / worst |",
        "|---|---|",
        f"| Mesa | {_cell(mesa_result['total'])} |",
        f"| Vivarium, run + frame | {_cell(ours['total'])} |",
        f"| Vivarium: the run | {_cell(ours['run'])} |",
        f"| Vivarium: the frame | {_cell(ours['frame'])} |",
        f"| Vivarium: an empty trace made and closed | {_cell(ours['trace'])} |",
        "",
        f"Vivarium / Mesa (medians): {median / mesa_result['total'][1]:.1f}x. "
        f"Goal (Vivarium's median <= {GOAL_MS:.0f} ms): "
        f"{'met' if median <= GOAL_MS else 'not met'}.",
    ]
    if not args.no_write:
        write_section(SECTION, "\n".join(lines))
        print("wrote benchmarks/RESULTS.md")


if __name__ == "__main__":
    main()
