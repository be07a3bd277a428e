"""A user's world and policy for the golden trace of one's own model (``tests/golden``).

Their code is part of the golden run's identity (``vivarium.identity``): an edit here, even a
comment, names another run, so the golden trace no longer matches its re-run. Leave them as
they are; a change of behaviour goes into a new class and a new golden file.

The world has reporters of every kind the trace stores: model values that are an integer, a
float, text and JSON (``model_vars``), and agent values packed as ``<i8``, ``|b1`` and JSON
(``agent_vars``).
"""

from __future__ import annotations

import random
from typing import Any

from vivarium.types import ActionRequest, ActionResult


class Tally:
    """Agents add to their own counts; the world reports the total and each agent's count."""

    model_reporters = {
        "total": lambda w: w.total,
        "mean": lambda w: w.total / len(w.counts),
        "leader": lambda w: max(sorted(w.counts), key=w.counts.__getitem__),
        "counts": lambda w: dict(w.counts),
    }
    agent_reporters = {
        "count": lambda w: [w.counts[a] for a in w.agent_ids],
        "even": lambda w: [w.counts[a] % 2 == 0 for a in w.agent_ids],
        "label": lambda w: [f"{a}:{w.counts[a]}" for a in w.agent_ids],
    }

    def __init__(self, agent_ids: list[str], seed: int) -> None:
        self.agent_ids = list(agent_ids)
        self.counts = dict.fromkeys(self.agent_ids, 0)
        self.total = 0

    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        return {"time_step": time_step, "total": self.total, "mine": self.counts[agent_id]}

    def apply(self, request: ActionRequest) -> ActionResult:
        amount = int(request.arguments.get("amount", 1))
        self.counts[request.agent_id] += amount
        self.total += amount
        return ActionResult.ok({"total": self.total})

    def state_digest(self) -> str:
        return ",".join(f"{a}={n}" for a, n in sorted(self.counts.items()))


class Adder:
    """Adds 1 to 3, drawn from the agent's own generator."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: Any
    ) -> ActionRequest:
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name="add",
            arguments={"amount": self.rng.randint(1, 3)},
        )
