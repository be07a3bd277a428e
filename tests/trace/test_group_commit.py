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


def test_a_column_first_filled_in_a_replayed_group_is_read(tmp_path: Path) -> None:
    """The meta that lists the decision columns some row fills survives a group's rollback.

    Step 1 is the first to fill ``success``/``error``/``reasoning``; it is queued with step 2,
    which cannot be written, so the group is rolled back and replayed one by one. Step 1 is
    committed then, and its columns must be listed (else the frame reads its refusal as a
    success), also after a resume.
    """
    from vivarium.trace.frames import read_arrow

    def refused(step: int) -> StepRecord:
        record = StepRecord(step=step, world_digest=f"d{step}", state_hash=f"h{step}")
        record.add_action(0, "noop", None, "because", None, False, None, "refused")
        return record

    path = tmp_path / "replayed.sqlite"
    trace = TraceDb(path)
    trace._submit(lambda con: con.execute("INSERT INTO agents VALUES (0, 'agent_0', 'p', NULL)"))
    trace.write_step(_record(0))
    trace.flush()  # committed alone: only the always-written columns are filled so far
    gate, started = threading.Event(), threading.Event()
    trace._submit(lambda con: (started.set(), gate.wait(10)))
    started.wait(10)
    trace.write_step(refused(1))
    trace.write_step(_record(2, broken=True))
    gate.set()
    with pytest.raises(TraceError, match="step 2"):
        trace.close()
    actions = read_arrow(path, "actions").to_pydict()
    assert actions["success"] == [True, False]
    assert actions["error"] == [None, "refused"]
    assert actions["reasoning"] == [None, "because"]
    resumed = TraceDb.for_resume(path, from_step=2)
    resumed.write_step(_record(2))
    resumed.close()
    actions = read_arrow(path, "actions").to_pydict()
    assert actions["success"] == [True, False, True]
    assert actions["reasoning"] == [None, "because", None]
