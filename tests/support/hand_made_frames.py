"""A decision frame written out by hand, for the analysis functions and the plots drawn from it.

Every expected value in those tests is counted off these rows, not computed by the code under
test.
"""

from __future__ import annotations

import polars as pl

__all__ = ["actions_frame"]


def actions_frame() -> pl.DataFrame:
    """Run r1: agents a and b over steps 0-2. Run r2: agent a over steps 0-1."""
    rows = [
        # run, step, seq, agent, action, success
        ("r1", 0, 0, "a", "noop", True),
        ("r1", 0, 1, "b", "emit", True),
        ("r1", 1, 0, "a", "emit", False),
        ("r1", 1, 1, "b", "emit", True),
        ("r1", 2, 0, "a", "noop", True),
        ("r1", 2, 1, "b", "post", False),
        ("r2", 0, 0, "a", "post", True),
        ("r2", 1, 0, "a", "post", True),
    ]
    return pl.DataFrame(
        rows, schema=["run_id", "step", "seq", "agent_id", "action", "success"], orient="row"
    )
