"""The sweep's own database, ``index.sqlite``, and the lock that keeps one sweep per folder.

The index holds one row per run (run_id, params, seed, status pending/running/complete/failed,
error, path, attempts, timings) and a ``meta`` table describing the sweep. Every change is one
SQLite transaction (WAL, busy timeout), so workers and readers in other processes never see
half a write. The runs' traces are separate files; what they say is asked in
``vivarium.trace.status``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vivarium.errors import ConfigError, TraceError, VivariumError
from vivarium.seeding import canonical_json
from vivarium.sweep.plan import PlannedRun

__all__ = [
    "INDEX_FILE",
    "INDEX_FORMAT",
    "INDEX_VERSION",
    "LOCK_FILE",
    "STATUSES",
    "FolderLock",
    "SweepIndex",
    "read_index",
    "utc_now",
]

STATUSES = ("pending", "running", "complete", "failed")
INDEX_FILE = "index.sqlite"
LOCK_FILE = ".sweep.lock"
INDEX_FORMAT = "vivarium-sweep"
INDEX_VERSION = 1

_INDEX_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    idx INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    params TEXT NOT NULL,
    replication INTEGER NOT NULL,
    seed INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'complete', 'failed')),
    error TEXT,
    path TEXT NOT NULL,
    config TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    action TEXT,
    worker TEXT,
    started_at TEXT,
    finished_at TEXT,
    seconds REAL
);
"""
# The fields of a run's row that ``SweepIndex.update`` may set.
_INDEX_FIELDS = (
    "status",
    "error",
    "action",
    "worker",
    "started_at",
    "finished_at",
    "seconds",
)


