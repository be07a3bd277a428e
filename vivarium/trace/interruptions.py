"""A run's interruptions: when it stopped before its end, at which step, why, what it discarded.

A resumed run's result is the uninterrupted run's, table for table (see
``vivarium.experiment.runner.resume_run``), so nothing in those tables tells that it stopped on the way.
That is history worth keeping (an LLM run that needed nine resumes against a flaky server
says something about the server, and what a sampling model answered in a step that was then
discarded is gone otherwise), so it is kept apart, in the ``interruptions`` table
(``vivarium.trace.schema.INTERRUPTIONS``): created by the first interruption, absent from a
trace that never had one. Its wall-clock ``recorded_at`` is the one timestamp a deterministic
trace keeps, because it is history, not a result.

``validate``, ``Run.health`` (a note, not a problem: a resumed run is a whole result) and the
inspector read it through ``read_interruptions`` and say it with ``describe``.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vivarium.trace.onefile import read_connection
from vivarium.trace.schema import INTERRUPTIONS

__all__ = ["Interruption", "describe", "insert_job", "read_interruptions"]

_CREATE = INTERRUPTIONS.ddl().replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1)
_INSERT = (
    "INSERT INTO interruptions (step, ended, reason, recorded_at, decisions, llm_calls, "
    "discarded) VALUES (?, ?, ?, ?, ?, ?, ?)"
)


@dataclass(frozen=True, slots=True)
class Interruption:
    """One row of ``interruptions`` (see ``vivarium.trace.schema.INTERRUPTIONS``)."""

    step: int
    ended: str
    reason: str | None
    recorded_at: str
    decisions: int
    llm_calls: int
    discarded: tuple[dict[str, Any], ...] = ()


def insert_job(
    step: int,
    ended: str,
    reason: str | None,
    recorded_at: str,
    decisions: int,
    calls: Sequence[dict[str, Any]],
) -> Callable[[sqlite3.Connection], None]:
    """The writer job that records one interruption, in a transaction of its own.

    The table is made by the first one. An interruption found at a trace still ``running``
    (a resume stopped before its first step, after a process that was killed) also marks the
    run ``interrupted`` or ``failed``, so the file never claims a run is being written.

    Args:
        step: The first step not committed.
        ended: ``interrupted``, ``failed`` or ``killed``.
        reason: Why (the run record's error).
        recorded_at: When (UTC ISO 8601).
        decisions: Decisions of that step taken before the stop.
        calls: The LLM call attempts of that step (``engine.discarded_call`` dicts).
    """
    discarded = json.dumps(list(calls), sort_keys=True, default=str) if calls else None
    row = (step, ended, reason, recorded_at, decisions, len(calls), discarded)

    def job(con: sqlite3.Connection) -> None:
        con.execute("BEGIN")
        try:
            con.execute(_CREATE)
            con.execute(_INSERT, row)
            if ended != "killed":
                con.execute(
                    "UPDATE runs SET status = ?, error = COALESCE(?, error) "
                    "WHERE status = 'running'",
                    (ended, reason),
                )
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise

    job.step = step  # type: ignore[attr-defined]  # named in the error if it fails
    return job


def read_interruptions(
    source: str | os.PathLike[str] | sqlite3.Connection,
) -> list[Interruption]:
    """The interruptions a trace recorded, oldest first (none for a trace without the table).

    Args:
        source: The trace file, or an open connection to it.
    """
    if isinstance(source, sqlite3.Connection):
        return _read(source)
    con = read_connection(source)  # closing it leaves the trace one file
    try:
        return _read(con)
    finally:
        con.close()


def _read(con: sqlite3.Connection) -> list[Interruption]:
    exists = con.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'interruptions'"
    ).fetchone()
    if exists is None:
        return []
    rows = con.execute(
        "SELECT step, ended, reason, recorded_at, decisions, llm_calls, discarded "
        "FROM interruptions ORDER BY id"
    ).fetchall()
    return [Interruption(*row[:6], tuple(json.loads(row[6])) if row[6] else ()) for row in rows]


def describe(interruptions: Sequence[Interruption], status: str) -> str | None:
    """One line for a run's interruptions: ``resumed after 2 interruptions (steps 4, 9)``.

    Args:
        interruptions: What ``read_interruptions`` gave.
        status: The run's status: a complete run was resumed after them; another one is
            still stopped at the last.

    Returns:
        The line, or None for a run never interrupted.
    """
    if not interruptions:
        return None
    n = len(interruptions)
    times = "1 interruption" if n == 1 else f"{n} interruptions"
    steps = ", ".join(str(i.step) for i in interruptions)
    where = f"step {steps}" if n == 1 else f"steps {steps}"
    lost = sum(i.llm_calls for i in interruptions)
    discarded = f"; {lost} LLM call attempts of unfinished steps discarded" if lost else ""
    if status == "complete":
        return f"resumed after {times} ({where}){discarded}"
    return f"{times} so far ({where}){discarded}"
