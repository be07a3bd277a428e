"""A trace is one file again once its readers close, whatever a stale reader made beside it.

The race (seen in CI): a reader opens the trace just before the closing writer puts a folded
copy in its place, then reads the old file, still in WAL mode. SQLite makes a new, empty
``-wal`` and a ``-shm`` beside the new file by name, and a read-only reader closing last never
removes them. Property: after any Vivarium reader closes, side files that hold no step are gone
from beside a trace no process writes; a trace a run is writing keeps its WAL.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.misuse.test_live_traces import steps_in
from vivarium import Experiment, Run
from vivarium.trace.onefile import leave_one_file, read_connection, side_file

CONFIG: dict[str, Any] = {"name": "study", "agents": 20, "steps": 6, "seed": 3}


def folder(db: Path) -> list[str]:
    return sorted(p.name for p in db.parent.iterdir())


def replace_under(db: Path, open_reader: Callable[[Path], Any]) -> Any:
    """Reproduce the race: ``open_reader`` opens ``db`` while it is in WAL mode, then the
    one-file trace takes its place (as the closing writer's folded copy does), and the reader
    reads the old file. Returns the reader, still open."""
    done = db.with_name("done.sqlite")
    shutil.move(db, done)
    shutil.copyfile(done, db)
    old = sqlite3.connect(db)
    assert old.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    reader = open_reader(db)
    old.close()
    os.replace(done, db)
    con = reader[0] if isinstance(reader, tuple) else reader
    assert con.execute("SELECT count(*) FROM steps").fetchone()[0] == CONFIG["steps"]
    return reader


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    db = tmp_path / "study.sqlite"
    Experiment(**CONFIG).run(db, progress=False)
    assert folder(db) == ["study.sqlite"]
    return db


def test_the_race_leaves_side_files_without_the_mechanism(trace: Path) -> None:
    # The reproduction is real: a plain read-only sqlite3 reader leaves both side files behind.
    reader = replace_under(trace, lambda p: sqlite3.connect(f"file:{p}?mode=ro", uri=True))
    reader.close()
    assert folder(trace) == ["study.sqlite", "study.sqlite-shm", "study.sqlite-wal"]
    assert side_file(trace, "-wal").stat().st_size == 0


def test_a_vivarium_reader_that_read_the_replaced_file_leaves_one_file(trace: Path) -> None:
    before = trace.read_bytes()
    reader = replace_under(trace, read_connection)
    assert "study.sqlite-wal" in folder(trace)  # made by the stale read
    reader.close()
    assert folder(trace) == ["study.sqlite"]
    assert trace.read_bytes() == before


READERS: dict[str, Callable[[Path], object]] = {
    "Run.open": lambda p: Run.open(p).metadata,
    "frames": lambda p: (Run.open(p).actions, Run.open(p).steps),
    "validate": lambda p: Run.open(p).validate().ok,
    "read_connection": lambda p: read_connection(p).close(),
}


@pytest.mark.parametrize("read", READERS.values(), ids=READERS.keys())
def test_any_reader_after_a_stale_one_leaves_one_file(
    trace: Path, read: Callable[[Path], object]
) -> None:
    # The stale reader is someone else's (a sqlite3 shell, another library): it leaves the side
    # files; the next Vivarium read removes them and reads the whole run.
    stale = replace_under(trace, lambda p: sqlite3.connect(f"file:{p}?mode=ro", uri=True))
    stale.close()
    read(trace)
    assert folder(trace) == ["study.sqlite"]
    assert steps_in(trace) == CONFIG["steps"]
    assert Run.open(trace).validate().ok


def test_side_files_a_reader_still_holds_open_do_not_stop_the_next(trace: Path) -> None:
    # A stale reader still open: its side files go anyway (they hold no step), and it reads on.
    stale = replace_under(trace, lambda p: sqlite3.connect(f"file:{p}?mode=ro", uri=True))
    leave_one_file(trace)
    assert folder(trace) == ["study.sqlite"]
    assert stale.execute("SELECT count(*) FROM decisions").fetchone()[0] == 20 * 6
    stale.close()


def test_a_run_being_written_keeps_its_wal(tmp_path: Path) -> None:
    db = tmp_path / "live.sqlite"
    seen: list[list[str]] = []

    def on_step(step: int, _record: object) -> None:
        if step == 3:
            leave_one_file(db)  # the run holds the writer's lock, the file is in WAL mode
            acted = Run.open(db).actions  # a reader closing while the run writes
            assert set(acted["step"]) <= set(range(step + 1))
            seen.append(folder(db))

    run = Experiment(**{**CONFIG, "name": "live"}).run(db, progress=False, on_step=on_step)
    assert seen == [["live.sqlite", "live.sqlite-shm", "live.sqlite-wal"]]
    assert folder(db) == ["live.sqlite"]
    assert run.metadata["steps_done"] == CONFIG["steps"] == steps_in(db)
    assert run.validate().ok


def test_a_wal_with_frames_is_never_removed(tmp_path: Path) -> None:
    # A writer's connection open in another process's place: WAL mode, frames in the WAL, no
    # Vivarium writer's lock. leave_one_file leaves it (the file is not in rollback mode).
    db = tmp_path / "t.sqlite"
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE t(x)")
    con.execute("INSERT INTO t VALUES (1)")
    con.commit()
    wal = side_file(db, "-wal").stat().st_size
    assert wal > 0
    leave_one_file(db)
    assert side_file(db, "-wal").stat().st_size == wal
    con.close()


def test_every_reader_of_a_trace_opens_it_through_read_connection() -> None:
    # The mechanism holds only if no reader of a trace bypasses it: in vivarium/trace, SQLite
    # is opened directly only by the writer (db.py: its file and an in-memory template), by a
    # fork's file made under a hidden name before anyone can read it (fork_file.py), and by
    # onefile.py itself; the frames' ADBC reads tidy in their own ``finally``.
    import re

    import vivarium.trace as trace_package

    folder = Path(trace_package.__file__).parent
    direct = {
        path.name: len(re.findall(r"sqlite3\.connect\(", path.read_text(encoding="utf-8")))
        for path in sorted(folder.glob("*.py"))
    }
    assert {name: n for name, n in direct.items() if n} == {
        "db.py": 2,
        "fork_file.py": 1,
        "onefile.py": 3,
    }
