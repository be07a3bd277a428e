"""SQL on a trace from other clients: the ``sqlite3`` shell, Python's ``sqlite3`` and DuckDB.

    python benchmarks/trace_sql.py [--sizes 1000x1000 10000x100] [--repeat 3] [--no-write]

A trace is made per size (random agents, every decision a row of ``decisions``), then three
queries researchers ask first are timed from each client, next to ``Run.open(path).actions``
(the frame the library reads):

- ``by action``: ``SELECT action, count(*) FROM actions GROUP BY action``
- ``one agent``: ``SELECT step, action FROM actions WHERE agent_id = 'agent_007'``
- ``per step``: ``SELECT step, count(*) FROM actions GROUP BY step``

The shell is timed as a whole process (``sqlite3 -readonly FILE QUERY``), the way it is used;
Python's ``sqlite3`` and DuckDB (its sqlite extension, the file attached read-only) in this
process, connection included. Best, median and worst of ``--repeat``. Goals (issue "The trace
is a real database"): by action under 1 s from the system ``sqlite3``; the frame within 0.7 s
at 1,000 x 1,000.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from results import machine, write_section  # noqa: E402

SECTION = "trace_sql"
QUERIES = {
    "by action": "SELECT action, count(*) FROM actions GROUP BY action",
    "one agent": "SELECT step, action FROM actions WHERE agent_id = 'agent_007'",
    "per step": "SELECT step, count(*) FROM actions GROUP BY step",
}


def _times(fn: Callable[[], object], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return sorted(out)


def _fmt(times: list[float]) -> str:
    return f"{times[0]:.3f} / {statistics.median(times):.3f} / {times[-1]:.3f}"


def _shell(path: Path, sql: str) -> Callable[[], object]:
    def run() -> object:
        return subprocess.run(
            ["sqlite3", "-readonly", str(path), sql + ";"],
            capture_output=True,
            check=True,
        )

    return run


def _python(path: Path, sql: str) -> Callable[[], object]:
    def run() -> object:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return con.execute(sql).fetchall()
        finally:
            con.close()

    return run


def _duckdb(path: Path, sql: str) -> Callable[[], object] | None:
    try:
        from vivarium.trace.duck import duckdb_connection

        duckdb_connection(path).close()
    except Exception:  # not installed, or no sqlite extension: left out of the table
        return None

    def run() -> object:
        con = duckdb_connection(path)
        try:
            return con.sql(sql.replace("FROM actions", "FROM run.actions")).fetchall()
        finally:
            con.close()

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", nargs="+", default=["1000x1000", "10000x100"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = parser.parse_args()

    from vivarium import Experiment, Run

    print(f"Trace SQL: {machine()}")
    rows = []
    shell = shutil.which("sqlite3")
    version = sqlite3.sqlite_version
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            agents, steps = (int(x) for x in size.split("x"))
            path = Path(tmp) / f"random-{size}.sqlite"
            start = time.perf_counter()
            Experiment(name="sql", agents=agents, steps=steps, seed=1).run(path, progress=False)
            made = time.perf_counter() - start
            mb = path.stat().st_size / 1e6
            frame = _times(lambda p=path: Run.open(p).actions, args.repeat)
            print(f"{size}: run {made:.2f} s, {mb:.1f} MB; Run.open().actions {_fmt(frame)} s")
            rows.append(f"| {size} | frame | `Run.open(path).actions` | {_fmt(frame)} |")
            for label, sql in QUERIES.items():
                clients: dict[str, Callable[[], object] | None] = {
                    f"sqlite3 shell {shell and version}": _shell(path, sql) if shell else None,
                    f"Python sqlite3 {version}": _python(path, sql),
                    "DuckDB": _duckdb(path, sql),
                }
                for client, fn in clients.items():
                    if fn is None:
                        continue
                    times = _times(fn, args.repeat)
                    print(f"  {label:9s} {client:24s} {_fmt(times)} s")
                    rows.append(f"| {size} | {label} | {client} | {_fmt(times)} |")
    lines = [
        "## SQL on a trace from other clients (`benchmarks/trace_sql.py`)",
        "",
        f"Machine: {machine()}.",
        "",
        "Random agents (every decision a row); seconds, best / median / worst of "
        f"{args.repeat}. The shell is a whole process; the others run in one process,",
        "connection included. Queries: by action `SELECT action, count(*) FROM actions GROUP BY",
        "action`; one agent `... WHERE agent_id = 'agent_007'`; per step `... GROUP BY step`.",
        "",
        "| agents x steps | query | client | seconds |",
        "|---|---|---|---|",
        *rows,
    ]
    if not args.no_write:
        write_section(SECTION, "\n".join(lines))
        print("wrote RESULTS.md")


if __name__ == "__main__":
    sys.exit(main())
