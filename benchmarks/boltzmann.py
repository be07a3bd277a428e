"""Mesa's Boltzmann wealth model against the same model as a Vivarium world and policy.

    python benchmarks/boltzmann.py [--agents 1000] [--steps 200] [--repeat 3] [--no-write]

Mesa's side is its introductory model (3.3): every agent starts with wealth 1; each step, in a
random order (``shuffle_do``), every agent with wealth gives one unit to a random other agent
(drawn from a list of the agents kept on the model, not ``random.choice(model.agents)``, which
rebuilds a list of all agents on every call); a ``DataCollector`` records every agent's wealth
each step, read back as a DataFrame at the end. Vivarium's side is
``vivarium.worlds.boltzmann`` (world ``boltzmann``, policy ``boltzmann``, ``order="shuffle"``):
every decision is traced to SQLite and ``run.actions`` is loaded; final wealth is computed
from the actions. Both totals must equal the number of agents; the Gini coefficients are shown.

Each measurement runs in a fresh child process after a warm-up run; sides alternate; best of
``--repeat``. The ratio is of the time per step (run only) and of the whole (run + DataFrame).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from results import RESULTS, machine, write_section  # noqa: E402
from results import measure_in_child as _measure  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SECTION = "boltzmann"
SEED = 42


def compute_gini(values: list[int]) -> float:
    xs = sorted(values)
    n, total = len(xs), sum(xs)
    if n == 0 or total == 0:
        return 0.0
    b = sum(x * (n - i) for i, x in enumerate(xs)) / (n * total)
    return 1 + (1 / n) - 2 * b


def mesa_side(agents: int, steps: int) -> dict[str, Any]:
    import mesa

    class MoneyAgent(mesa.Agent):
        def __init__(self, model: mesa.Model) -> None:
            super().__init__(model)
            self.wealth = 1

        def exchange(self) -> None:
            if self.wealth > 0:
                others = self.model.agent_list
                j = self.random.randrange(len(others) - 1)
                other = others[j] if others[j] is not self else others[-1]
                other.wealth += 1
                self.wealth -= 1

    class MoneyModel(mesa.Model):
        def __init__(self, n: int, seed: int) -> None:
            super().__init__(seed=seed)
            MoneyAgent.create_agents(model=self, n=n)
            self.agent_list = list(self.agents)
            self.datacollector = mesa.DataCollector(agent_reporters={"Wealth": "wealth"})

        def step(self) -> None:
            self.datacollector.collect(self)
            self.agents.shuffle_do("exchange")

    def once(n: int, s: int) -> tuple[float, float, Any, list[int]]:
        start = time.perf_counter()
        model = MoneyModel(n, SEED)
        for _ in range(s):
            model.step()
        ran = time.perf_counter() - start
        frame = model.datacollector.get_agent_vars_dataframe()
        total = time.perf_counter() - start
        return ran, total, frame, [a.wealth for a in model.agents]

    once(50, 20)
    ran, total, frame, wealth = once(agents, steps)
    return {
        "run_s": ran,
        "total_s": total,
        "rows": len(frame),
        "total_wealth": sum(wealth),
        "gini": compute_gini(wealth),
    }


def vivarium_side(agents: int, steps: int) -> dict[str, Any]:
    from vivarium import Experiment
    from vivarium.worlds.boltzmann import final_wealth

    def config(n: int, s: int) -> Experiment:
        return Experiment(
            name="boltzmann",
            world="boltzmann",
            policy="boltzmann",
            agents=n,
            steps=s,
            seed=SEED,
            order="shuffle",
        )

    with tempfile.TemporaryDirectory() as tmp:
        warm = config(50, 20).run(Path(tmp) / "warm.sqlite", progress=False)
        assert len(warm.actions) == 1000
        db = Path(tmp) / "bench.sqlite"
        start = time.perf_counter()
        run = config(agents, steps).run(db, progress=False)
        ran = time.perf_counter() - start
        frame = run.actions
        total = time.perf_counter() - start
        wealth = final_wealth(frame)
        return {
            "run_s": ran,
            "total_s": total,
            "rows": len(frame),
            "total_wealth": int(wealth.sum()),
            "gini": compute_gini(wealth.tolist()),
            "trace_bytes": db.stat().st_size,
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=3, metavar=("SIDE", "AGENTS", "STEPS"))
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = parser.parse_args()
    if args.child:
        side, n, s = args.child[0], int(args.child[1]), int(args.child[2])
        print(json.dumps((mesa_side if side == "mesa" else vivarium_side)(n, s)))
        return

    import mesa

    import vivarium

    agents, steps = args.agents, args.steps
    print(f"Boltzmann wealth, {agents} agents x {steps} steps: {machine()}")
    best: dict[str, dict[str, Any]] = {}
    for i in range(args.repeat):
        for side in ("mesa", "vivarium") if i % 2 == 0 else ("vivarium", "mesa"):
            r = _measure(__file__, side, agents, steps)
            print(
                f"  {side:8s}: run {r['run_s']:.2f} s ({r['run_s'] / steps * 1e3:.2f} ms/step), "
                f"+DataFrame {r['total_s']:.2f} s; total wealth {r['total_wealth']}, "
                f"Gini {r['gini']:.3f}"
            )
            if side not in best or r["total_s"] < best[side]["total_s"]:
                best[side] = r
    m, v = best["mesa"], best["vivarium"]
    if not m["total_wealth"] == v["total_wealth"] == agents:
        raise SystemExit(
            f"total wealth differs: mesa {m['total_wealth']}, vivarium {v['total_wealth']}"
        )
    step_ratio = v["run_s"] / m["run_s"]
    total_ratio = v["total_s"] / m["total_s"]
    print(
        f"step time: Mesa {m['run_s'] / steps * 1e3:.2f} ms, Vivarium "
        f"{v['run_s'] / steps * 1e3:.2f} ms -> Vivarium/Mesa {step_ratio:.2f}; "
        f"with the DataFrame {total_ratio:.2f}; total wealth {agents} on both sides"
    )
    lines = [
        "## Boltzmann wealth model: Vivarium vs Mesa (`benchmarks/boltzmann.py`)",
        "",
        f"Machine: {machine()}.",
        f"Mesa {mesa.__version__}, Vivarium {vivarium.__version__}.",
        "",
        f"{agents:,} agents x {steps:,} steps, random order each step; best of {args.repeat},",
        "each in a fresh child process after a warm-up run. Mesa records every agent's wealth",
        "each step (DataCollector); Vivarium traces every decision to SQLite (the per-agent",
        "path: only random agents in the channel world have a vectorised one) and loads",
        "`run.actions`.",
        "",
        "| | run s | ms / step | + DataFrame s | total wealth | Gini |",
        "|---|---|---|---|---|---|",
        f"| Mesa | {m['run_s']:.2f} | {m['run_s'] / steps * 1e3:.2f} | {m['total_s']:.2f} | "
        f"{m['total_wealth']} | {m['gini']:.3f} |",
        f"| Vivarium | {v['run_s']:.2f} | {v['run_s'] / steps * 1e3:.2f} | {v['total_s']:.2f} | "
        f"{v['total_wealth']} | {v['gini']:.3f} |",
        "",
        f"Step time, Vivarium / Mesa: **{step_ratio:.2f}** (Vivarium is {step_ratio:.1f}x slower "
        f"per step; {total_ratio:.1f}x with the DataFrame).",
        f"Total wealth is {agents} on both sides; the Gini coefficients differ only through the",
        "random streams (different generators draw different partners).",
    ]
    if not args.no_write:
        write_section(SECTION, "\n".join(lines))
        print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
