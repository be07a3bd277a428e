"""A fork's trace file: its parent's steps before the fork, its own run record, the fork's state.

A fork of a run at step ``t`` repeats its parent exactly before ``t`` and follows its own
config from ``t`` on (``vivarium.experiment.runner``). Its file is made here, before its first
own step, as one unit (a copy under a temporary name, renamed into place once whole):

- every row of the parent's steps ``0 .. t-1`` (decisions, state hashes, messages, LLM calls and
  their texts, transitions, reporters), copied, not re-executed: the same bytes of the same rows;
- none of the parent's later rows, none of its checkpoints (states the parent's config made: a
  resume of the child must not re-execute its prefix under the child's config), and none of its
  interruptions (the parent's history, not the child's);
- the child's run record and agents, ``steps_done = t``, status ``running``, and aam's
  ``messages`` columns again, since their ``run_id`` holds the run's id as a constant;
- the fork's checkpoint at step ``t - 1``: the parent's state there, which a resume of the
  child restores as its start (for ``t = 0``: none, the child starts as any run);
- where the parent's trace was (``fork_parent``, relative to the child's folder when it can
  be), which ``lineage`` follows.

The child is then an unfinished run like any other: a resume finishes it, a stop leaves it
resumable, and whoever reads it sees one self-contained file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

from vivarium.errors import TraceError
from vivarium.trace.db import _truncate, write_run_record
from vivarium.trace.onefile import read_connection
from vivarium.trace.schema import AAM_MESSAGE_COLUMNS
from vivarium.types import RunMetadata

__all__ = [
    "FORK_PARENT_META_KEY",
    "ForkState",
    "Lineage",
    "copy_trace",
    "lineage",
    "write_fork_file",
]

FORK_PARENT_META_KEY = "fork_parent"
"""The meta key of where a fork's parent trace is (relative to the fork's folder if it can be)."""


class ForkState(NamedTuple):
    """The parent's state after the step before the fork: what the child restores."""

    step: int
    state_hash: str
    world_state: str
    agent_states: str


def write_fork_file(
    parent: Path,
    child: Path,
    *,
    at_step: int,
    meta: RunMetadata,
    agents: Iterable[tuple[int, str, str, str | None]],
    state: ForkState | None,
    created: str | None,
    meta_rows: Mapping[str, str | None] | None = None,
) -> None:
    """Write the fork's file at ``child`` (see the module); nothing is there until it is whole.

    Args:
        parent: The parent's trace (read only; it may be open elsewhere).
        child: Where the fork's trace goes (a file there is replaced: the caller decided).
        at_step: The fork's first own step.
        meta: The child's run record.
        agents: The child's agents (agent_idx, agent_id, policy name, seed).
        state: The parent's state after ``at_step - 1`` (None when ``at_step`` is 0).
        created: When the child was made (None: deterministic timestamps).
        meta_rows: ``meta`` rows the child records as any run does (its code, reporters,
            LLM settings); None removes the parent's row of that key.

    Raises:
        TraceError: The parent cannot be read or the child cannot be written (one line).
    """
    rows = dict(meta_rows or {})
    rows[FORK_PARENT_META_KEY] = _reference(parent, child)
    record = (meta, list(agents), created, at_step)

    def make(con: sqlite3.Connection) -> None:
        _make_child(con, record, state, rows)

    _copied(parent, child, make, what="fork")


