"""A public-goods study written in a notebook: the user code the identity and misuse tests run.

The cell runs as a kernel runs it: in one ``__main__`` namespace that has no source file.
``PublicGoods`` adds ``multiplier() * c`` to its pot for each gift ``c``; ``Give`` gives
``gift(time_step)`` each step. Tests set ``R`` (the default multiplier reads it), or give another
multiplier expression, as a researcher edits a cell.
"""

from __future__ import annotations

import sqlite3
import textwrap
from pathlib import Path
from typing import Any

STUDY = textwrap.dedent(
    """
    from vivarium.types import ActionRequest, ActionResult

    R = 1.5                      # the multiplier of the public good

    class PublicGoods:
        def __init__(self, agent_ids, seed):
            self.pot = 0.0
        def observe(self, agent_id, time_step):
            return {"pot": self.pot}
        def apply(self, request):
            self.pot += multiplier() * request.arguments["c"]
            return ActionResult.ok()
        def state_digest(self):
            return repr(self.pot)
        model_reporters = {"pot": lambda world: world.pot}

    class Give:
        def decide(self, *, run_id, time_step, agent_id, observation):
            return ActionRequest(run_id=run_id, time_step=time_step, agent_id=agent_id,
                                 action_name="give", arguments={"c": gift(time_step)})
    """
)


def notebook(multiplier: str = "R", gift: str = "1") -> dict[str, Any]:
    """The study's namespace, its cell run as a kernel runs it.

    Args:
        multiplier: The expression the pot multiplies each gift by (default: the global ``R``).
        gift: The expression of one agent's gift, of ``t`` (the step).

    Returns:
        The notebook's globals (``PublicGoods``, ``Give``, ``R``, ...).
    """
    cell: dict[str, Any] = {"__name__": "__main__"}
    source = STUDY + (
        f"\ndef multiplier():\n    return {multiplier}\n\ndef gift(t):\n    return {gift}\n"
    )
    exec(source, cell)
    return cell


def run_status(path: Path) -> tuple[str, int]:
    """A trace's ``(status, steps_done)``, read with plain SQL (no Vivarium reader)."""
    con = sqlite3.connect(path)
    try:
        row = con.execute("SELECT status, steps_done FROM runs").fetchone()
    finally:
        con.close()
    return str(row[0]), int(row[1])
