"""Misuse of a trace while its run writes it, from a second notebook, a shell or by hand.

Each case ends in the right result or one clear line, and the trace ends as one file that holds
the whole run (``vivarium.trace.onefile``). The second notebook is a real second process
(``tests.support.trace_reader``); the run waits at step 2 until it has read the trace.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, run_cli
from tests.support.trace_reader import Reader
from vivarium import Experiment, Run
from vivarium.errors import TraceError

CONFIG: dict[str, Any] = {"name": "study", "agents": 40, "steps": 12, "seed": 5}
READY_AT = 2


def waiting_for(reader: Reader | subprocess.Popen[str]) -> Any:
    """An ``on_step`` that waits at ``READY_AT`` until ``reader`` has read the trace."""

    def on_step(step: int, _record: object) -> None:
        if step == READY_AT:
            if isinstance(reader, Reader):
                reader.ready()
            else:
                assert reader.stdout.readline().strip() == "1"  # type: ignore[union-attr]

    return on_step


def steps_in(db: Path) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(con.execute("SELECT count(*) FROM steps").fetchone()[0])
    finally:
        con.close()


def alone(db: Path) -> list[str]:
    return sorted(p.name for p in db.parent.iterdir())


def test_polling_run_open_from_a_second_notebook(tmp_path: Path) -> None:
    # Before: the poller's reads sometimes disagreed (actions of 5 steps, steps frame of 7),
    # validate said "incomplete" of a live run, and the trace kept a -wal beside it.
    db = tmp_path / "study.sqlite"
    poller = Reader("poll", db)
    try:
        Experiment(**{**CONFIG, "agents": 150, "steps": 30}).run(
            db, progress=False, on_step=waiting_for(poller)
        )
        seen = json.loads(poller.stop().splitlines()[-1])
    finally:
        poller.kill()
    assert seen["errors"] == [] and seen["disagreements"] == []
    assert set(seen["statuses"]) <= {"running", "ok"}
    assert alone(db) == ["study.sqlite"]


def test_copying_the_sqlite_right_after_run_returns_while_a_notebook_holds_it(
    tmp_path: Path,
) -> None:
    # Before: the copy held no run at all (every step was still in the -wal).
    db = tmp_path / "study.sqlite"
    holder = Reader("hold", db)
    try:
        run = Experiment(**CONFIG).run(db, progress=False, on_step=waiting_for(holder))
        shutil.copyfile(db, tmp_path / "copy.sqlite")
    finally:
        holder.kill()
    assert steps_in(tmp_path / "copy.sqlite") == CONFIG["steps"] == run.metadata["steps_done"]
    assert Run.open(tmp_path / "copy.sqlite").validate().ok


def test_the_sqlite3_shell_left_open_on_the_trace(tmp_path: Path) -> None:
    # As the README shows it: `sqlite3 -readonly runs/x.sqlite`, a query, the shell left open.
    shell = shutil.which("sqlite3")
    if shell is None:
        pytest.skip("no sqlite3 shell")
    db = tmp_path / "study.sqlite"
    shells: list[subprocess.Popen[str]] = []

    def ask(proc: subprocess.Popen[str], sql: str) -> str:
        proc.stdin.write(sql + "\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        return proc.stdout.readline().strip()  # type: ignore[union-attr]

    def on_step(step: int, _record: object) -> None:
        if step == READY_AT:
            shells.append(
                subprocess.Popen(
                    [shell, "-readonly", str(db)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
            assert ask(shells[0], "SELECT count(*) > 0 FROM steps;") == "1"

    try:
        Experiment(**CONFIG).run(db, progress=False, on_step=on_step)
        assert alone(db) == ["study.sqlite"]
        assert steps_in(db) == CONFIG["steps"]
        assert ask(shells[0], "SELECT count(*) FROM steps;") == str(CONFIG["steps"])
    finally:
        for proc in shells:
            proc.kill()
            proc.communicate()


def test_duckdb_attached_in_another_notebook_during_the_run(tmp_path: Path) -> None:
    pytest.importorskip("duckdb")
    db = tmp_path / "study.sqlite"
    attached = Reader("duckdb", db)
    try:
        Experiment(**CONFIG).run(db, progress=False, on_step=waiting_for(attached))
        assert alone(db) == ["study.sqlite"] and steps_in(db) == CONFIG["steps"]
    finally:
        attached.kill()
    from vivarium.trace.duck import duckdb_connection

    con = duckdb_connection(db)
    assert con.sql("SELECT count(*) FROM run.steps").fetchall() == [(CONFIG["steps"],)]


def test_vvm_validate_while_the_run_is_running(tmp_path: Path) -> None:
    # Before: "INCOMPLETE ... resume it with `vvm resume`" of a run still going, or CORRUPT
    # (exit 1) when a step was committed between two of its queries.
    db = tmp_path / "study.sqlite"
    outs: list[Any] = []

    def on_step(step: int, _record: object) -> None:
        if step == 4:
            outs.append(run_cli("validate", str(db)))

    Experiment(**CONFIG).run(db, progress=False, on_step=on_step)
    out = outs[0]
    assert out.returncode == 3, out.stderr
    assert out.stdout.startswith("RUNNING: ") and "being written by a running process" in out.stdout
    done = run_cli("validate", str(db))
    assert done.returncode == 0 and done.stdout.startswith("OK: ")


KILL = """
import os, signal, sqlite3, sys, time
from vivarium import Experiment

