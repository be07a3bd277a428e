"""Where a run's trace stands, asked without loading it: finished, resumable, first fallback.

A sweep decides what to do with each of its runs from these answers alone: skip a run whose
trace is finished, resume one that has committed steps, rerun the rest, and name the first
decision that fell back when a complete run is not a clean result. Each answer is one or two
small queries on a read-only connection, and a missing, foreign or damaged file answers "no"
instead of raising, since to a sweep such a file is simply a run still to do.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import NamedTuple

from vivarium.errors import TraceError
from vivarium.trace.db import TraceDb

__all__ = ["Fallback", "first_fallback", "is_finished", "is_resumable"]


class Fallback(NamedTuple):
    """One decision that fell back: when, whose, and the reason recorded for it."""

    step: int
    agent_id: str
    error: str | None


def _run_record(con: sqlite3.Connection) -> tuple[str, str] | None:
    """The trace's (run_id, status), or None when the run never started."""
    return con.execute("SELECT run_id, status FROM runs").fetchone()


def is_resumable(path: str | os.PathLike[str], run_id: str) -> bool:
    """Whether ``path`` holds an unfinished trace of ``run_id`` with committed steps to keep.

    A resume needs no checkpoint: it re-executes the committed steps from the trace (see
    ``vivarium.experiment.runner.resume_run``); checkpoints only shorten that.

    Args:
        path: The trace file.
        run_id: The run the trace must belong to; a trace of another run is not resumable here.

    Returns:
        True when the trace is of ``run_id``, its status is not ``complete`` and it has at least
        one step committed; False otherwise, including when the file is missing or unreadable.
    """
    p = Path(path)
    if not p.is_file():
        return False
    try:
        con = TraceDb.connect_readonly(p)
    except TraceError:
        return False
    try:
        row = _run_record(con)
        if row is None or row[0] != run_id or row[1] == "complete":
            return False
        return con.execute("SELECT steps_done FROM runs").fetchone()[0] > 0
    except sqlite3.Error:
        return False
    finally:
        con.close()


def is_finished(path: str | os.PathLike[str], run_id: str) -> bool:
    """Whether ``path`` holds the complete trace of ``run_id``, and it passes validation.

    A finished trace is one nothing needs to be done for: its run record names ``run_id``, the
    status is ``complete``, and ``validate_trace`` finds the steps, rows and hash chain intact.

    Args:
        path: The trace file.
        run_id: The run the trace must belong to.

    Returns:
        True when the trace is finished; False otherwise, including when the file is missing,
        holds no run record or cannot be read.
    """
    p = Path(path)
    if not p.is_file():
        return False
    from vivarium.trace.validate import validate_trace

    try:
        con = TraceDb.connect_readonly(p)
        try:
            row = _run_record(con)
        except sqlite3.Error:
            return False
        finally:
            con.close()
        if row is None or row[0] != run_id or row[1] != "complete":
            return False
        return validate_trace(p).ok
    except (TraceError, sqlite3.Error):
        return False


def first_fallback(path: str | os.PathLike[str]) -> Fallback | None:
    """The first recorded decision of a trace that fell back, in the order SQLite returns it.

    Args:
        path: The trace file.

    Returns:
        The fallback, or None when the trace has none or cannot be read.
    """
    try:
        con = TraceDb.connect_readonly(path)
    except (TraceError, sqlite3.Error):
        return None
    try:
        row = con.execute(
            "SELECT step, agent_id, error FROM actions WHERE fallback = 1 LIMIT 1"
        ).fetchone()
    except sqlite3.Error:
        return None
    finally:
        con.close()
    return None if row is None else Fallback(*row)
