"""TraceDb: the SQLite file every run writes and every analysis reads.

Writes go through one background thread that owns the connection: the engine hands over a
finished step and goes on deciding the next one while SQLite commits (one transaction per step).
SQLite releases the GIL while it works, so on two cores writing overlaps with deciding.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path

from vivarium.errors import TraceError
from vivarium.trace.records import StepRecord
from vivarium.trace.schema import APPLICATION_ID, DDL, SCHEMA_VERSION, SEQ_BITS
from vivarium.types import RunMetadata

_INSERT_MESSAGE = f"INSERT OR REPLACE INTO messages VALUES ((? << {SEQ_BITS}) | ?, ?, ?, ?, ?, ?)"
_INSERT_LLM_CALL = (
    "INSERT INTO llm_calls (step, agent_idx, attempt, model, request_hash, prompt_tokens, "
    "completion_tokens, cost, latency_ms, cache_hit, finish_reason, error) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_TRANSITION = "INSERT INTO transitions (step, agent_idx, from_state, to_state, trigger) VALUES (?, ?, ?, ?, ?)"
_INSERT_STEP = "INSERT OR REPLACE INTO steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _sidecars(path: Path) -> list[Path]:
    return [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm", "-journal")]


def check_trace_file(path: str | os.PathLike[str]) -> Path:
    """Raise a one-line TraceError unless ``path`` is a Vivarium trace this version can read."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"no trace file at {p}")
    if p.is_dir():
        raise TraceError(f"{p} is a directory, not a trace file")
    with open(p, "rb") as fh:
        header = fh.read(100)
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
    return p


def _marks_through_sqlite(p: Path) -> tuple[int, int]:
    try:
        con = sqlite3.connect(f"file:{p.resolve()}?mode=ro", uri=True)
        try:
            app_id = con.execute("PRAGMA application_id").fetchone()[0]
            version = con.execute("PRAGMA user_version").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0, 0
    return int(app_id), int(version)