def utc_now() -> str:
    """The wall-clock time for the index's timings (never recorded in a trace).

    Returns:
        An ISO 8601 UTC timestamp with milliseconds.
    """
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _connect_index(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        if not path.is_file():
            raise TraceError(f"no sweep index at {path}")
        con = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True, timeout=30)
    else:
        con = sqlite3.connect(path, timeout=30, isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
    con.execute("PRAGMA busy_timeout=30000")
    return con


@contextlib.contextmanager
def _transaction(con: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    con.execute("BEGIN IMMEDIATE")
    try:
        yield con
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


class SweepIndex:
    """``index.sqlite``: one row per run. Each change is one transaction, safe across processes.

    Attributes:
        path: The index file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Open the index, creating its tables in a new file.

        Args:
            path: The index file.

        Raises:
            ConfigError: The file exists but is not a Vivarium sweep index, or cannot be opened.
        """
        self.path = Path(path)
        self._con = _connect_index(self.path)
        try:
            with _transaction(self._con) as con:
                tables = {
                    r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")
                }
                if tables and "meta" in tables:
                    fmt = con.execute("SELECT value FROM meta WHERE key='format'").fetchone()
                    if fmt is None or fmt[0] != INDEX_FORMAT:
                        raise ConfigError(f"{self.path} is not a Vivarium sweep index")
                elif tables:
                    raise ConfigError(f"{self.path} is not a Vivarium sweep index")
                for statement in _INDEX_DDL.split(";"):
                    if statement.strip():
                        con.execute(statement)
                con.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (INDEX_FORMAT,))
                con.execute(
                    "INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(INDEX_VERSION),)
                )
        except sqlite3.DatabaseError as exc:
            self._con.close()
            raise ConfigError(f"cannot open sweep index {self.path}: {exc}") from None
        except BaseException:
            self._con.close()
            raise

    def close(self) -> None:
        """Close the connection."""
        self._con.close()

    def __enter__(self) -> SweepIndex:
        """The index itself; it is closed on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the index."""
        self.close()

    def sync(self, runs: Sequence[PlannedRun], meta: Mapping[str, Any]) -> None:
        """Make the index list exactly ``runs``, keeping what it knew of each run id.

        Rows follow their run id, not their position: a value added at the front of a grid
        moves the rows after it and keeps their status, attempts and timings.

        Args:
            runs: The sweep's planned runs, in run order.
            meta: Facts about the sweep (name, seed, params, grid, ...), stored as JSON.
        """
        kept = ("status", "error", "attempts", "action", "worker") + (
            "started_at",
            "finished_at",
            "seconds",
        )
        with _transaction(self._con) as con:
            for key, value in meta.items():
                con.execute(
                    "INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, canonical_json(value))
                )
            cur = con.execute(f"SELECT run_id, {', '.join(kept)} FROM runs")
            known = {row[0]: row[1:] for row in cur.fetchall()}
            con.execute("DELETE FROM runs")
            for run in runs:
                state = known.get(run.run_id) or ("pending", None, 0, None, None, None, None, None)
                con.execute(
                    f"INSERT INTO runs (idx, run_id, params, replication, seed, path, config, "
                    f"{', '.join(kept)}) VALUES ({', '.join('?' * (7 + len(kept)))})",
                    (
                        run.index,
                        run.run_id,
                        canonical_json(run.params),
                        run.replication,
                        run.seed,
                        run.file,
                        canonical_json(run.config.identity()),
                        *state,
                    ),
                )

    def update(self, idx: int, *, attempt: bool = False, **fields: Any) -> None:
        """Set fields of one run's row, in one transaction.

        Args:
            idx: The run's position (``PlannedRun.index``).
            attempt: Count one more attempt of the run.
            **fields: status, error, action, worker, started_at, finished_at, seconds.

        Raises:
            ValueError: An unknown field or status.
        """
        bad = set(fields) - set(_INDEX_FIELDS)
        if bad:
            raise ValueError(f"unknown index fields: {sorted(bad)}")
        if "status" in fields and fields["status"] not in STATUSES:
            raise ValueError(f"unknown status {fields['status']!r}")
        sets = [f"{k}=?" for k in fields]
        if attempt:
            sets.append("attempts=attempts+1")
        if not sets:
            return
        with _transaction(self._con) as con:
            con.execute(f"UPDATE runs SET {', '.join(sets)} WHERE idx=?", (*fields.values(), idx))

    def rows(self) -> list[dict[str, Any]]:
        """Every run's row, in run order, with ``params`` decoded.

        Returns:
            One dict per run: idx, run_id, params, replication, seed, status, error, path,
            attempts, action, worker, started_at, finished_at, seconds.
        """
        return _read_index_rows(self._con)


def _read_index_rows(con: sqlite3.Connection) -> list[dict[str, Any]]:
    cur = con.execute(
        "SELECT idx, run_id, params, replication, seed, status, error, path, attempts, action, "
        "worker, started_at, finished_at, seconds FROM runs ORDER BY idx"
    )
    names = [d[0] for d in cur.description]
    rows = []
    for values in cur.fetchall():
        row = dict(zip(names, values, strict=True))
        row["params"] = json.loads(row["params"])
        rows.append(row)
    return rows


def _read_meta(con: sqlite3.Connection) -> dict[str, Any]:
    meta = {}
    for key, value in con.execute("SELECT key, value FROM meta"):
        try:
            meta[key] = json.loads(value)
        except ValueError:
            meta[key] = value
    return meta


def read_index(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read a sweep folder's index in one snapshot (safe while the sweep runs).

    Args:
        folder: The sweep folder.

    Returns:
        The sweep's meta (JSON values decoded) and its rows (see ``SweepIndex.rows``).

    Raises:
        TraceError: There is no index, it is not a sweep index, or it cannot be read.
    """
    path = folder / INDEX_FILE
    con = _connect_index(path, readonly=True)
    try:
        con.execute("BEGIN")  # one snapshot of meta and rows
        meta = _read_meta(con)
        if meta.get("format") != INDEX_FORMAT:
            raise TraceError(f"{path} is not a Vivarium sweep index")
        rows = _read_index_rows(con)
        con.execute("COMMIT")
    except sqlite3.Error as exc:
        raise TraceError(f"cannot read sweep index {path}: {exc}") from None
    finally:
        con.close()
    return meta, rows


class FolderLock:
    """An advisory lock on the sweep folder: one sweep process at a time (POSIX; else a no-op).

    The kernel drops it when the process dies, so a killed sweep never leaves a stale lock.
    The lock file holds the pid of the process that has it.
    """

    def __init__(self, folder: Path) -> None:
        """A lock on ``folder`` (taken on entry).

        Args:
            folder: The sweep folder; the lock file is ``.sweep.lock`` in it.
        """
        self.path = folder / LOCK_FILE
        self._fd: int | None = None

    def __enter__(self) -> FolderLock:
        """Take the lock.

        Raises:
            VivariumError: Another process holds the folder (naming its pid).
        """
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return self
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = ""
            with contextlib.suppress(OSError, ValueError, IndexError):
                holder = f" (pid {int(os.pread(fd, 32, 0).split()[0])})"
            os.close(fd)
            raise VivariumError(
                f"sweep folder {self.path.parent} is in use by another sweep process{holder}; "
                "wait for it or use another folder"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        """Release the lock."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
