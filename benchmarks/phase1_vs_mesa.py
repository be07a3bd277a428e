"""Random agents: Vivarium (persisting every decision to SQLite) against Mesa 3.3 (in memory).

    python benchmarks/phase1_vs_mesa.py [--repeat 3] [--sizes 1000x1000,10000x100] [--no-write]

The Mesa model makes the same decisions: each agent has its own ``random.Random`` seeded with
``stable_agent_seed(seed, agent_id)`` (Mesa 3's ``Agent.rng`` is a read-only property, so the
attribute is ``chooser``), picks ``noop`` or ``emit_event`` with ``choice`` and for an event
draws ``randint(0, 1_000_000)``; agents act in creation (= sorted id) order and a
``DataCollector`` records every decision, returned as a DataFrame. Vivarium's side is
``Experiment(agents, steps).run(db)`` then ``run.actions``: deciding, tracing every step to
SQLite and loading the decisions as a pandas DataFrame.

Each measurement runs in a fresh child process (one process tree, one at a time), after that
child has imported its framework and done a small warm-up run; Mesa and Vivarium alternate, and
the best of ``--repeat`` is kept. Both sides are checked to make the same decisions (the number
of events and the sum of their values). Results go to ``benchmarks/RESULTS.md``.
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
SECTION = "phase1_vs_mesa"
SEED = 42


# -- the two sides (run inside a child process) ------------------------------------------------
def mesa_side(agents: int, steps: int) -> dict[str, Any]:
    import random

    import mesa

    from vivarium.seeding import agent_ids, stable_agent_seed

    actions = ("noop", "emit_event")

    class DecisionAgent(mesa.Agent):
        def __init__(self, model: mesa.Model, agent_id: str, seed: int) -> None:
            super().__init__(model)
            self.agent_id = agent_id
            self.chooser = random.Random(seed)  # Agent.rng is Mesa's own, read-only
            self.action: str | None = None
            self.value: int | None = None

        def step(self) -> None:
            self.action = self.chooser.choice(actions)
            self.value = self.chooser.randint(0, 1_000_000) if self.action == "emit_event" else None

    class DecisionModel(mesa.Model):
        def __init__(self, n: int, seed: int) -> None:
            super().__init__(seed=seed)
            for aid in agent_ids(n):
                DecisionAgent(self, aid, stable_agent_seed(seed, aid))
            self.datacollector = mesa.DataCollector(
                agent_reporters={"agent_id": "agent_id", "action": "action", "value": "value"}
            )

        def step(self) -> None:
            self.agents.do("step")
            self.datacollector.collect(self)

    def once(n: int, s: int) -> tuple[float, Any]:
        start = time.perf_counter()
        model = DecisionModel(n, SEED)
        for _ in range(s):
            model.step()
        frame = model.datacollector.get_agent_vars_dataframe()
        return time.perf_counter() - start, frame

    once(50, 20)  # warm-up
    seconds, frame = once(agents, steps)
    events = frame["action"] == "emit_event"
    return {
        "seconds": seconds,
        "rows": len(frame),
        "events": int(events.sum()),
        "value_sum": int(frame.loc[events, "value"].sum()),
    }


def vivarium_side(agents: int, steps: int) -> dict[str, Any]:
    from vivarium import Experiment

    with tempfile.TemporaryDirectory() as tmp:
        warm = Experiment(name="warmup", agents=50, steps=20, seed=SEED)
        assert len(warm.run(Path(tmp) / "warmup.sqlite", progress=False).actions) == 1000
        db = Path(tmp) / "bench.sqlite"
        start = time.perf_counter()
        run = Experiment(name="bench", agents=agents, steps=steps, seed=SEED).run(
            db, progress=False
        )
        frame = run.actions
        seconds = time.perf_counter() - start
        events = frame["action"] == "emit_event"
        values = frame.loc[events, "arguments"].str.extract(r'"value":(\d+)')[0].astype("int64")
        return {
            "seconds": seconds,
            "rows": len(frame),
            "events": int(events.sum()),
            "value_sum": int(values.sum()),
            "trace_bytes": db.stat().st_size,
        }


def child(side: str, agents: int, steps: int) -> None:
    fn = mesa_side if side == "mesa" else vivarium_side
    print(json.dumps(fn(agents, steps)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=3, metavar=("SIDE", "AGENTS", "STEPS"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", default="1000x1000,10000x100")
    parser.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), int(args.child[2]))
        return

    import mesa

    import vivarium

    sizes = [tuple(int(x) for x in size.split("x")) for size in args.sizes.split(",")]
    rows = []
    print(f"phase1 vs Mesa {mesa.__version__} (vivarium {vivarium.__version__}): {machine()}")
    for agents, steps in sizes:
        decisions = agents * steps
        best: dict[str, dict[str, Any]] = {}
        for i in range(args.repeat):
            for side in ("mesa", "vivarium") if i % 2 == 0 else ("vivarium", "mesa"):
                result = _measure(__file__, side, agents, steps)
                assert result["rows"] == decisions, (side, result)
                print(
                    f"  {agents}x{steps} {side:8s}: {result['seconds']:.2f} s "
                    f"({decisions / result['seconds']:,.0f} decisions/s)"
                )
                if side not in best or result["seconds"] < best[side]["seconds"]:
                    best[side] = result
        m, v = best["mesa"], best["vivarium"]
        same = (m["events"], m["value_sum"]) == (v["events"], v["value_sum"])
        if not same:
            raise SystemExit(f"the two models disagree: mesa {m} vivarium {v}")
        ratio = m["seconds"] / v["seconds"]
        print(
            f"{agents} agents x {steps} steps: Mesa {decisions / m['seconds']:,.0f}/s, "
            f"Vivarium {decisions / v['seconds']:,.0f}/s -> Vivarium {ratio:.2f}x Mesa "
            f"(same decisions: {same})"
        )
        rows.append((agents, steps, m, v, ratio))

    met = all(ratio >= 2 for *_, ratio in rows)
    lines = [
        "## Random agents: Vivarium vs Mesa (`benchmarks/phase1_vs_mesa.py`)",
        "",
        f"Machine: {machine()}.",
        f"Mesa {mesa.__version__}, Vivarium {vivarium.__version__}.",
        "",
        "Same decisions on both sides (checked: number of events and sum of their values).",
        "Mesa keeps them in memory (DataCollector -> DataFrame); Vivarium writes every step to",
        "an SQLite trace and loads `run.actions`. Each measurement in a fresh child process",
        f"after a warm-up run; best of {args.repeat}, sides alternating. Speed-up = Mesa time /",
        "Vivarium time (above 1: Vivarium is faster).",
        "",
        "| agents x steps | decisions | Mesa s | Mesa decisions/s | Vivarium s "
        "| Vivarium decisions/s | speed-up | trace MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for agents, steps, m, v, ratio in rows:
        d = agents * steps
        lines.append(
            f"| {agents:,} x {steps:,} | {d:,} | {m['seconds']:.2f} | {d / m['seconds']:,.0f} | "
            f"{v['seconds']:.2f} | {d / v['seconds']:,.0f} | **{ratio:.2f}x** | "
            f"{v['trace_bytes'] / 1e6:.1f} |"
        )
    lines += ["", f"Goal (Vivarium >= 2x Mesa while persisting): {'met' if met else 'not met'}."]
    if not args.no_write:
        write_section(SECTION, "\n".join(lines))
        print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
