"""A second process reading a trace while a run writes it, as a user's other notebook would.

``python -m tests.support.trace_reader MODE PATH`` (from the project root) waits until the trace
at PATH holds a committed step, then reads it the way MODE says, prints ``ready`` and keeps
reading or holding until a line (or the end of its input) arrives on stdin:

- ``hold``: a plain ``sqlite3.connect(path)`` (read-write, as the sqlite3 module opens it), one
  query, then the connection left open and idle;
- ``snapshot``: a read-only connection inside a read transaction (``BEGIN``), left open: a
  reader in the middle of a long read, whose snapshot the writer cannot checkpoint past;
- ``cursor``: a query over every decision with one row fetched, the rest never read;
- ``duckdb``: the trace attached with ``vivarium.trace.duck.duckdb_connection``, one query,
  left attached;
- ``poll``: ``Run.open`` in a loop (frames, ``validate``), as a notebook polling progress.
  When told to stop it prints one JSON line: the reads made, every error raised (type and
  message), every frame set that disagreed on its steps, and the validation statuses seen.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


class Reader:
    """A second process reading the trace as ``mode`` says (this module, run by ``python -m``)."""

    def __init__(self, mode: str, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.trace_reader", mode, str(path)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "VIVARIUM_PROGRESS": "0"},
        )

    def ready(self) -> None:
        """Wait until it has read the trace (and holds it, as its mode says)."""
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        assert line.strip() == "ready", (line, self.proc.stderr.read())  # type: ignore[union-attr]

    def stop(self) -> str:
        """Tell it to stop; what it printed after ``ready``."""
        out, err = self.proc.communicate("stop\n", timeout=60)
        assert self.proc.returncode == 0, err
        return out

    def kill(self) -> None:
        """End it if it still runs (a test that failed midway)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def wait_for_a_step(path: Path) -> None:
    """Until the trace holds a committed step (read with short read-only connections)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
            try:
                if con.execute("SELECT count(*) FROM steps").fetchone()[0] > 0:
                    return
            finally:
                con.close()
        except sqlite3.Error:
            pass
        time.sleep(0.01)
    raise SystemExit("no step was committed")


def hold(mode: str, path: Path) -> Any:
    """Open the trace as ``mode`` says and return what keeps it open."""
    if mode == "hold":
        con = sqlite3.connect(path)
        con.execute("SELECT count(*) FROM steps").fetchone()
        return con
    if mode == "snapshot":
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        con.execute("BEGIN")
        con.execute("SELECT count(*) FROM decisions").fetchone()
        return con
    if mode == "cursor":
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        cur = con.execute("SELECT * FROM decisions")
        cur.fetchone()
        return con, cur
    if mode == "duckdb":
        from vivarium.trace.duck import duckdb_connection

        con = duckdb_connection(path)
        con.sql("SELECT count(*) FROM run.steps").fetchall()
        return con
    raise SystemExit(f"unknown mode {mode}")


def poll(path: Path, stop: threading.Event, first: threading.Event) -> dict[str, Any]:
    """Read the trace as a polling notebook does until ``stop``; what went wrong, if anything."""
    from vivarium import Run

    reads, errors, disagreements, statuses = 0, [], [], set()
    while not stop.is_set():
        try:
            run = Run.open(path)
            done = run.metadata["steps_done"]
            steps = sorted(set(run.steps["step"]))
            acted = sorted(set(run.actions["step"]))
            said = sorted(set(run.messages["step"]))
            if not (steps == acted == list(range(done)) and set(said) <= set(steps)):
                disagreements.append([done, len(steps), len(acted), len(said)])
            statuses.add(run.validate().status)
            reads += 1
        except Exception as exc:  # every error is the finding
            errors.append(f"{type(exc).__name__}: {exc}")
        first.set()
    return {
        "reads": reads,
        "errors": errors,
        "disagreements": disagreements,
        "statuses": sorted(statuses),
    }


def main(mode: str, path: Path) -> None:
    wait_for_a_step(path)
    if mode == "poll":
        stop, first = threading.Event(), threading.Event()
        out: dict[str, Any] = {}
        worker = threading.Thread(target=lambda: out.update(poll(path, stop, first)))
        worker.start()
        first.wait(60)
        print("ready", flush=True)
        sys.stdin.readline()
        stop.set()
        worker.join()
        print(json.dumps(out), flush=True)
        return
    kept = hold(mode, path)
    print("ready", flush=True)
    sys.stdin.readline()
    del kept


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