def on_step(step, _record):
    if step == 6:  # once six steps are committed, as a reader sees them
        while True:
            con = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
            if con.execute("SELECT count(*) FROM steps").fetchone()[0] >= 6:
                os.kill(os.getpid(), signal.SIGKILL)
            con.close()
            time.sleep(0.01)

Experiment(name="study", agents=40, steps=12, seed=5).run(
    sys.argv[1], progress=False, on_step=on_step
)
"""


def test_run_open_on_a_trace_whose_writer_was_sigkilled(tmp_path: Path) -> None:
    # The notebook running it was killed (kernel restart, OOM). Before: the -wal stayed beside
    # the trace for good, and validate said the run's status was running.
    db = tmp_path / "study.sqlite"
    child = subprocess.run(
        [sys.executable, "-c", KILL, str(db)], cwd=ROOT, capture_output=True, timeout=120
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert alone(db) == ["study.sqlite", "study.sqlite-shm", "study.sqlite-wal"]
    run = Run.open(db)
    assert alone(db) == ["study.sqlite"]  # folded back by the open
    assert run.metadata["status"] == "running" and run.metadata["steps_done"] >= 6
    assert steps_in(db) == run.metadata["steps_done"] == len(run.steps)
    out = run_cli("validate", str(db))
    assert out.returncode == 3 and out.stdout.startswith("INCOMPLETE: ")
    assert "no process is writing it" in out.stdout


def test_a_trace_in_a_folder_named_with_a_hash(tmp_path: Path) -> None:
    # Before: the run finished, then reading it failed ("no such table: runs"): the reader's
    # URI stopped at the '#'.
    db = tmp_path / "run #1" / "what?.sqlite"
    run = Experiment(**{**CONFIG, "steps": 3}).run(db, progress=False)
    assert len(run.actions) == 40 * 3 and Run.open(db).validate().ok
    assert len(run.arguments) == 40 * 3


@pytest.mark.usefixtures("ctrl_c")
def test_a_sqlite3_connection_in_the_same_notebook_left_open_across_a_resume(
    tmp_path: Path,
) -> None:
    db = tmp_path / "study.sqlite"

    def stop(step: int, _record: object) -> None:
        if step == 3:
            signal.raise_signal(signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        Experiment(**CONFIG, checkpoint_every=2).run(db, progress=False, on_step=stop)
    con = sqlite3.connect(db)  # the notebook's own look at it, never closed
    assert con.execute("SELECT status FROM runs").fetchone() == ("interrupted",)
    run = Run.open(db).resume(progress=False)
    assert run.metadata["status"] == "complete" and alone(db) == ["study.sqlite"]
    assert con.execute("SELECT count(*) FROM steps").fetchone() == (CONFIG["steps"],)
    con.close()


def test_a_connection_from_the_last_run_closed_while_the_next_run_writes(tmp_path: Path) -> None:
    # A read-write sqlite3 connection on the previous run's file, closed (or garbage
    # collected) in the middle of the next run at the same path: SQLite sees that its file
    # was replaced and leaves the new run's files alone; the new trace is whole.
    db = tmp_path / "study.sqlite"
    stale = Reader("hold", db)
    try:
        Experiment(**CONFIG).run(db, progress=False, on_step=waiting_for(stale))

        def on_step(step: int, _record: object) -> None:
            if step == READY_AT:
                stale.stop()

        run = Experiment(**{**CONFIG, "seed": 6}).run(
            db, progress=False, overwrite=True, on_step=on_step
        )
    finally:
        stale.kill()
    assert alone(db) == ["study.sqlite"] and steps_in(db) == CONFIG["steps"]
    assert run.metadata["seed"] == "6" and Run.open(db).validate().ok


def test_opening_a_run_the_moment_it_starts(tmp_path: Path) -> None:
    # The file exists (empty) for a moment before the run fills it.
    from vivarium.trace.db import _acquire_writer_lock, _release_writer_lock

    db = tmp_path / "study.sqlite"
    fd = _acquire_writer_lock(db)
    try:
        with pytest.raises(TraceError, match=r"being created by a run that is starting") as info:
            Run.open(db)
        assert "\n" not in str(info.value)
    finally:
        _release_writer_lock(fd)
        os.unlink(db)