def _acquire_writer_lock(path: Path) -> int | None:
    """Hold an advisory lock on the trace file while a run writes it (POSIX; a no-op elsewhere).

    SQLite's own locks allow readers during a run; this one only keeps a second writer out, so
    two runs aimed at one file give a clear error instead of one replacing the other's file.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise TraceError(f"cannot open {path} for writing: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise TraceError(f"{path} is being written by another run; use another --db path") from None
    return fd


def _release_writer_lock(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def _configure(con: sqlite3.Connection) -> None:
    con.execute("PRAGMA journal_mode=WAL")
    # WAL + NORMAL survives a killed process; only a power cut can lose the last steps.
    con.execute("PRAGMA synchronous=NORMAL")
    con.execute("PRAGMA busy_timeout=0")


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

    def run(self) -> None:
        con: sqlite3.Connection | None = None
        try:
            con = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            if self.create:
                # Written before WAL is on, so the marks are in the main file's header at once.
                con.executescript(
                    f"PRAGMA application_id={APPLICATION_ID};"
                    f"PRAGMA user_version={SCHEMA_VERSION};"
                    f"BEGIN;{DDL}"
                    "INSERT INTO meta VALUES ('format', 'vivarium-trace');"
                    f"INSERT INTO meta VALUES ('schema_version', '{SCHEMA_VERSION}');"
                    "COMMIT;"
                )
            _configure(con)
            if self.max_pages is not None:
                con.execute(f"PRAGMA max_page_count={int(self.max_pages)}")
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            self.error = exc
            self.ready.set()
            if con is not None:
                con.close()
            return
        self.ready.set()
        while True:
            job = self.jobs.get()
            if job is None:
                break
            if self.error is not None:
                continue  # drain: after a failure nothing more is written
            try:
                job(con)
            except BaseException as exc:  # noqa: BLE001
                self.error = exc
                self.error_step = getattr(job, "step", None)
                if con.in_transaction:
                    con.rollback()
        # Leave a closed trace as one self-contained file: readers then create no -wal/-shm.
        with contextlib.suppress(sqlite3.Error):
            con.execute("PRAGMA journal_mode=DELETE")
        con.close()


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
    """One run's trace file. ``TraceDb(path)`` creates it for writing; ``TraceDb.open`` reads it.

    ``max_pages`` caps the file at that many SQLite pages, as a full disk would (for tests).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        overwrite: bool = True,
        deterministic_timestamps: bool = True,
        max_pages: int | None = None,
        _resume: bool = False,
    ) -> None:
        self.path = Path(path)
        self.deterministic_timestamps = deterministic_timestamps
        self._closed = False
        if not _resume:
            self._prepare_new(overwrite)
        else:
            check_trace_file(self.path)
        self._lock_fd = _acquire_writer_lock(self.path)
        self._writer = _Writer(self.path, create=not _resume, max_pages=max_pages)
        self._writer.start()
        self._writer.ready.wait()
        if self._writer.error is not None:
            err = self._writer.error
            self._closed = True
            _release_writer_lock(self._lock_fd)
            raise _friendly(err, self.path) from None

    # -- creation -----------------------------------------------------------------------------
    def _prepare_new(self, overwrite: bool) -> None:
        p = self.path
        if str(p) == ":memory:":
            raise TraceError("TraceDb needs a file path; use a temporary folder for throwaway runs")
        if p.exists():
            if p.is_dir():
                raise TraceError(f"{p} is a directory; give a file path for the trace")
            _release_writer_lock(_acquire_writer_lock(p))  # refuse while another run writes it
            if p.stat().st_size > 0:
                check_trace_file(p)  # never delete a file that is not ours
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
    def for_resume(cls, path: str | os.PathLike[str]) -> TraceDb:
        """Open an existing trace for appending (used by resume)."""
        return cls(path, _resume=True)

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
        from vivarium.seeding import canonical_json

        def job(con: sqlite3.Connection) -> None:
            con.execute("BEGIN")
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
                    0,
                    None,
                    created,
                    None,
                ),
            )
            con.executemany("INSERT OR REPLACE INTO agents VALUES (?, ?, ?, ?)", agent_rows)
            con.execute("COMMIT")

        self._submit(job)
        self.flush()

    def write_step(self, record: StepRecord) -> None:
        """Commit one step's rows in one transaction (on the writer thread)."""
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
            *record.encode(),
        )

        def job(con: sqlite3.Connection) -> None:
            con.execute("BEGIN")
            con.execute(_INSERT_STEP, row)
            if record.messages:
                con.executemany(
                    _INSERT_MESSAGE,
                    [(step, seq, step, seq, a, ch, text) for seq, a, ch, text in record.messages],
                )
            if record.llm_calls:
                con.executemany(_INSERT_LLM_CALL, [(step, *r) for r in record.llm_calls])
            if record.transitions:
                con.executemany(_INSERT_TRANSITION, [(step, *r) for r in record.transitions])
            con.execute("UPDATE runs SET steps_done = ?", (step + 1,))
            con.execute("COMMIT")

        job.step = step  # type: ignore[attr-defined]  # named in the error if it fails
        self._submit(job)

    def write_checkpoint(
        self, step: int, state_hash: str, world_state: str, agent_states: str
    ) -> None:
        def job(con: sqlite3.Connection) -> None:
            con.execute(
                "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?)",
                (step, state_hash, world_state, agent_states),
            )

        self._submit(job)

    def truncate_after(self, step: int) -> None:
        """Drop every row after ``step`` (resume continues from there) and reopen the run."""

        def job(con: sqlite3.Connection) -> None:
            con.execute("BEGIN")
            for table in ("steps", "messages", "llm_calls", "transitions", "checkpoints"):
                con.execute(f"DELETE FROM {table} WHERE step > ?", (step,))  # noqa: S608
            con.execute(
                "UPDATE runs SET status = 'running', steps_done = ?, error = NULL, "
                "finished_at = NULL",
                (step + 1,),
            )
            con.execute("COMMIT")

        self._submit(job)

    def finish_run(
        self, status: str = "complete", error: str | None = None, steps: int | None = None
    ) -> None:
        """Record how the run ended; ``steps`` sets the step count when it was open-ended."""
        finished = self._stamp()

        def job(con: sqlite3.Connection) -> None:
            con.execute(
                "UPDATE runs SET status = ?, error = ?, finished_at = ?", (status, error, finished)
            )
            if steps is not None:
                con.execute("UPDATE runs SET steps = ?", (steps,))

        self._submit(job)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._writer.jobs.put(None)
        self._writer.join()
        _release_writer_lock(self._lock_fd)
        if self._writer.error is not None:
            raise _friendly(self._writer.error, self.path, self._writer.error_step) from None

    def __enter__(self) -> TraceDb:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ------------------------------------------------------------------------------
    @staticmethod
    def connect_readonly(path: str | os.PathLike[str]) -> sqlite3.Connection:
        """A read-only connection to a checked trace file."""
        p = check_trace_file(path)
        con = sqlite3.connect(f"file:{p.resolve()}?mode=ro", uri=True)
        return con
