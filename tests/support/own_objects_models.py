"""A world and a policy written as plain Python, never registered (tests of vivarium.objects).

``Tally`` keeps one running total; ``add`` adds its ``amount`` to it and answers with the new
total, so a run's outcome is known in advance: after ``steps`` steps of ``n`` adders of
``amount``, the total is ``start + steps * n * amount``.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from vivarium.types import ActionRequest, ActionResult


class Tally:
    """One running total every agent adds to."""

    def __init__(self, agent_ids: list[str], steps: int, start: int = 0) -> None:
        self.agent_ids = list(agent_ids)
        self.steps = steps
        self.total = start

    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        return {"time_step": time_step, "total": self.total, "steps": self.steps}

    def apply(self, request: ActionRequest) -> ActionResult:
        if request.action_name == "noop":
            return ActionResult.ok()
        if request.action_name != "add":
            return ActionResult.failed(f"no action {request.action_name}")
        self.total += int(request.arguments["amount"])
        return ActionResult.ok({"total": self.total})

    def state_digest(self) -> str:
        return hashlib.sha256(str(self.total).encode()).hexdigest()

    def snapshot(self) -> int:
        return self.total

    def restore(self, state: int) -> None:
        self.total = state


class Adder:
    """Adds ``amount`` every step; says which seed it was given (and a draw of its rng)."""

    def __init__(self, agent_id: str, seed: int, rng: random.Random, amount: int = 1) -> None:
        self.agent_id, self.seed, self.amount = agent_id, seed, amount
        self.draw = rng.randrange(1000)

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name="add",
            arguments={"amount": self.amount, "seed": self.seed, "draw": self.draw},
        )


def make_tally(agent_ids: list[str], start: int = 0) -> Tally:
    """A factory that asks for less than the class does (no ``steps``)."""
    return Tally(agent_ids, steps=-1, start=start)