def copy_trace(source: Path, target: Path) -> None:
    """Copy a trace into ``target`` as one file, byte for byte when it is one file.

    A closed trace is one self-contained file (``vivarium.trace.onefile``): its bytes are
    copied. One with a ``-wal`` beside it (a writer at work, a reader that kept it) is copied
    through SQLite's backup instead: the same rows, a consistent snapshot.

    Raises:
        TraceError: One line, when it cannot.
    """
    if Path(f"{source}-wal").exists():
        _copied(source, target, lambda con: None, what="copy")
        return
    partial = target.with_name(f".{target.name}.copy-{os.getpid()}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, partial)
        for suffix in ("-wal", "-shm", "-journal"):
            Path(f"{target}{suffix}").unlink(missing_ok=True)
        os.replace(partial, target)
    except OSError as exc:
        raise TraceError(f"cannot copy {source} into {target}: {exc.strerror}") from None
    finally:
        with contextlib.suppress(OSError):
            partial.unlink()


def _copied(
    source: Path, target: Path, change: Callable[[sqlite3.Connection], None], *, what: str
) -> None:
    """Copy ``source`` (SQLite's backup: one snapshot), ``change`` the copy, put it at ``target``.

    The copy is made under a hidden name beside ``target`` and renamed into place once whole:
    a stop or a failure leaves ``target`` as it was.
    """
    partial = target.with_name(f".{target.name}.{what}-{os.getpid()}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        reader = read_connection(source)
        try:
            copy = sqlite3.connect(partial, isolation_level=None)
            try:
                reader.backup(copy)
                change(copy)
            finally:
                copy.close()
        finally:
            reader.close()
        for suffix in ("-wal", "-shm", "-journal"):
            Path(f"{target}{suffix}").unlink(missing_ok=True)
        os.replace(partial, target)
    except (sqlite3.Error, OSError) as exc:
        raise TraceError(f"cannot {what} {source} into {target}: {exc}") from None
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(OSError):
                Path(f"{partial}{suffix}").unlink()


def _make_child(
    con: sqlite3.Connection,
    record: tuple[RunMetadata, list[tuple[int, str, str, str | None]], str | None, int],
    state: ForkState | None,
    meta_rows: dict[str, str | None],
) -> None:
    """Turn the copy of the parent into the child's file, in one transaction.

    ``record`` is the child's run record: its metadata, agents, creation time and first step.
    """
    meta, agents, created, at_step = record
    con.execute("BEGIN IMMEDIATE")
    _truncate(con, at_step - 1)
    con.execute("DELETE FROM checkpoints")
    tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "interruptions" in tables:
        con.execute("DELETE FROM interruptions")
    con.execute("DELETE FROM runs")
    con.execute("DELETE FROM agents")
    # aam's columns hold the run's id as a constant: dropped (the view that reads them first)
    # and added again by the run record, in the order a new file has them.
    con.execute("DROP VIEW IF EXISTS trace")
    have = {row[1] for row in con.execute("PRAGMA table_xinfo(messages)")}
    for column in reversed(AAM_MESSAGE_COLUMNS):
        if column.name in have:
            con.execute(f"ALTER TABLE messages DROP COLUMN {column.name}")
    write_run_record(con, meta, agents, created=created, steps_done=at_step)
    if state is not None:
        con.execute("INSERT INTO checkpoints VALUES (?, ?, ?, ?)", tuple(state))
    for key, value in meta_rows.items():
        if value is None:
            con.execute("DELETE FROM meta WHERE key = ?", (key,))
        else:
            con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))
    con.execute("COMMIT")


def _reference(parent: Path, child: Path) -> str:
    """``parent`` as the child records it: relative to the child's folder when it can be."""
    try:
        return os.path.relpath(parent.resolve(), child.resolve().parent)
    except ValueError:  # another drive
        return str(parent.resolve())


class Lineage(NamedTuple):
    """One run of a lineage: its id, its trace (None: not found) and the step it forked at."""

    run_id: str
    path: Path | None
    fork_step: int | None


def lineage(path: str | os.PathLike[str]) -> list[Lineage]:
    """The run at ``path``, then its parent, its parent's parent, ... (oldest last).

    A run that is no fork ends the list; so does a parent whose trace is no longer where the
    fork recorded it (named by its run id, ``path`` None), and a cycle (a file replaced by one
    of its own forks), which is never followed twice.
    """
    from vivarium.trace.db import read_meta

    found: list[Lineage] = []
    seen: set[Path] = set()
    current: Path | None = Path(path)
    while current is not None and current.resolve() not in seen:
        seen.add(current.resolve())
        run_id, fork = _run_and_fork(current)
        reference = read_meta(current, FORK_PARENT_META_KEY) if fork is not None else None
        found.append(Lineage(run_id, current, None if fork is None else fork[1]))
        if fork is None:
            break
        parent = Path(reference) if reference is not None else None
        if parent is not None and not parent.is_absolute():
            parent = current.resolve().parent / parent
        if parent is None or not parent.is_file() or _run_and_fork(parent)[0] != fork[0]:
            found.append(Lineage(fork[0], None, None))
            break
        current = parent
    return found


def _run_and_fork(path: Path) -> tuple[str, tuple[str, int] | None]:
    """The run id a trace records, and its ``fork_of`` (parent run id, step) if it is a fork."""
    import json

    con = read_connection(path)
    try:
        run_id, config = con.execute("SELECT run_id, config_json FROM runs").fetchone()
    except (sqlite3.Error, TypeError):
        raise TraceError(f"{path}: no run recorded") from None
    finally:
        con.close()
    fork = json.loads(config).get("fork_of")
    if not isinstance(fork, dict):
        return str(run_id), None
    return str(run_id), (str(fork["run_id"]), int(fork["step"]))
