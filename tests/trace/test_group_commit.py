"""Steps queued behind a slow commit are committed together, and nothing is lost or blurred.

The trace writer commits each step in its own transaction; when the engine gets ahead (many
small steps), the steps waiting in its queue are committed as one transaction. Whether they
are grouped or not, the file must hold the same rows, and a step that cannot be written must
be named, with every step before it kept and none after it written.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from vivarium.errors import TraceError
from vivarium.trace.db import TraceDb
from vivarium.trace.records import StepRecord


def _record(step: int, broken: bool = False) -> StepRecord:
    record = StepRecord(step=step, world_digest=f"d{step}", state_hash=f"h{step}")
    record.add_action(0, "noop", None, None, None, True, None, None)
    if broken:  # a message row with a missing field: its insert fails
        record.messages = [(0, "agent_0")]  # type: ignore[list-item]
    return record


def _held_writes(
    path: Path, steps: int, broken: int | None = None, groups: list[int] | None = None
) -> TraceDb:
    """Queue ``steps`` steps while the writer is busy, so that they wait to be grouped.

    ``groups`` receives the size of every group the writer commits together.
    """
    trace = TraceDb(path)
    writer = trace._writer
    run_group = writer._run_group

    def spy(con: sqlite3.Connection, group: list) -> bool:
        if groups is not None:
            groups.append(len(group))
        return run_group(con, group)

    writer._run_group = spy  # type: ignore[method-assign]
    gate, started = threading.Event(), threading.Event()

    def hold(con: sqlite3.Connection) -> None:
        started.set()
        gate.wait(10)

    trace._submit(hold)
    started.wait(10)
    for t in range(steps):
        trace.write_step(_record(t, broken=t == broken))
    assert trace._writer.jobs.qsize() == steps  # all queued behind the held job
    gate.set()
    return trace


def _steps(path: Path) -> list[tuple[int, str]]:
    with sqlite3.connect(path) as con:
        return con.execute("SELECT step, state_hash FROM steps ORDER BY step").fetchall()


def test_queued_steps_are_all_committed(tmp_path: Path) -> None:
    grouped, groups = tmp_path / "grouped.sqlite", []
    _held_writes(grouped, 12, groups=groups).close()
    assert groups and max(groups) > 1  # the queued steps were committed together
    assert _steps(grouped) == [(t, f"h{t}") for t in range(12)]
    # The same steps written one at a time (the writer never behind) give the same rows.
    alone = tmp_path / "alone.sqlite"
    trace = TraceDb(alone)
    for t in range(12):
        trace.write_step(_record(t))
        trace.flush()
    trace.close()
    with sqlite3.connect(grouped) as a, sqlite3.connect(alone) as b:
        query = "SELECT * FROM steps ORDER BY step"
        assert a.execute(query).fetchall() == b.execute(query).fetchall()


def test_a_failing_step_in_a_group_keeps_the_steps_before_it(tmp_path: Path) -> None:
    path = tmp_path / "broken.sqlite"
    trace = _held_writes(path, 10, broken=6)
    with pytest.raises(TraceError) as err:
        trace.close()
    assert "step 6" in str(err.value)
    assert [step for step, _ in _steps(path)] == [0, 1, 2, 3, 4, 5]
