"""A finished run's summary counts, read with SQL instead of building its frames.

``vvm`` prints, after every run, the decisions by action, how many succeeded and how many fell
back, and the final state hash. Building the actions frame for that costs as much as a
third of a million-decision run; aggregate queries over the ``decisions`` table read the same
numbers in a fraction of it. A trace of schema 1 or 2 (no ``decisions`` table) is counted
through its frame, as the frames read it.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from vivarium.errors import TraceError

__all__ = ["RunSummary", "run_summary"]


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What ``vvm`` says of a run's decisions.

    Attributes:
        by_action: (action, decisions) in the order of the action's name (a missing action,
            None, first), as the actions frame groups them.
        succeeded: Decisions whose ``success`` is true.
        fallbacks: Decisions that produced no usable action.
        final_state_hash: The state hash of the last committed step; None before any step.
    """

    by_action: tuple[tuple[str | None, int], ...]
    succeeded: int
    fallbacks: int
    final_state_hash: str | None

    @property
    def decisions(self) -> int:
        """Every decision recorded."""
        return sum(n for _, n in self.by_action)


def run_summary(path: str | os.PathLike[str]) -> RunSummary:
    """The summary counts of the trace at ``path`` (one snapshot of it).

    Raises:
        TraceError: The trace cannot be read.
    """
    from vivarium.trace.db import TraceDb

    p = Path(path)
    con = TraceDb.connect_readonly(p)
    try:
        last = con.execute("SELECT state_hash FROM steps ORDER BY step DESC LIMIT 1").fetchone()
        final = None if last is None else str(last[0])
        if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'decisions'").fetchone():
            rows = None
        else:
            # success and fallback are read as the frames read them: true when not 0, and a
            # fallback left empty (NULL) is not one.
            rows = con.execute(
                "SELECT action, count(*), COALESCE(SUM(success != 0), 0), "
                "COALESCE(SUM(COALESCE(fallback, 0) != 0), 0) "
                "FROM decisions GROUP BY action ORDER BY action"
            ).fetchall()
    except sqlite3.Error as exc:
        raise TraceError(f"cannot read the run's summary from {p}: {exc}") from None
    finally:
        con.close()
    if rows is None:
        return _summary_of_frame(p, final)
    return RunSummary(
        by_action=tuple((action, int(n)) for action, n, _, _ in rows),
        succeeded=sum(int(ok) for _, _, ok, _ in rows),
        fallbacks=sum(int(fell) for _, _, _, fell in rows),
        final_state_hash=final,
    )


def _summary_of_frame(p: Path, final: str | None) -> RunSummary:
    """The summary of a trace of schema 1 or 2, from its actions frame."""
    from vivarium.trace.frames import read_arrow

    actions = read_arrow(p, "actions")
    counts: dict[str | None, int] = {}
    for action in actions.column("action").to_pylist():
        counts[action] = counts.get(action, 0) + 1
    ordered = sorted(counts.items(), key=lambda item: (item[0] is not None, item[0] or ""))
    return RunSummary(
        by_action=tuple(ordered),
        succeeded=sum(1 for ok in actions.column("success").to_pylist() if ok),
        fallbacks=sum(1 for fell in actions.column("fallback").to_pylist() if fell),
        final_state_hash=final,
    )
