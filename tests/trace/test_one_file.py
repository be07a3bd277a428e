"""One self-contained file (issue 24, part 4): however a trace was read while it was written.

The property: every run that ends (complete, Ctrl-C, SIGTERM, an LLM outage, an exception in
the world) leaves ``<name>.sqlite`` alone in its folder (no ``-wal``, no ``-shm``), and that file
alone, copied elsewhere, holds the whole run, with the very bytes a run nobody read gives:
whatever a second process did meanwhile (a sqlite3 connection left open, a read transaction
held, a cursor half read, DuckDB attached, ``Run.open`` polled in a loop). Readers never fail
and frames read together agree on their steps. A killed writer's WAL is folded back by the next
open. Before the fix a reader still open at the end kept the ``-wal``, and the ``.sqlite``
alone held no run at all.

Readers are real second processes (``tests.support.trace_reader``); the run waits at a step
until its reader is ready, so each case happens every time.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from tests.support.signals import ctrl_c_raises
from tests.support.trace_reader import Reader
from vivarium import Experiment, Run
from vivarium.cli import main
from vivarium.errors import RunInterrupted, TraceError
from vivarium.gateways.base import LLMUnavailable
from vivarium.trace.validate import validate_trace
from vivarium.types import ActionRequest
from vivarium.worlds.channel import InMemoryChannel

STEPS = 10
STOP_AT = 6  # the step at which the endings other than "complete" stop the run
READY_AT = 2  # the step at which the run waits for its reader

# How the run ends, set by each case (read by the policy and the world below).
ENDING: dict[str, str] = {"kind": "complete"}

# The run's status and the steps it commits, for each ending (computed from the rules the
# README states: a stop inside step k commits steps 0..k-1).
EXPECTED = {
    "complete": ("complete", STEPS),
    "sigint": ("interrupted", STOP_AT),
    "sigterm": ("interrupted", STOP_AT),
    "outage": ("interrupted", STOP_AT),
    "world": ("failed", STOP_AT),
}
RAISED: dict[str, type[BaseException] | None] = {
    "complete": None,
    "sigint": KeyboardInterrupt,
    "sigterm": KeyboardInterrupt,
    "outage": RunInterrupted,
    "world": RuntimeError,
}


class Post:
    """Posts every step; at ``STOP_AT`` ends the run as ``ENDING`` says."""

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """Post, or stop the run by a signal or an LLM outage."""
        kind = ENDING["kind"]
        if time_step == STOP_AT and kind == "sigint":
            signal.raise_signal(signal.SIGINT)
        if time_step == STOP_AT and kind == "sigterm":
            signal.raise_signal(signal.SIGTERM)
        if time_step == STOP_AT and kind == "outage":
            raise LLMUnavailable("connection refused: the LLM server is down", kind="connection")
        return ActionRequest(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name="post_message",
            arguments={"content": f"{agent_id} at {time_step}"},
        )


class Breaks(InMemoryChannel):
    """The channel world, whose ``observe`` raises at ``STOP_AT`` when the ending is "world"."""

    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        """The channel's observation, or an exception in the world."""
        if time_step == STOP_AT and ENDING["kind"] == "world":
            raise RuntimeError("the world broke")
        return super().observe(agent_id, time_step)


def experiment() -> Experiment:
    return Experiment(name="live", world=Breaks, policy=Post, agents=30, steps=STEPS, seed=3)


def run_read_by(mode: str | None, path: Path, ending: str) -> str:
    """Run the experiment to ``path`` ending as ``ending``, read meanwhile by ``mode``.

    The reader holds on until the run has returned. Returns what it printed when stopped.
    """
    ENDING["kind"] = ending
    reader = Reader(mode, path) if mode else None

    def on_step(step: int, _record: object) -> None:
        if step == READY_AT and reader is not None:
            reader.ready()

    raised = RAISED[ending]
    try:
        if raised is None:
            experiment().run(path, progress=False, on_step=on_step)
        else:
            with ctrl_c_raises(), pytest.raises(raised):
                experiment().run(path, progress=False, on_step=on_step)
        return reader.stop() if reader else ""
    finally:
        ENDING["kind"] = "complete"
        if reader is not None:
            reader.kill()


