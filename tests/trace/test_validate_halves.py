"""A large finished trace is validated in two halves at once, with the same verdict.

``validate_trace`` reads the later half of a finished trace's steps on a second connection,
on a thread of its own, while this one reads the earlier half (SQLite releases the GIL while
it reads). The properties: the report is the one reading every step on one connection gives,
for an intact trace and for a change in either half; the halves are read only when both
connections read one snapshot (else every step is read on the first, as before); a trace a
run is writing is read on one connection, one snapshot.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from vivarium import Experiment
from vivarium.trace import validate
from vivarium.trace.schema import SEQ_BITS
from vivarium.trace.validate import validate_trace


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("halves") / "t.sqlite"
    Experiment(name="h", world="channel", policy="random", agents=7, steps=12, seed=3).run(
        path, progress=False
    )
    return path


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[int]]]:
    """Record each ``_step_arrays`` call: the thread it ran on and the steps it read."""
    calls: list[tuple[str, list[int]]] = []
    read = validate._step_arrays

    def recorded(con: sqlite3.Connection, steps: list[int]) -> Any:
        calls.append((threading.current_thread().name, list(steps)))
        return read(con, steps)

    monkeypatch.setattr(validate, "_step_arrays", recorded)
    return calls


def _report(path: Path, monkeypatch: pytest.MonkeyPatch, *, split: bool) -> tuple[str, ...]:
    with monkeypatch.context() as m:
        m.setattr(validate, "SPLIT_FROM", 0 if split else 10**12)
        report = validate_trace(path)
    return (report.status, report.actions, report.steps_found, *report.problems)


def test_an_intact_trace_is_read_in_two_halves_with_the_same_report(
    trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _reads(monkeypatch)
    split = _report(trace, monkeypatch, split=True)
    assert [steps for _, steps in calls] == [list(range(6)), list(range(6, 12))] or [
        steps for _, steps in calls
    ] == [list(range(6, 12)), list(range(6))]
    later = next(name for name, steps in calls if steps[0] == 6)
    assert later.startswith("vivarium-validate")  # the later half on a thread of its own
    calls.clear()
    whole = _report(trace, monkeypatch, split=False)
    assert [steps for _, steps in calls] == [list(range(12))]
    assert split == whole == ("ok", 84, 12)


@pytest.mark.parametrize("step", [0, 5, 6, 11])  # each end of each half
@pytest.mark.parametrize("column", ["action", "success", "agent_idx"])
def test_a_change_in_either_half_is_found_at_its_step(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: int, column: str
) -> None:
    path = tmp_path / "edited.sqlite"
    path.write_bytes(trace.read_bytes())
    con = sqlite3.connect(path)
    with con:
        con.execute(f"UPDATE decisions SET {column} = 9 WHERE id = ?", ((step << SEQ_BITS) | 2,))  # noqa: S608
    con.close()
    split = _report(path, monkeypatch, split=True)
    whole = _report(path, monkeypatch, split=False)
    assert split == whole
    assert split[0] == "corrupt"
    assert f"step {step}: state hash does not match its rows (chain broken here)" in split


def test_halves_of_different_snapshots_are_not_joined(
    trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that began writing between the two connections: every step read on the first."""
    marks = iter(["first", "second"])
    monkeypatch.setattr(validate, "_snapshot_mark", lambda con: next(marks))
    calls = _reads(monkeypatch)
    assert _report(trace, monkeypatch, split=True) == ("ok", 84, 12)
    main = threading.current_thread().name
    assert (main, list(range(12))) in calls  # read again, whole, on the first connection


def test_a_trace_being_written_is_read_on_one_connection(
    trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(validate, "writer_alive", lambda path: True)
    calls = _reads(monkeypatch)
    _report(trace, monkeypatch, split=True)
    assert calls == [(threading.current_thread().name, list(range(12)))]
