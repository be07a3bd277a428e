"""Mesa's own example models against the same models written with Vivarium's public API.

    python benchmarks/own_models_vs_mesa.py [--repeat 3] [--quick] [--no-write]

Mesa's side is the installed ``mesa.examples.BoltzmannWealth`` and ``Schelling`` (not
rewritten), each with its own ``DataCollector``; its frames (model and agent variables) are
loaded at the end. Vivarium's side is ``benchmarks/own_models.py``: per agent (a plain-Python
world and policy, every decision an action, run with ``order="shuffle"`` as Mesa's
``shuffle_do``) and batched (numpy world, ``BatchPolicy``, whose policy draws the random
activation order itself); every decision is recorded in the trace
(SQLite) and ``run.actions``, ``run.model_vars`` and ``run.agent_vars`` are loaded.

Sizes are Mesa's own benchmark configurations (``benchmarks/configurations.py`` in Mesa's
repository): small and large for each model. Schelling places ``density`` of the cells on
average in Mesa; ours places exactly that many. Each measurement runs in a fresh child
process after a warm-up run; sides alternate; best of ``--repeat``. Goals: per agent <= 1.0x
Mesa's time, batched >= 10x faster (<= 0.1x).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from results import machine, write_section  # noqa: E402
from results import measure_in_child as _measure  # noqa: E402

SECTION = "own_models_vs_mesa"
SEED = 42

# Mesa's benchmarks/configurations.py (projectmesa/mesa main, 2025-12).
CONFIGS: dict[str, dict[str, dict[str, Any]]] = {
    "boltzmann": {
        "small": {"steps": 125, "parameters": {"n": 100, "width": 10, "height": 10}},
        "large": {"steps": 10, "parameters": {"n": 10000, "width": 100, "height": 100}},
    },
    "schelling": {
        "small": {
            "steps": 20,
            "parameters": {
                "height": 40,
                "width": 40,
                "homophily": 0.4,
                "radius": 1,
                "density": 0.625,
            },
        },
        "large": {
            "steps": 10,
            "parameters": {
                "height": 100,
                "width": 100,
                "homophily": 1,
                "radius": 2,
                "density": 0.8,
            },
        },
    },
}
SIDES = ("mesa", "agent", "batch")
PARTS = ("build", "steps", "finish", "frames")


def mesa_side(model: str, size: str) -> dict[str, Any]:
    """Mesa's example model: build, step, and load its DataCollector's frames."""
    from mesa.examples import BoltzmannWealth, Schelling

    cls = BoltzmannWealth if model == "boltzmann" else Schelling
    conf = CONFIGS[model][size]

    def once(params: dict[str, Any], steps: int) -> dict[str, Any]:
        start = time.perf_counter()
        m = cls(seed=SEED, **params)
        built = time.perf_counter()
        marks = []
        for _ in range(steps):
            m.step()
            marks.append(time.perf_counter())
        ran = time.perf_counter() - start
        mv = m.datacollector.get_model_vars_dataframe()
        av = m.datacollector.get_agent_vars_dataframe()
        total = time.perf_counter() - start
        stat = (
            sum(a.wealth for a in m.agents)
            if model == "boltzmann"
            else float(mv["pct_happy"].iloc[-1]) / 100
        )
        return {
            "run_s": ran,
            "total_s": total,
            "step_s": (marks[-1] - marks[0]) / (steps - 1),
            "parts": {
                "build": built - start,
                "steps": marks[-1] - built,
                "finish": 0.0,
                "frames": total - ran,
            },
            "agents": len(m.agents),
            "rows": len(av),
            "stat": stat,
            "final": stat if model != "boltzmann" else float(mv["Gini"].iloc[-1]),
        }

    once(conf["parameters"], 2)
    return once(conf["parameters"], conf["steps"])


def vivarium_side(model: str, size: str, batched: bool) -> dict[str, Any]:
    """Our model: a traced run (every decision recorded), then its frames loaded."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import own_models as om

    from vivarium import Experiment

    conf = CONFIGS[model][size]
    params = dict(conf["parameters"])
    if model == "boltzmann":
        agents = params.pop("n")
        world = om.BatchBoltzmannWorld if batched else om.BoltzmannGridWorld
        policy = om.BatchBoltzmannPolicy if batched else om.BoltzmannGridPolicy
    else:
        agents = om.schelling_agents(params["width"], params["height"], params.pop("density"))
        world = om.BatchSchellingWorld if batched else om.SchellingWorld
        policy = om.BatchSchellingPolicy if batched else om.SchellingPolicy

    def once(steps: int, db: Path) -> dict[str, Any]:
        marks: list[float] = []
        start = time.perf_counter()
        run = Experiment(
            name=f"{model}-{size}",
            world=world,
            policy=policy,
            agents=agents,
            steps=steps,
            seed=SEED,
            # Per agent, the engine shuffles the agents each step (Mesa's ``shuffle_do``);
            # batched, the policy draws that order with numpy (Boltzmann) or the rule is
            # simultaneous (Schelling), and the engine records rows in agent order.
            order="sorted" if batched else "shuffle",
            world_options=params,
        ).run(db, progress=False, on_step=lambda step, record: marks.append(time.perf_counter()))
        ran = time.perf_counter() - start
        actions, mv, av = run.actions, run.model_vars, run.agent_vars
        total = time.perf_counter() - start
        last = av[av["step"] == av["step"].max()]
        stat = int(last["wealth"].sum()) if model == "boltzmann" else float(mv.iloc[-1, -1])
        step_s = (marks[-1] - marks[0]) / (steps - 1)
        built = marks[0] - start - step_s  # the first step's end, less one steady step
        return {
            "run_s": ran,
            "total_s": total,
            "step_s": step_s,
            "parts": {
                "build": built,
                "steps": marks[-1] - start - built,
                "finish": ran - (marks[-1] - start),  # the writer's last commits, reopening
                "frames": total - ran,
            },
            "agents": agents,
            "rows": len(actions),
            "stat": stat,
            "final": float(mv.iloc[-1, -1]),
            "trace_bytes": db.stat().st_size,
        }

    with tempfile.TemporaryDirectory() as tmp:
        once(2, Path(tmp) / "warm.sqlite")
        return once(conf["steps"], Path(tmp) / "bench.sqlite")