def table_rows(db: Path, table: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()  # noqa: S608
    finally:
        con.close()


COMPARED = ("runs", "agents", "steps", "decisions", "messages")


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The trace of each ending, with no reader at all."""
    folder = tmp_path_factory.mktemp("references")
    out = {}
    for ending in EXPECTED:
        out[ending] = folder / f"{ending}.sqlite"
        run_read_by(None, out[ending], ending)
    return out


def check_one_file(db: Path, ending: str, reference: Path, elsewhere: Path) -> None:
    """``db`` is alone in its folder; copied alone, it is the run ``reference`` is."""
    assert sorted(p.name for p in db.parent.iterdir()) == [db.name]
    elsewhere.mkdir()
    copy = elsewhere / "copy.sqlite"
    shutil.copyfile(db, copy)
    status, steps = EXPECTED[ending]
    assert table_rows(copy, "runs")[0][10:12] == (status, steps)
    assert len(table_rows(copy, "steps")) == steps
    assert validate_trace(copy).status == ("ok" if ending == "complete" else "incomplete")
    for table in COMPARED:
        assert table_rows(copy, table) == table_rows(reference, table), table
    if ending == "complete":
        assert db.read_bytes() == reference.read_bytes()  # the same file as nobody reading it


READERS = ["hold", "snapshot", "cursor", "duckdb", "poll"]


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(mode=st.sampled_from(READERS), ending=st.sampled_from(sorted(EXPECTED)))
def test_every_run_ends_as_one_file_whatever_its_readers_did(
    mode: str,
    ending: str,
    references: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    if mode == "duckdb":
        pytest.importorskip("duckdb")
    folder = tmp_path_factory.mktemp("case")
    db = folder / "runs" / "live.sqlite"
    out = run_read_by(mode, db, ending)
    check_one_file(db, ending, references[ending], folder / "elsewhere")
    if mode == "poll":
        seen = json.loads(out.splitlines()[-1])
        assert seen["reads"] > 0
        assert seen["errors"] == [] and seen["disagreements"] == []
        assert set(seen["statuses"]) <= {"running", "ok", "incomplete"}


@pytest.mark.parametrize("mode", ["hold", "snapshot", "duckdb"])
def test_a_reader_open_across_the_end_keeps_its_view_and_the_file_is_whole(
    mode: str, tmp_path: Path, references: dict[str, Path]
) -> None:
    # The reader's connection outlives the run: the file it opened stays complete for it,
    # and the trace's own path holds the whole run, as one file.
    if mode == "duckdb":
        pytest.importorskip("duckdb")
    db = tmp_path / "live.sqlite"
    ENDING["kind"] = "complete"
    reader = Reader(mode, db)
    try:
        experiment().run(db, progress=False, on_step=lambda s, _r: s == READY_AT and reader.ready())
        check_one_file(db, "complete", references["complete"], tmp_path / "copy")
        assert reader.proc.poll() is None  # still open, and reading did not fail
        reader.stop()
    finally:
        reader.kill()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy", "live.sqlite"]


def test_a_hammering_reader_never_fails_and_its_frames_agree(tmp_path: Path) -> None:
    # Run.open, frames and validate in a loop from a second process, from the first committed
    # step to after the end: no "database is locked", no frames that disagree on their
    # steps, never "corrupt" (it says "running" while the run writes, "ok" after).
    db = tmp_path / "live.sqlite"
    reader = Reader("poll", db)
    slow = Experiment(name="live", policy=Post, agents=200, steps=40, seed=3)
    try:
        slow.run(db, progress=False, on_step=lambda s, _r: s == READY_AT and reader.ready())
        time.sleep(0.3)  # it goes on reading the finished trace
        seen = json.loads(reader.stop().splitlines()[-1])
    finally:
        reader.kill()
    assert seen["errors"] == [] and seen["disagreements"] == []
    assert "running" in seen["statuses"] and set(seen["statuses"]) <= {"running", "ok"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["live.sqlite"]


def test_frames_read_at_different_times_agree_with_each_other(tmp_path: Path) -> None:
    # A run opened mid-run is the run as it was then: its frames, read during the run and
    # after it ended, hold exactly the steps its metadata counts (before: each frame held the
    # steps committed when it was read).
    db = tmp_path / "live.sqlite"
    opened: list[Run] = []

    def on_step(step: int, _record: object) -> None:
        if step == 4:
            while not opened or opened[-1].metadata["steps_done"] < 2:  # the writer lags behind
                opened.append(Run.open(db))
            opened[-1].actions  # noqa: B018 - read now; the others are read after the run

    experiment().run(db, progress=False, on_step=on_step)
    run = opened[-1]
    done = run.metadata["steps_done"]
    assert 2 <= done <= 5
    assert sorted(set(run.actions["step"])) == list(range(done))
    assert list(run.steps["step"]) == list(range(done))
    assert sorted(set(run.messages["step"])) == list(range(done))
    assert sorted(set(run.arguments["step"])) == list(range(done))
    assert len(run.actions) == 30 * done
    polars = run.to_polars()
    assert set(polars["messages"]["step"].to_list()) == set(range(done))  # type: ignore[index]
    assert Run.open(db).metadata["steps_done"] == STEPS  # opened again: every step


def test_validate_on_a_live_trace_says_running_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: "incomplete" (resume it!) or, when a step was committed between two of its
    # queries, "corrupt" (exit 1).
    db = tmp_path / "live.sqlite"
    seen: list[tuple[str, int, str]] = []

    def on_step(step: int, _record: object) -> None:
        if step == 4:
            report = validate_trace(db)
            capsys.readouterr()
            code = main(["validate", str(db)])
            seen.append((report.status, code, capsys.readouterr().out))

    experiment().run(db, progress=False, on_step=on_step)
    status, code, out = seen[0]
    assert (status, code) == ("running", 3)
    assert out.startswith("RUNNING: ") and "being written by a running process" in out
    assert validate_trace(db).status == "ok" and main(["validate", str(db)]) == 0


KILLED = {"name": "killed", "agents": 50, "steps": 30, "seed": 2}
KILL = """
import json, os, signal, sqlite3, sys, time
from vivarium import Experiment

db, kill_at, config = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])

