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
        if not con.in_transaction:
            con.execute("BEGIN")  # one snapshot for every query
        last = con.execute("SELECT state_hash FROM steps ORDER BY step DESC LIMIT 1").fetchone()
        final = None if last is None else str(last[0])
        if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'decisions'").fetchone():
            rows = None
        else:
            rows = _counts(con)
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


_FEW_ACTIONS = 16  # up to this many, the actions are counted in one pass instead of sorted


def _counts(con: sqlite3.Connection) -> list[tuple[str | None, int, int, int]]:
    """(action, decisions, succeeded, fallbacks) per action, in the order of the action's name.

    ``GROUP BY action`` sorts every decision (a third of a second for a million); a run has a
    few actions, so they are found first (``DISTINCT``: no sort) and counted in one pass, each
    a filter of it. ``success`` and ``fallback`` are read as the frames read them, each on its
    own (true when not 0; a fallback left empty is not one): not at all when the writer's meta
    says no row ever wrote it (its default for every decision), on both paths alike.
    """
    from vivarium.trace.db import listed_filled

    actions = [
        a
        for (a,) in con.execute(
            "SELECT DISTINCT action FROM decisions LIMIT ?", (_FEW_ACTIONS + 1,)
        )
    ]
    # Each column as the frames read it: from the rows where the writer's meta lists it as
    # filled (or lists nothing), else its default for every row (the frames trust the meta).
    filled = listed_filled(con)
    success = "(success != 0)" if filled is None or "success" in filled else "1"
    fallback = "(COALESCE(fallback, 0) != 0)" if filled is None or "fallback" in filled else "0"
    if len(actions) > _FEW_ACTIONS:  # many actions: one sort is cheaper than many filters
        return [
            (action, int(n), int(ok), int(fell))
            for action, n, ok, fell in con.execute(
                f"SELECT action, count(*), COALESCE(SUM({success}), 0), "  # noqa: S608
                f"COALESCE(SUM({fallback}), 0) FROM decisions GROUP BY action ORDER BY action"
            )
        ]
    actions.sort(key=lambda a: (a is not None, a or ""))  # SQLite's order: NULL first
    read = success != "1" or fallback != "0"  # else every decision succeeded, none fell back
    columns = []
    for _ in actions:
        columns.append("count(*) FILTER (WHERE action IS ?)")
        if read:
            columns.append(f"COALESCE(SUM({success}) FILTER (WHERE action IS ?), 0)")
            columns.append(f"COALESCE(SUM({fallback}) FILTER (WHERE action IS ?), 0)")
    if not columns:
        return []
    per = 3 if read else 1
    values = con.execute(
        f"SELECT {', '.join(columns)} FROM decisions",  # noqa: S608 - placeholders only
        [a for a in actions for _ in range(per)],
    ).fetchone()
    out = []
    for i, action in enumerate(actions):
        n = int(values[i * per])
        ok, fell = (int(values[i * per + 1]), int(values[i * per + 2])) if read else (n, 0)
        out.append((action, n, ok, fell))
    return out


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