def child(spec: str) -> dict[str, Any]:
    side, model, size = spec.split(":")
    if side == "mesa":
        return mesa_side(model, size)
    return vivarium_side(model, size, batched=side == "batch")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=3, metavar=("SPEC", "AGENTS", "STEPS"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small sizes, once, no write")
    parser.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0])))
        return

    import mesa

    import vivarium

    repeat = 1 if args.quick else args.repeat
    sizes = ("small",) if args.quick else ("small", "large")
    print(f"Own models vs Mesa: {machine()}")
    rows: list[str] = []
    parts: list[str] = []
    goals: list[str] = []
    for model in CONFIGS:
        for size in sizes:
            steps = CONFIGS[model][size]["steps"]
            best: dict[str, dict[str, Any]] = {}
            for i in range(repeat):
                order = SIDES if i % 2 == 0 else SIDES[::-1]
                for side in order:
                    r = _measure(__file__, f"{side}:{model}:{size}", 0, 0)
                    print(
                        f"  {model} {size} {side:5s}: run {r['run_s'] * 1e3:8.1f} ms "
                        f"(steady {r['step_s'] * 1e3:.2f} ms/step), +frames "
                        f"{r['total_s'] * 1e3:.1f} ms; agents {r['agents']}, stat {r['stat']}"
                    )
                    if side not in best or r["total_s"] < best[side]["total_s"]:
                        best[side] = r
            m = best["mesa"]
            a_ratio = best["agent"]["total_s"] / m["total_s"]
            b_ratio = best["batch"]["total_s"] / m["total_s"]
            a_step = best["agent"]["step_s"] / m["step_s"]
            b_step = best["batch"]["step_s"] / m["step_s"]
            label = f"{model} {size} ({m['agents']:,} agents x {steps} steps)"
            line = (
                f"{label}: Mesa {m['total_s'] * 1e3:.1f} ms; per agent {a_ratio:.2f}x "
                f"(steady step {a_step:.2f}x) goal <= 1.0x {'met' if a_ratio <= 1 else 'NOT met'}"
                f"{' (per step: met)' if a_ratio > 1 and a_step <= 1 else ''}; "
                f"batched {1 / b_ratio:.1f}x faster (steady step {1 / b_step:.1f}x) goal >= 10x "
                f"{'met' if b_ratio <= 0.1 else 'NOT met'}"
                f"{' (per step: met)' if b_ratio > 0.1 and b_step <= 0.1 else ''}"
            )
            print(line)
            goals.append(f"- {line}")
            parts.append(
                f"| {model} | {size} | "
                + " | ".join(
                    " / ".join(f"{best[side]['parts'][part] * 1e3:.1f}" for side in SIDES)
                    for part in PARTS
                )
                + " |"
            )
            rows.append(
                f"| {model} | {size} | {m['agents']:,} x {steps} | {m['total_s'] * 1e3:.1f} | "
                f"{best['agent']['total_s'] * 1e3:.1f} | {best['batch']['total_s'] * 1e3:.1f} | "
                f"{a_ratio:.2f}x ({a_step:.2f}x) | {1 / b_ratio:.1f}x ({1 / b_step:.1f}x) | "
                f"{m['final']:.3f} / "
                f"{best['agent']['final']:.3f} / {best['batch']['final']:.3f} |"
            )
    lines = [
        "## Your own model vs Mesa's examples (`benchmarks/own_models_vs_mesa.py`)",
        "",
        f"Machine: {machine()}.",
        f"Mesa {mesa.__version__}, Vivarium {vivarium.__version__}.",
        "",
        "Mesa: the installed `mesa.examples.BoltzmannWealth` and `Schelling` with their own",
        "DataCollectors (frames loaded). Vivarium: `benchmarks/own_models.py`, per agent and",
        "batched, every decision traced to SQLite; `run.actions`, `run.model_vars` and",
        "`run.agent_vars` loaded. Sizes: Mesa's `benchmarks/configurations.py`. Times are run +",
        f"frames, best of {repeat}, each in a fresh process after a warm-up; sides alternate.",
        "In brackets, the ratio of steady step times (first to last step, so without building",
        "the model and its agents).",
        "",
        "| model | size | agents x steps | Mesa ms | per agent ms | batched ms | per agent / Mesa "
        "(steady step) | batched speed-up (steady step) | final Gini or share happy "
        "(Mesa / agent / batched) |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Goals (per agent <= 1.0x Mesa's time, batched >= 10x faster):",
        "",
        *goals,
        "",
        "Where the time goes (ms, Mesa / per agent / batched, the best run of each): building",
        "the model (Vivarium: the plan, world, policies, engine and trace file; taken as the",
        "first step's end less one steady step), stepping it, finishing (Vivarium: the trace",
        "writer's last commits and reading the run back) and loading the frames.",
        "",
        "| model | size | " + " | ".join(PARTS) + " |",
        "|---|---|" + "---|" * len(PARTS),
        *parts,
    ]
    if not (args.no_write or args.quick):
        write_section(SECTION, "\n".join(lines))
        print("wrote RESULTS.md")


if __name__ == "__main__":
    main()