def on_step(step, _record):
    if step == kill_at:  # once steps 0..kill_at-1 are committed, as a reader sees them
        while True:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            done = con.execute("SELECT count(*) FROM steps").fetchone()[0]
            con.close()
            if done >= kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(0.01)

Experiment(**config).run(db, progress=False, on_step=on_step)
"""


def spawn_killed(db: Path, kill_at: int) -> None:
    """Run ``KILLED`` in another process, SIGKILLed at ``kill_at`` with that many steps committed."""
    child = subprocess.run(
        [sys.executable, "-c", KILL, str(db), str(kill_at), json.dumps(KILLED)],
        cwd=ROOT,
        env={**os.environ, "VIVARIUM_PROGRESS": "0"},
        capture_output=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()


def test_a_killed_writers_wal_is_folded_back_by_the_next_open(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = tmp_path / "reference.sqlite"
    Experiment(**KILLED).run(reference, progress=False)
    db = tmp_path / "runs" / "killed.sqlite"
    db.parent.mkdir()
    spawn_killed(db, kill_at=12)
    assert (tmp_path / "runs" / "killed.sqlite-wal").exists()  # necessarily: the writer died
    run = Run.open(db)
    assert sorted(p.name for p in db.parent.iterdir()) == ["killed.sqlite"]  # one file again
    done = run.metadata["steps_done"]
    assert run.metadata["status"] == "running" and 12 <= done <= 13
    copy = tmp_path / "copy.sqlite"
    shutil.copyfile(db, copy)  # the file alone holds every committed step
    want = [r for r in table_rows(reference, "steps") if r[0] < done]
    assert table_rows(copy, "steps") == want
    assert main(["validate", str(db)]) == 3
    out = capsys.readouterr().out
    assert out.startswith("INCOMPLETE: ") and "no process is writing it" in out


def test_a_killed_writers_trace_held_open_is_read_whole_and_folded_once_free(
    tmp_path: Path,
) -> None:
    # A reader holding the file open keeps the fold from happening (it needs the file to
    # itself); reads still see every committed step, and the next open after it leaves folds.
    db = tmp_path / "killed.sqlite"
    spawn_killed(db, kill_at=12)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
            "c.execute('SELECT count(*) FROM steps').fetchone(); print('ready', flush=True); "
            "sys.stdin.readline()",
            str(db),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"  # type: ignore[union-attr]
        run = Run.open(db)
        done = run.metadata["steps_done"]
        assert len(run.steps) == done >= 12 and len(run.actions) == 50 * done
        holder.communicate("\n", timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert Run.open(db).metadata["steps_done"] == done
    assert sorted(p.name for p in tmp_path.iterdir()) == ["killed.sqlite"]


def test_frames_wait_for_a_writer_that_has_the_file_to_itself(tmp_path: Path) -> None:
    # A writer has the file to itself for a moment when a run starts, closes or a WAL is
    # folded back. The driver every frame is read through (ADBC, with its own SQLite) waited
    # for no lock: such a read failed at once with "database is locked".
    import adbc_driver_sqlite.dbapi  # noqa: F401 - imported before the lock is taken

    from vivarium.trace.frames import _fetch_arrow

    db = tmp_path / "t.sqlite"
    Experiment(name="t", agents=5, steps=4, seed=1).run(db, progress=False)
    locker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time; "
            "c = sqlite3.connect(sys.argv[1], isolation_level=None); c.execute('BEGIN EXCLUSIVE'); "
            "print('locked', flush=True); time.sleep(1.0); c.execute('ROLLBACK')",
            str(db),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert locker.stdout.readline().strip() == "locked"  # type: ignore[union-attr]
        started = time.monotonic()
        table = _fetch_arrow(db, "SELECT count(*) AS n FROM decisions")
        assert table.column("n").to_pylist() == [20]
        assert time.monotonic() - started > 0.2  # it waited for the lock
    finally:
        locker.communicate(timeout=30)


def test_a_run_starts_though_a_reader_holds_its_lock_for_a_moment(tmp_path: Path) -> None:
    # Readers take the writer's lock for a moment (to ask whether a run writes the file, to
    # fold a killed run's WAL): a run started then waits for it instead of refusing.
    db = tmp_path / "t.sqlite"
    Experiment(name="t", agents=2, steps=2, seed=1).run(db, progress=False)
    asker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time; fd = os.open(sys.argv[1], "
            "os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_SH); print('held', flush=True); "
            "time.sleep(0.4)",
            str(db),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert asker.stdout.readline().strip() == "held"  # type: ignore[union-attr]
        run = Experiment(name="t", agents=2, steps=2, seed=1).run(db, progress=False)
        assert run.metadata["status"] == "complete"
    finally:
        asker.communicate(timeout=30)


def test_a_trace_whose_run_is_starting_says_so(tmp_path: Path) -> None:
    # The writer's lock makes the file empty, the writer fills it just after: a reader in
    # between was told the file is "not a Vivarium trace".
    from vivarium.trace.db import _acquire_writer_lock, _release_writer_lock

    db = tmp_path / "starting.sqlite"
    fd = _acquire_writer_lock(db)
    try:
        with pytest.raises(TraceError, match="being created by a run that is starting"):
            Run.open(db)
    finally:
        _release_writer_lock(fd)
    with pytest.raises(TraceError, match="not a Vivarium trace"):
        Run.open(db)


def test_a_wal_removed_by_name_while_the_run_writes_is_still_folded_in(
    tmp_path: Path, references: dict[str, Path]
) -> None:
    # The WAL's name removed while the run writes (a cleanup script's ``rm *-wal``): the writer
    # still has the file open. At the end, held open by a reader, the copy put in the trace's
    # place is made from the WAL the writer has open (before: its steps were lost).
    db = tmp_path / "live.sqlite"
    ENDING["kind"] = "complete"
    holder = Reader("snapshot", db)
    try:

        def on_step(step: int, _record: object) -> None:
            if step == READY_AT:
                holder.ready()
                Path(f"{db}-wal").unlink()

        experiment().run(db, progress=False, on_step=on_step)
        check_one_file(db, "complete", references["complete"], tmp_path / "copy")
        holder.stop()
    finally:
        holder.kill()
