"""TraceDb: the SQLite file every run writes and every analysis reads.

Writes go through one background thread that owns the connection: the engine hands over a
finished step and goes on deciding the next one while SQLite commits (one transaction per step).
SQLite releases the GIL while it works, so on two cores writing overlaps with deciding.

The file is in WAL mode while a run writes it (readers read meanwhile and never wait), and one
self-contained file before and after, whatever its readers did: see ``vivarium.trace.onefile``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vivarium.errors import TraceError
from vivarium.settings import DEFAULT_DETERMINISTIC_TIMESTAMPS
from vivarium.trace.column_insert import ColumnInserter
from vivarium.trace.llm_texts import TextStore, encode_exchange, known_texts
from vivarium.trace.onefile import (
    FileId,
    close_as_one_file,
    file_id,
    fold_wal,
    read_connection,
    side_file,
    writer_alive,
)
from vivarium.trace.records import ACTION_COLUMNS, StepRecord
from vivarium.trace.schema import (
    APPLICATION_ID,
    DDL,
    LLM_CALL_SOURCES,
    LLM_CALLS,
    REPORTER_TABLES,
    RESUMABLE_VERSIONS,
    SCHEMA_VERSION,
    SEQ_BITS,
    STEPS,
    TRANSITIONS,
    Table,
    aam_compat_ddl,
)
from vivarium.types import RunMetadata

_INSERT_MESSAGE = f"INSERT OR REPLACE INTO messages VALUES ((? << {SEQ_BITS}) | ?, ?, ?, ?, ?, ?)"


def _insert(table: Table) -> str:
    """An INSERT of every column but the row id (SQLite numbers the rows)."""
    names = [c.name for c in table.columns if c.name != "id"]
    return f"INSERT INTO {table.name} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"


_INSERT_LLM_CALL = _insert(LLM_CALLS)
_INSERT_TRANSITION = _insert(TRANSITIONS)
_INSERT_STEP = f"INSERT OR REPLACE INTO steps VALUES ({', '.join('?' * len(STEPS.columns))})"
# What a CallRecord row gives before its request and reply: every column but the row id, the
# step (the writer's) and the four that hold the texts.
_LLM_CALL_FIELDS = len(LLM_CALLS.columns) - 6
# The decision columns a step's insert always names; the others only when some row has one
# (a null column then costs nothing per row: SQLite writes the default).
_ALWAYS = frozenset({"agent_idx", "action"})
_DEFAULTS = {"success": 1, "fallback": 0}  # as the decisions table declares them


def _insert_decisions(
    con: sqlite3.Connection,
    step: int,
    record: StepRecord,
    columns_inserter: ColumnInserter | None = None,
) -> tuple[str, ...]:
    """Insert the step's decisions, many rows per statement.

    A step whose columns are encoded as the trace stores them (a batch path's, or any step
    once its state hash is computed: the hash reads the same texts) is inserted by SQLite from
    those texts (``vivarium.trace.column_insert``: the GIL is released meanwhile). Otherwise
    the rows are bound here: one statement per row costs SQLite and the driver more than the
    row itself (about half a microsecond each); a few hundred rows per ``INSERT ... VALUES
    (...), (...)`` share it. Only the columns some row fills are named: the rest take their
    default (null, or 0).

    Returns:
        The columns some row filled (the frames read only those a run ever filled).
    """
    if columns_inserter is not None and record.encoded:
        filled = columns_inserter.insert(con, step, record, _DEFAULTS)
        if filled is not None:
            return filled
    columns = record.decision_columns()
    names, values = [], []
    for name, column in zip(ACTION_COLUMNS, columns, strict=True):
        usual = _DEFAULTS.get(name)
        if name in _ALWAYS or column.count(usual) < len(column):
            names.append(name)
            values.append(column)
    n = len(columns[0])
    base = step << SEQ_BITS
    width = len(names) + 1
    flat = list(itertools.chain.from_iterable(zip(range(base, base + n), *values, strict=True)))
    per = max(1, _MAX_VARIABLES // width)
    head = tuple(names)
    for start in range(0, n, per):
        rows = min(per, n - start)
        con.execute(_rows_insert(head, rows), flat[start * width : (start + rows) * width])
    return head


@functools.lru_cache(maxsize=64)
def _rows_insert(names: tuple[str, ...], rows: int) -> str:
    one = "(" + ", ".join("?" * (len(names) + 1)) + ")"
    return (
        f"INSERT OR REPLACE INTO decisions (id, {', '.join(names)}) "
        f"VALUES {', '.join([one] * rows)}"
    )


_MAX_VARIABLES = 2400  # parameters per statement (SQLite allows 32,766; a few hundred rows)


_INSERT_MODEL_VARS = "INSERT OR REPLACE INTO model_vars VALUES (?, ?, ?, ?)"
_INSERT_AGENT_VARS = "INSERT OR REPLACE INTO agent_vars VALUES (?, ?, ?, ?)"
_NEXT_CALL_ID = "SELECT coalesce(max(id), 0) + 1 FROM llm_calls"
_CREATE_CALL_SOURCES = LLM_CALL_SOURCES.ddl().replace(
    "CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1
)
_CREATE_REPORTER_TABLES = [
    t.ddl().replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1) for t in REPORTER_TABLES
]


def _has_table(con: sqlite3.Connection, name: str) -> bool:
    row = con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
    return row.fetchone() is not None


def now_iso() -> str:
    """The current UTC time, to the millisecond (ISO 8601): the trace's timestamps."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _sidecars(path: Path) -> list[Path]:
    return [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm", "-journal")]


def check_trace_file(path: str | os.PathLike[str]) -> Path:
    """Raise a one-line TraceError unless ``path`` is a Vivarium trace this version can read.

    A WAL left beside a trace that no process writes (its writer was killed) is folded back
    into the file here, so that the next read leaves one file (``vivarium.trace.onefile``).
    """
    p = Path(path)
    if not p.exists():
        raise TraceError(f"no trace file at {p}")
    if p.is_dir():
        raise TraceError(f"{p} is a directory, not a trace file")
    with open(p, "rb") as fh:
        header = fh.read(100)
    if len(header) < 100 and writer_alive(p):  # made empty by a run's lock, filled just after
        raise TraceError(f"{p} is being created by a run that is starting; open it in a moment")
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        raise TraceError(f"{p} is not a Vivarium trace (not an SQLite database)")
    app_id = int.from_bytes(header[68:72], "big")
    version = int.from_bytes(header[60:64], "big")
    if app_id != APPLICATION_ID and Path(str(p) + "-wal").exists():
        app_id, version = _marks_through_sqlite(p)  # the marks may still sit in the WAL
    if app_id != APPLICATION_ID:
        raise TraceError(f"{p} is an SQLite database but not a Vivarium trace")
    if version > SCHEMA_VERSION:
        raise TraceError(
            f"{p} uses trace schema {version}, newer than this Vivarium reads ({SCHEMA_VERSION}); "
            "upgrade vivarium-lab"
        )
    fold_wal(p, wal_mode=header[18] == 2)
    return p


def schema_version(path: str | os.PathLike[str]) -> int:
    """The trace schema version of a checked trace file (``PRAGMA user_version``)."""
    p = check_trace_file(path)
    with open(p, "rb") as fh:
        header = fh.read(100)
    if int.from_bytes(header[68:72], "big") != APPLICATION_ID:  # the marks are in the WAL
        return _marks_through_sqlite(p)[1]
    return int.from_bytes(header[60:64], "big")


def _marks_through_sqlite(p: Path) -> tuple[int, int]:
    try:
        con = read_connection(p)
        try:
            app_id = con.execute("PRAGMA application_id").fetchone()[0]
            version = con.execute("PRAGMA user_version").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0, 0
    return int(app_id), int(version)


def _acquire_writer_lock(path: Path, *, resume: bool = False) -> int | None:
    """Hold an advisory lock on the trace file while a run writes it (POSIX; a no-op elsewhere).

    SQLite's own locks allow readers during a run; this one keeps a second writer out, so two
    runs aimed at one file give a clear error instead of one replacing the other's file, and
    tells readers whether a process writes the file (``vivarium.trace.onefile.writer_alive``).
    Readers hold it for a moment (to ask, or to fold a killed run's WAL back), so a writer
    that finds it held tries again for up to ``_LOCK_WAIT`` seconds before it gives up.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise TraceError(f"cannot open {path} for writing: {exc.strerror}") from None
    start = time.monotonic()
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            # Readers only ever hold it shared, for a moment: a shared lock we can take too
            # says no writer holds it, so a busy machine's slow reader is waited for longer.
            wait = _READERS_WAIT if _only_readers(fd) else _LOCK_WAIT
            if isinstance(exc, BlockingIOError) and time.monotonic() - start < wait:
                time.sleep(0.01)
                continue
            os.close(fd)
            if resume:  # another path is no answer: the run is this trace's own
                raise TraceError(
                    f"{path} is being written by another run (its run, or a resume of it, in "
                    "another process): let it finish, then resume it if it stopped "
                    "(`vvm validate` says RUNNING until then); nothing was changed"
                ) from None
            raise TraceError(
                f"{path} is being written by another run; give another path (db=..., vvm: "
                "--db), or wait for it to finish"
            ) from None
        return fd


_LOCK_WAIT = 1.0  # seconds a writer waits for a lock held exclusively (a fold of a WAL)
_READERS_WAIT = 30.0  # seconds it waits for readers that hold it shared, for a moment each


def _only_readers(fd: int) -> bool:
    """Whether the lock on ``fd``'s file is held shared only (readers asking), not by a writer."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True


def _release_writer_lock(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def check_new_trace_path(path: str | os.PathLike[str]) -> bool:
    """Refuse, in one line and without touching anything, a path no new trace can be written to.

    Checked before a run builds anything, so that a run refused for any reason (this, an LLM
    server that is not there, a bad agent folder) leaves the file system as it was. Returns
    whether a file is there (an empty file or a Vivarium trace) that a new trace would replace.
    """
    p = Path(path)
    if str(p) == ":memory:":
        raise TraceError("TraceDb needs a file path; use a temporary folder for throwaway runs")
    if p.exists():
        if p.is_dir():
            raise TraceError(f"{p} is a directory; give a file path for the trace")
        _release_writer_lock(_acquire_writer_lock(p))  # refuse while another run writes it
        if p.stat().st_size > 0:
            check_trace_file(p)  # never delete a file that is not ours
        return True
    folder = p.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise TraceError(f"cannot create folder {p.parent}: {folder} is a file")
    if not os.access(folder, os.W_OK):
        where = str(p.parent) if folder == p.parent else f"{p.parent} in {folder}"
        raise TraceError(f"cannot write a trace in {where}: the folder is read-only")
    return False


def recorded_run_id(path: str | os.PathLike[str]) -> str | None:
    """The run id a trace file holds (None: no file, an empty file, or no run record yet).

    Raises a one-line TraceError for a file that is not a Vivarium trace.
    """
    p = Path(path)
    if not p.exists() or (p.is_file() and p.stat().st_size == 0):
        return None
    check_trace_file(p)
    try:
        con = read_connection(p)
        try:
            row = con.execute("SELECT run_id FROM runs").fetchone()
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise TraceError(f"cannot read the run record in {p}: {exc}") from None
    return None if row is None else str(row[0])


def read_meta(path: str | os.PathLike[str], key: str) -> str | None:
    """A value of a trace's ``meta`` table (None when the trace has no such key)."""
    p = check_trace_file(path)
    try:
        con = read_connection(p)
        try:
            row = con.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise TraceError(f"cannot read {p}: {exc}") from None
    return None if row is None else str(row[0])


_TEMPLATE: list[bytes] = []
_TEMPLATE_LOCK = threading.Lock()


def _empty_trace() -> bytes:
    """A new trace file's bytes: the schema and marks, made once per process in memory.

    Writing them costs a third of running the schema's statements against each new file
    (which a sweep of many short runs pays once per run).
    """
    with _TEMPLATE_LOCK:
        if not _TEMPLATE:
            con = sqlite3.connect(":memory:", isolation_level=None)
            con.executescript(
                f"PRAGMA application_id={APPLICATION_ID};"
                f"PRAGMA user_version={SCHEMA_VERSION};"
                f"BEGIN;{DDL}"
                "INSERT INTO meta VALUES ('format', 'vivarium-trace');"
                f"INSERT INTO meta VALUES ('schema_version', '{SCHEMA_VERSION}');"
                "COMMIT;"
            )
            _TEMPLATE.append(con.serialize())
            con.close()
        return _TEMPLATE[0]


def _write_empty_trace(path: Path) -> None:
    """Fill the new, empty file at ``path`` (made by the writer lock) with an empty trace.

    Raises:
        TraceError: the file is no longer empty (another process wrote it meanwhile).
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size:
            raise TraceError(f"{path} was written by another process while this run began")
        data = memoryview(_empty_trace())
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


_NOTHING = object()  # no job carried over to the writer's next turn
_GROUP_MAX = 64  # transactions committed together at most, when the writer falls behind


def _configure(con: sqlite3.Connection) -> None:
    con.execute("PRAGMA journal_mode=WAL")
    # WAL + NORMAL survives a killed process; only a power cut can lose the last steps.
    con.execute("PRAGMA synchronous=NORMAL")
    # A second writer is kept out by the writer's lock (``_acquire_writer_lock``), not by
    # SQLite's: what can still hold SQLite's lock for a moment is a reader opening the file (it
    # rebuilds the WAL index) or folding a killed run's WAL, which a busy machine may stretch.
    # Waiting for them is right; failing the run is not.
    con.execute("PRAGMA busy_timeout=30000")
    # A run appends rows in key order: a larger page cache and fewer, longer checkpoints of the
    # WAL into the file (every 40 MB, not every 4 MB) cost less per row written.
    con.execute("PRAGMA cache_size=-65536")
    con.execute("PRAGMA wal_autocheckpoint=10000")


class _Writer(threading.Thread):
    """Owns the write connection; runs submitted jobs in order; keeps the first error."""

    def __init__(self, path: Path, *, create: bool, max_pages: int | None = None) -> None:
        super().__init__(name="vivarium-trace-writer", daemon=True)
        self.path = path
        self.create = create
        self.max_pages = max_pages
        self.jobs: queue.Queue[Callable[[sqlite3.Connection], None] | None] = queue.Queue(16)
        self.error: BaseException | None = None
        self.error_step: int | None = None  # the step being written when the error came
        self.ready = threading.Event()
        # Called after a rollback, so that state kept beside the file (the reporter tables
        # made) is made again by the transactions that are replayed.
        self.on_rollback: Callable[[], None] = lambda: None
        # Called after each commit, so that such state can be marked as in the file.
        self.on_commit: Callable[[], None] = lambda: None
        self.file: FileId | None = None  # the file written, and its WAL (see onefile)
        self.wal: FileId | None = None

    def run(self) -> None:
        con: sqlite3.Connection | None = None
        try:
            if self.create:
                # The empty trace, marks in the main file's header, written before WAL is on.
                _write_empty_trace(self.path)
            con = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            _configure(con)
            self.file = file_id(self.path)
            if self.max_pages is not None:
                con.execute(f"PRAGMA max_page_count={int(self.max_pages)}")
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            self.error = exc
            self.ready.set()
            if con is not None:
                con.close()
            return
        self.ready.set()
        carry: Any = _NOTHING
        while True:
            job = self.jobs.get() if carry is _NOTHING else carry
            carry = _NOTHING
            if job is None:
                break
            if self.error is not None:
                continue  # drain: after a failure nothing more is written
            group = [job]
            if getattr(job, "parts", None) is not None:
                # Transactions queued behind this one (the engine got ahead: many small
                # steps) commit with it, so a commit's cost is shared instead of paid per step.
                while len(group) < _GROUP_MAX:
                    try:
                        nxt = self.jobs.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None or getattr(nxt, "parts", None) is None:
                        carry = nxt
                        break
                    group.append(nxt)
            if len(group) == 1 or not self._run_group(con, group):
                for one in group:  # alone, or again one by one to name the step that failed
                    self._run_one(con, one)
        self._finish(con)

    def _run_one(self, con: sqlite3.Connection, job: Callable[[sqlite3.Connection], None]) -> None:
        if self.error is not None:
            return
        try:
            job(con)
        except BaseException as exc:  # noqa: BLE001
            self.error = exc
            self.error_step = getattr(job, "step", None)
            if con.in_transaction:
                con.rollback()
            self.on_rollback()
        else:
            self._committed()

    def _run_group(self, con: sqlite3.Connection, group: list[Any]) -> bool:
        """Commit several transactions as one; False (rolled back) if any part failed."""
        try:
            con.execute("BEGIN")
            for job in group:
                for part in job.parts:
                    part(con)
            con.execute("COMMIT")
        except BaseException:  # noqa: BLE001 - replayed one by one, which keeps the error
            if con.in_transaction:
                con.rollback()
            self.on_rollback()
            return False
        self._committed()
        return True

    def _committed(self) -> None:
        """After a commit: note the WAL the writer has open, then ``on_commit``."""
        if self.wal is None:  # SQLite makes the WAL at the first commit
            self.wal = file_id(side_file(self.path, "-wal"))
        self.on_commit()

    def _finish(self, con: sqlite3.Connection) -> None:
        """Leave the closed trace one self-contained file, whatever its readers hold.

        SQLite WAL: a reader still open when the writer closes keeps the -wal file (the last
        commits are then not in the .sqlite), so the WAL is folded back deliberately, in place
        or through a copy (``vivarium.trace.onefile.close_as_one_file``).
        """
        close_as_one_file(con, self.path, self.file, self.wal)


FILLED_META_KEY = "decision_columns_filled"
_SET_META = "INSERT OR REPLACE INTO meta VALUES (?, ?)"


def listed_filled(con: sqlite3.Connection) -> set[str] | None:
    """The decision columns some row wrote, as the writer's meta lists them (None: unlisted).

    The one reader of ``FILLED_META_KEY``: the frames, the health rules, the summary and the
    validation all read what rows may hold from here.
    """
    try:
        row = con.execute("SELECT value FROM meta WHERE key = ?", (FILLED_META_KEY,)).fetchone()
    except sqlite3.Error:  # no meta table: nothing listed
        return None
    return set(json.loads(row[0])) if row else None


def _filled_columns(path: Path) -> list[str]:
    """The decision columns a trace's rows fill, as its meta says.

    A trace with decisions but no such record (one that stopped before any was committed, or
    was written otherwise) counts every column as filled: readers then read them all, and a
    resume's record never leaves out a column the earlier rows fill.
    """
    con = read_connection(check_trace_file(path))
    try:
        listed = listed_filled(con)
        if listed is not None:
            return list(listed)
        try:
            any_row = con.execute("SELECT 1 FROM decisions LIMIT 1").fetchone()
        except sqlite3.OperationalError:
            any_row = None
    finally:
        con.close()
    return list(ACTION_COLUMNS) if any_row else []


def _known_texts(path: Path) -> list[tuple[str, int]]:
    con = read_connection(path)
    try:
        return known_texts(con)
    finally:
        con.close()


def _add_aam_compat(con: sqlite3.Connection, run_id: str | None = None) -> None:
    """Give the trace the original aam engine's ``trace`` view and ``messages`` columns.

    Added with the run record, since the messages' ``run_id`` column holds the run's id (None:
    the one the file records); a trace that has them already is left exactly as it is.
    """
    if run_id is None:
        row = con.execute("SELECT run_id FROM runs").fetchone()
        if row is None:
            return
        run_id = str(row[0])
    columns = {row[1] for row in con.execute("PRAGMA table_xinfo(messages)")}
    views = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'view'")}
    for statement in aam_compat_ddl(run_id, columns, views):
        con.execute(statement)


def write_run_record(
    con: sqlite3.Connection,
    meta: RunMetadata,
    agents: Iterable[tuple[int, str, str, str | None]],
    *,
    created: str | None,
    steps_done: int = 0,
) -> None:
    """Write the run's record, its agents and aam's columns (inside the caller's transaction).

    The one writer of a ``runs`` row: a run's start (``TraceDb.begin_run``) and a fork's file
    (``vivarium.trace.fork_file``), which begins its run ``steps_done`` steps in.
    """
    from vivarium.seeding import canonical_json

    con.execute(
        "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            meta.run_id,
            meta.name,
            meta.world,
            meta.policy,
            str(meta.seed),
            meta.agents,
            meta.steps,
            meta.scheduling,
            meta.vivarium_version,
            canonical_json(meta.config),
            "running",
            steps_done,
            None,
            created,
            None,
        ),
    )
    con.executemany("INSERT OR REPLACE INTO agents VALUES (?, ?, ?, ?)", list(agents))
    _add_aam_compat(con, meta.run_id)


def _truncate(con: sqlite3.Connection, step: int) -> None:
    """Drop every row after ``step`` and mark the run running again (inside a transaction)."""
    for table in ("steps", "messages", "llm_calls", "transitions", "checkpoints"):
        con.execute(f"DELETE FROM {table} WHERE step > ?", (step,))  # noqa: S608
    if _has_table(con, LLM_CALL_SOURCES.name):  # beside the calls dropped, dropped too
        con.execute(
            "DELETE FROM llm_call_sources WHERE id > (SELECT coalesce(max(id), 0) FROM llm_calls)"
        )
    # Decisions by their key (a range of the table's own order, not a scan); the texts of the
    # dropped calls stay: a text is kept once, whoever uses it.
    con.execute("DELETE FROM decisions WHERE id >= ?", ((step + 1) << SEQ_BITS,))
    # Reporter rows follow their steps; a run redone from the start also redoes its init row (-1).
    for reporters in REPORTER_TABLES:
        if _has_table(con, reporters.name):
            con.execute(
                f"DELETE FROM {reporters.name} WHERE step > ?",  # noqa: S608
                (step if step >= 0 else -2,),
            )
    con.execute(
        "UPDATE runs SET status = 'running', steps_done = ?, error = NULL, finished_at = NULL",
        (step + 1,),
    )


def _friendly(exc: BaseException, path: Path, step: int | None = None) -> TraceError:
    text = str(exc)
    at = "" if step is None else f" at step {step}"
    if isinstance(exc, sqlite3.OperationalError):
        if "locked" in text or "busy" in text:
            return TraceError(f"{path} is being written by another run; use another --db path")
        if "readonly" in text or "read-only" in text:
            return TraceError(f"cannot write {path}{at}: the file or its folder is read-only")
        if "disk is full" in text or "disk I/O" in text:
            return TraceError(
                f"cannot write {path}{at}: {text} (everything committed before is kept)"
            )
    return TraceError(f"cannot write {path}{at}: {text}")


class TraceDb:
    """One run's trace file, written. ``TraceDb(path)`` creates it; ``Run.open`` reads it.

    ``max_pages`` caps the file at that many SQLite pages, as a full disk would (for tests).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        overwrite: bool = True,
        deterministic_timestamps: bool = DEFAULT_DETERMINISTIC_TIMESTAMPS,
        max_pages: int | None = None,
        _resume: bool = False,
    ) -> None:
        """Create the trace at ``path`` (or reopen it for a resume, see ``for_resume``).

        Args:
            path: The trace file.
            overwrite: Replace a file there (only ever a trace, see ``check_new_trace_path``).
            deterministic_timestamps: Record no wall-clock times (byte-identical traces).
            max_pages: Cap the file at that many pages, as a full disk would (for tests).
            _resume: Reopen an existing trace (used by ``for_resume``).

        Raises:
            TraceError: the file cannot be created, is locked by another writer, or is of an
                older schema that cannot be resumed.
        """
        self.path = Path(path)
        self.deterministic_timestamps = deterministic_timestamps
        self._closed = False
        # A resume's truncation, and the writes that wait for the first step (see for_resume).
        self._resume_from: int | None = None
        self._deferred: list[Callable[[sqlite3.Connection], None]] = []
        self._reporter_tables = False  # whether this writer has made the reporter tables
        if not _resume:
            self._prepare_new(overwrite)
        elif (version := schema_version(self.path)) not in RESUMABLE_VERSIONS:
            raise TraceError(
                f"{self.path} uses trace schema {version}, which this version reads but cannot "
                f"continue (it writes schema {SCHEMA_VERSION}); run it again instead of resuming"
            )
        self._lock_fd = _acquire_writer_lock(self.path, resume=_resume)
        # The decision columns some row has filled (a resume's run may fill more).
        self._filled: set[str] = set(_filled_columns(self.path) if _resume else ())
        self._filled_committed = set(self._filled)  # what the file's meta says
        self._columns = ColumnInserter()  # the writer connection's batch-step inserts
        # The LLM texts the file holds already (a resume's calls refer to them, not to copies).
        self._texts = (
            TextStore(_known_texts(self.path), schema_version(self.path))
            if _resume
            else TextStore()
        )
        self._writer = _Writer(self.path, create=not _resume, max_pages=max_pages)
        self._writer.on_rollback = self._forget_tables
        self._writer.on_commit = self._remember_filled
        self._writer.start()
        self._writer.ready.wait()
        if self._writer.error is not None:
            err = self._writer.error
            self._closed = True
            _release_writer_lock(self._lock_fd)
            raise _friendly(err, self.path) from None

    def _forget_tables(self) -> None:
        """Undo what a rolled-back transaction did beside the file (on the writer thread).

        It may have made the reporter tables, or recorded decision columns as filled: the
        transactions replayed after it must do both again, or the meta would not list a column
        its rows fill (and the frames would read that column as its default).
        """
        self._reporter_tables = False
        self._filled = set(self._filled_committed)

    def _remember_filled(self) -> None:
        """After a commit: the filled columns recorded are in the file (writer thread)."""
        self._filled_committed = set(self._filled)

    # -- creation -----------------------------------------------------------------------------
    def _prepare_new(self, overwrite: bool) -> None:
        p = self.path
        if check_new_trace_path(p):
            if not overwrite:
                raise TraceError(f"{p} already exists; pass overwrite=True or choose another path")
            try:
                p.unlink()
                for side in _sidecars(p):
                    side.unlink(missing_ok=True)
            except OSError as exc:
                raise TraceError(f"cannot replace {p}: {exc.strerror}") from None
        parent = p.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TraceError(f"cannot create folder {parent}: {exc.strerror}") from None
        if not os.access(parent, os.W_OK):
            raise TraceError(f"cannot write a trace in {parent}: the folder is read-only")

    @classmethod
    def for_resume(cls, path: str | os.PathLike[str], *, from_step: int | None = None) -> TraceDb:
        """Open an existing trace for appending (used by resume).

        With ``from_step``, the rows from that step on are dropped in the same transaction that
        commits the first step written (and a run record written before it waits for it too):
        a resume that fails before its first step leaves the trace exactly as it was, its rows,
        status and steps done included.
        """
        trace = cls(path, _resume=True)
        trace._resume_from = from_step
        # A trace written before the original aam engine's columns existed gains them here.
        trace._deferred.append(_add_aam_compat)
        return trace

    @property
    def resuming(self) -> bool:
        """Whether this trace was reopened by a resume that has not committed a step yet."""
        return self._resume_from is not None

    # -- writing ------------------------------------------------------------------------------
    def _submit(self, job: Callable[[sqlite3.Connection], None]) -> None:
        if self._closed:
            raise TraceError(f"{self.path} is closed")
        if self._writer.error is not None:
            raise _friendly(self._writer.error, self.path, self._writer.error_step) from None
        self._writer.jobs.put(job)

    def flush(self) -> None:
        """Wait until every submitted write is committed; raise the first write error."""
        done = threading.Event()
        self._submit(lambda con: done.set())
        while not done.wait(0.05):
            if self._writer.error is not None or not self._writer.is_alive():
                break
        if self._writer.error is not None:
            raise _friendly(self._writer.error, self.path, self._writer.error_step) from None

    def _stamp(self) -> str | None:
        return None if self.deterministic_timestamps else now_iso()

    def begin_run(
        self, meta: RunMetadata, agents: Iterable[tuple[int, str, str, str | None]]
    ) -> None:
        """Record the run and its agents (agent_idx, agent_id, policy name, seed).

        Waits for the commit: steps are written behind the engine, but a run killed at any step
        must leave its run record, so that it validates as incomplete and can be resumed.
        """
        agent_rows = list(agents)
        created = self._stamp()

        def rows(con: sqlite3.Connection) -> None:
            write_run_record(con, meta, agent_rows, created=created)

        if self._resume_from is not None:
            self._deferred.append(rows)
            return
        self._submit_transaction(rows)
        self.flush()

    def set_meta(self, key: str, value: str) -> None:
        """Record ``key = value`` in the trace's ``meta`` table (settings a resume needs)."""

        def rows(con: sqlite3.Connection) -> None:
            con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

        if self._resume_from is not None:
            self._deferred.append(rows)
            return
        self._submit_transaction(rows)

    def _submit_transaction(
        self, body: Callable[[sqlite3.Connection], None], step: int | None = None
    ) -> None:
        """Commit ``body`` in one transaction, after a pending resume's truncation, if any."""
        parts = [*self._take_pending(), body]

        def job(con: sqlite3.Connection) -> None:
            con.execute("BEGIN")
            for part in parts:
                part(con)
            con.execute("COMMIT")

        job.step = step  # type: ignore[attr-defined]  # named in the error if it fails
        job.parts = parts  # type: ignore[attr-defined]  # the writer may commit it with others
        self._submit(job)

    def _take_pending(self) -> list[Callable[[sqlite3.Connection], None]]:
        """A pending resume's truncation and deferred writes (emptied: they run once)."""
        if self._resume_from is None:
            return []
        keep = self._resume_from - 1
        parts = [lambda con: _truncate(con, keep), *self._deferred]
        self._resume_from, self._deferred = None, []
        return parts

    def write_step(self, record: StepRecord, checkpoint: tuple[str, str] | None = None) -> None:
        """Commit one step's rows in one transaction (on the writer thread).

        ``checkpoint`` (world and agent states as JSON) is committed in the same transaction:
        a process killed between the two would leave a step without the checkpoint an
        uninterrupted run has after it.
        """
        if record.wall_time is None and not self.deterministic_timestamps:
            record.wall_time = now_iso()
        step = record.step
        row = (
            step,
            record.n_actions,
            len(record.messages),
            record.world_digest,
            record.state_hash,
            record.wall_time,
            record.clock,
        )
        calls = [self._call_row(step, call) for call in record.llm_calls]
        # A reply another run made (a fork's parent's) says so beside its row.
        sources = [
            (i, call[_LLM_CALL_FIELDS + 2])
            for i, call in enumerate(record.llm_calls)
            if len(call) > _LLM_CALL_FIELDS + 2
        ]
        texts = self._texts.take()

        def rows(con: sqlite3.Connection) -> None:
            con.execute(_INSERT_STEP, row)
            if record.n_actions:
                filled = _insert_decisions(con, step, record, self._columns)
                if not self._filled.issuperset(filled):  # the writer thread's own set
                    self._filled.update(filled)
                    con.execute(_SET_META, (FILLED_META_KEY, json.dumps(sorted(self._filled))))
            if record.messages:
                con.executemany(
                    _INSERT_MESSAGE,
                    [(step, seq, step, seq, a, ch, text) for seq, a, ch, text in record.messages],
                )
            if texts:
                con.executemany(self._texts.insert_sql, texts)
            if calls:
                first = con.execute(_NEXT_CALL_ID).fetchone()[0] if sources else 0
                con.executemany(_INSERT_LLM_CALL, calls)
                if sources:
                    con.execute(_CREATE_CALL_SOURCES)
                    con.executemany(
                        "INSERT INTO llm_call_sources VALUES (?, ?)",
                        [(first + i, source) for i, source in sources],
                    )
            if record.transitions:
                con.executemany(
                    _INSERT_TRANSITION,
                    [(step, *r, *(None,) * (6 - len(r))) for r in record.transitions],
                )
            if record.model_vars or record.agent_vars:
                if not self._reporter_tables:  # made by the first step that has reporters
                    for statement in _CREATE_REPORTER_TABLES:
                        con.execute(statement)
                    self._reporter_tables = True
                con.executemany(_INSERT_MODEL_VARS, record.model_vars)
                con.executemany(_INSERT_AGENT_VARS, record.agent_vars)
            if checkpoint is not None:
                con.execute(
                    "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?)",
                    (step, record.state_hash, *checkpoint),
                )
            con.execute("UPDATE runs SET steps_done = ?", (step + 1,))

        self._submit_transaction(rows, step)

    def _call_row(self, step: int, call: tuple[Any, ...]) -> tuple[Any, ...]:
        """An ``llm_calls`` row: the call's fields, then its texts as ids (``llm_texts``)."""
        fields, exchange = call[:_LLM_CALL_FIELDS], call[_LLM_CALL_FIELDS:]
        request, reply = (*exchange, None, None)[:2]
        return (step, *fields, *encode_exchange(request, reply, self._texts))

    def write_checkpoint(
        self, step: int, state_hash: str, world_state: str, agent_states: str
    ) -> None:
        """Record the state a resume can start from after ``step`` (world and agents as JSON)."""

        def job(con: sqlite3.Connection) -> None:
            con.execute(
                "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?)",
                (step, state_hash, world_state, agent_states),
            )

        self._submit(job)

    def record_interruption(
        self,
        *,
        step: int,
        ended: str,
        reason: str | None,
        decisions: int = 0,
        calls: list[dict[str, Any]] | None = None,
    ) -> None:
        """Record that the run stopped before ``step`` (see ``vivarium.trace.interruptions``).

        Written in a transaction of its own, whatever a resume has pending: it is history,
        kept even when the resume that saw it commits nothing.
        """
        from vivarium.trace.interruptions import insert_job

        self._submit(insert_job(step, ended, reason, now_iso(), decisions, calls or []))

    def truncate_after(self, step: int) -> None:
        """Drop every row after ``step`` (resume continues from there) and reopen the run."""
        self._submit_transaction(lambda con: _truncate(con, step))

    def finish_run(
        self, status: str = "complete", error: str | None = None, steps: int | None = None
    ) -> None:
        """Record how the run ended; ``steps`` sets the step count when it was open-ended.

        A resume that ends before writing a step leaves the trace as it was, unless it ends
        complete (there was nothing left to redo).
        """
        finished = self._stamp()
        if self._resume_from is not None and status != "complete":
            self._resume_from, self._deferred = None, []
            return

        def rows(con: sqlite3.Connection) -> None:
            con.execute(
                "UPDATE runs SET status = ?, error = ?, finished_at = ?", (status, error, finished)
            )
            if steps is not None:
                con.execute("UPDATE runs SET steps = ?", (steps,))

        self._submit_transaction(rows)

    def close(self) -> None:
        """Commit what is queued and release the file (idempotent).

        Raises:
            TraceError: a write failed (the disk is full, the file was removed, ...).
        """
        if self._closed:
            return
        self._closed = True
        self._writer.jobs.put(None)
        self._writer.join()
        _release_writer_lock(self._lock_fd)
        if self._writer.error is not None:
            raise _friendly(self._writer.error, self.path, self._writer.error_step) from None

    def __enter__(self) -> TraceDb:
        """The trace itself: ``with TraceDb(path) as trace:`` closes it at the end."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the trace (see ``close``)."""
        self.close()

    # -- reading ------------------------------------------------------------------------------
    @staticmethod
    def connect_readonly(path: str | os.PathLike[str]) -> sqlite3.Connection:
        """A read-only connection to a checked trace file that reads one snapshot.

        A read transaction is begun here and lasts until the connection is closed: the
        queries made on it all see the same committed steps, even while a run writes the file
        (``vvm validate`` on a live trace checks rows that belong together). Close it as soon
        as it has been read: while it is open, the run's WAL cannot be folded past its snapshot.
        """
        p = check_trace_file(path)
        con = read_connection(p)
        con.execute("BEGIN")
        return con
