"""A trace is one self-contained file, except while a run writes it.

A run writes its trace in SQLite's WAL mode, so that readers (a second notebook polling
``Run.open``, ``vvm validate``, the sqlite3 shell, DuckDB) read while it writes and never wait
for it. Until the WAL is folded back into the main file (a checkpoint), the last tens of MB of
the run live only in ``<trace>-wal`` beside it. SQLite folds it and removes ``-wal`` and ``-shm``
only when a connection has the file to itself: a reader still open when the writer closes keeps
the ``-wal`` (and a read-only reader, closing last, never removes it), and the ``.sqlite`` alone
then holds part of the run, or none of it. So the file is taken back deliberately:

1. **At close** (``close_as_one_file``, on the writer thread): the writer switches the file to
   rollback mode (``journal_mode=DELETE``), which folds the WAL in and removes both side files.
   That needs the file to itself, so the writer retries for up to ``CLOSE_WAIT`` seconds while
   readers finish (Vivarium's own readers hold the file for the length of one read). If one
   still holds it then (a sqlite3 or DuckDB connection left open, a long query), the writer does
   not wait for it: it copies the WAL and the file aside, folds the copy into one file and moves
   it into the trace's place. The reader goes on reading the file it opened (complete too:
   every step was committed before), everyone after it opens the new one, and the copy has the
   bytes the fold in place gives (the same config and seed still give the same file).
2. **On open** (``fold_wal``, called by ``check_trace_file``): a WAL beside a trace that no
   process writes (its writer was killed) is folded back by the next reader the same way, every
   committed step kept: the trace is one file again.
3. **After reading** (``leave_one_file``, when a reader's connection closes): a reader that had
   opened the file just before a folded copy took its place reads the old file, which is still
   in WAL mode, and SQLite then makes a new, empty ``-wal`` and a ``-shm`` beside the new file by
   name; a read-only reader closing last never removes them. They hold nothing (every step is
   in the file), but the folder no longer holds one file. So every Vivarium reader, when it
   closes, removes side files that hold no step beside a file in rollback mode, under the
   writer's lock (no run can start writing the file meanwhile). Property: once a run has
   returned and Vivarium's readers have closed, the trace is one file, whatever they did while
   it closed. A ``-wal`` with frames in it is never removed: that is a writer's, or a killed
   run's, which the next open folds back.
4. **While reading** (``read_connection``): readers open the file read-only, with a busy timeout
   (a reader waits while a writer briefly has the file to itself, instead of failing with
   "database is locked"), and close it as soon as they have read. They do not open it
   ``immutable``: that reads without locks, and a file being written or folded changes under
   such a reader. What a reader reads together is one snapshot: a connection's statements share
   one read transaction (``TraceDb.connect_readonly``), and frames read one after the other are
   bounded by the steps committed when the run was opened (``vivarium.trace.frames``).

Readers never hold the writer up: in WAL mode a commit does not wait for readers (a reader's
snapshot only keeps the WAL from being checkpointed past it, so the WAL grows meanwhile), and
the fold at close waits for them at most ``CLOSE_WAIT`` seconds. A reader that keeps the old
file open after the copy took its place does no harm when it closes: SQLite sees that its file
was replaced and leaves alone the side files now named after the new one.

Whether a process writes a trace is told by the writer's lock (``writer_alive``): the writer
holds an exclusive ``flock`` on the file for as long as it writes, which the kernel releases when
the process ends, however it ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "CLOSE_WAIT",
    "READ_TIMEOUT",
    "FileId",
    "close_as_one_file",
    "file_id",
    "fold_wal",
    "leave_one_file",
    "read_connection",
    "read_uri",
    "side_file",
    "writer_alive",
]

CLOSE_WAIT = 1.0
"""Seconds a closing writer waits for readers to let go before it puts a folded copy in place."""

READ_TIMEOUT = 5.0
"""Seconds a reader waits for a writer that has the file to itself (a switch of journal mode)."""

_RETRY = 0.005  # seconds between a closing writer's attempts


def side_file(path: Path, suffix: str) -> Path:
    """``<path>-wal``, ``<path>-shm``: the files SQLite keeps beside a database."""
    return path.with_name(path.name + suffix)


FileId = tuple[int, int]
"""A file as (device, inode): what a path names may change, an open file does not."""


def file_id(path: Path) -> FileId | None:
    """The file at ``path`` as (device, inode); None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def read_uri(path: Path) -> str:
    """The read-only URI of ``path`` for SQLite and the ADBC driver.

    Percent-encoded (``Path.as_uri``), so a folder named ``run #1`` or ``what?`` reads the file
    it names rather than the part of the name before ``#`` or ``?``.
    """
    return path.resolve().as_uri() + "?mode=ro"


class _ReadConnection(sqlite3.Connection):
    """A reader's connection that, once closed, leaves the trace one file (``leave_one_file``)."""

    trace_path: Path | None = None

    def close(self) -> None:
        super().close()
        if self.trace_path is not None:
            path, self.trace_path = self.trace_path, None
            leave_one_file(path)


def read_connection(
    path: str | os.PathLike[str], *, check_same_thread: bool = True
) -> sqlite3.Connection:
    """A read-only connection to the SQLite file at ``path`` (not checked: see the callers).

    It waits up to ``READ_TIMEOUT`` seconds when a writer has the file to itself, as it has for
    a moment when a run starts, closes, or a killed run's WAL is folded back. Closing it leaves
    the trace one file (``leave_one_file``).
    """
    path = Path(path)
    con = sqlite3.connect(
        read_uri(path),
        uri=True,
        timeout=READ_TIMEOUT,
        check_same_thread=check_same_thread,
        factory=_ReadConnection,
    )
    con.trace_path = path  # type: ignore[attr-defined]
    return con


def _rollback_mode(path: Path) -> bool:
    """Whether the file's header says rollback mode (not WAL); False when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            header = fh.read(20)
    except OSError:
        return False
    return len(header) == 20 and header[18] == 1 and header[19] == 1


def _wal_size(path: Path) -> int | None:
    """The size of ``<path>-wal``; None when there is none."""
    try:
        return side_file(path, "-wal").stat().st_size
    except OSError:
        return None


def leave_one_file(path: str | os.PathLike[str]) -> None:
    """Remove side files that hold no step from beside a trace no process writes.

    Called when a reader closes (see the module docstring, 3.): a reader that read the old file
    after a folded copy replaced it makes an empty ``-wal`` and a ``-shm`` beside the new one.
    They are removed only when the file is in rollback mode, the ``-wal`` is empty (or gone),
    and the writer's lock can be had at once (no run writes the file, and none can start to
    while they are removed); otherwise they are left as they are. The usual case, nothing
    beside the file, costs two ``stat`` calls.
    """
    path = Path(path)
    if _wal_size(path) is None and not side_file(path, "-shm").exists():
        return
    if _wal_size(path) or not _rollback_mode(path):
        return  # a WAL with frames, or a file in WAL mode: a writer's, or the next open's fold
    with _writer_lock(path) as held:
        # Not held: a run writes the file (or another reader is tidying it).
        if not held or _wal_size(path) or not _rollback_mode(path):
            return
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(OSError):
                side_file(path, suffix).unlink(missing_ok=True)


@contextlib.contextmanager
def _writer_lock(path: Path) -> Iterator[bool]:
    """Hold the writer's lock on ``path`` for the block if it can be had at once: whether it is.

    Not held when a process writes the file (or another reader holds it to tidy or fold), when
    the file cannot be opened, and off POSIX (no writer's lock there: nothing is done).
    """
    fd = None
    if os.name == "posix":
        with contextlib.suppress(OSError):
            fd = _flock(path, exclusive=True)
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)


def _flock(path: Path, exclusive: bool) -> int | None:
    """An fd holding a non-blocking ``flock`` on ``path``; None when another process holds it.

    Raises:
        OSError: the file cannot be opened (there is none, or it cannot be read).
    """
    import fcntl

    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:  # a file system without flock: nobody can hold it either
        return fd
    return fd


def writer_alive(path: str | os.PathLike[str]) -> bool:
    """Whether a process is writing the trace at ``path`` now (it holds the writer's lock).

    A run killed with SIGKILL, or whose machine went down, holds nothing: its trace says
    ``running`` but no process writes it any more.
    """
    if os.name != "posix":  # pragma: no cover - no writer lock to ask
        return False
    try:
        fd = _flock(Path(path), exclusive=False)
    except OSError:
        return False
    if fd is None:
        return True
    os.close(fd)  # releases the probe's shared lock
    return False


def fold_wal(path: Path, *, wal_mode: bool) -> None:
    """Fold the WAL of a trace that no process writes back into the file (one file again).

    A killed writer leaves one (see the module docstring), and its file's header still says WAL
    mode when a reader that closed last removed the WAL: every reader would make a ``-wal`` and
    a ``-shm`` beside it again. The fold switches the file to rollback mode, holding the writer's
    lock meanwhile so that no run starts writing the file under it, and gives up at once,
    leaving the file as it is (still read through its WAL, every committed step there), when it
    cannot have the file to itself: a writer is alive, another process holds the file open,
    the folder is read-only. The next open tries again.

    Args:
        path: A checked trace file.
        wal_mode: Whether its header says WAL mode (side files with no step beside a
            rollback-mode file are removed, ``leave_one_file``).
    """
    if not wal_mode and not _wal_size(path):
        leave_one_file(path)  # nothing beside it (the usual case), or side files with no step
        return
    with _writer_lock(path) as held:
        if not held:
            return  # a writer holds the file (or another reader is folding it)
        try:
            con = sqlite3.connect(path, timeout=0, isolation_level=None)
            try:
                con.execute("SELECT count(*) FROM sqlite_master").fetchone()  # reads the header
                con.execute("PRAGMA journal_mode=DELETE")
            finally:
                con.close()
        except sqlite3.Error:
            pass  # held open elsewhere, or read-only: read through the WAL this time


def _busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` says another connection holds the file ("database is locked")."""
    return exc.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def close_as_one_file(
    con: sqlite3.Connection, path: Path, file: FileId | None, wal: FileId | None
) -> None:
    """Close the writer's connection leaving ``path`` one self-contained file.

    Called when every write is committed. Folds the WAL in place when the file can be had to
    itself within ``CLOSE_WAIT`` seconds, else puts a folded copy in its place (see the module
    docstring). A failure of the disk leaves the WAL beside the file: every commit is in it,
    and the next open folds it back.

    Args:
        con: The writer's connection (closed here, whatever happens).
        path: The trace file.
        file: The file the writer opened: a copy replaces only that file, never one another
            process has put at ``path`` since.
        wal: The WAL the writer opened: the copy is made from that one, even when another
            process's connection has removed or replaced the file named ``<path>-wal``.
    """
    try:
        # Each try gives up at once when a reader holds the file; the loop does the waiting.
        con.execute("PRAGMA busy_timeout=0")
        deadline = time.monotonic() + CLOSE_WAIT
        while True:
            try:
                con.execute("PRAGMA journal_mode=DELETE")
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    return
            else:
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(_RETRY)
        _replace_with_folded_copy(con, path, file, wal)
    finally:
        con.close()


def _replace_with_folded_copy(
    con: sqlite3.Connection, path: Path, file: FileId | None, wal: FileId | None
) -> None:
    """Put a one-file copy of the trace in its place while readers hold the original open.

    The WAL is copied before the file: a checkpoint that another connection runs meanwhile
    only writes into the file pages that the copied WAL holds as well, and the fold of the copy
    writes them again. The writer's connection is closed before the copy takes the trace's
    name, so nothing of the original is removed by name after that (SQLite names its side files
    by the path). Whatever fails leaves the original as it was.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.closing")
    made = [tmp, side_file(tmp, "-wal"), side_file(tmp, "-shm"), side_file(tmp, "-journal")]
    try:
        if file is None or file_id(path) != file:
            return  # the path holds another file now (removed or replaced): leave it be
        log = _opened(side_file(path, "-wal"), wal)
        if log is None:
            return
        shutil.copyfile(log, made[1])
        shutil.copyfile(path, tmp)
        con.close()
        fold = sqlite3.connect(tmp, isolation_level=None)
        try:
            mode = fold.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
        finally:
            fold.close()
        if mode != "delete" or made[1].exists():
            return
        _fsync(tmp)
        if file_id(path) != file:
            return
        os.replace(tmp, path)
        for suffix in ("-wal", "-shm"):
            side_file(path, suffix).unlink(missing_ok=True)
        _fsync(path.parent)
    except (OSError, sqlite3.Error):
        return
    finally:
        for leftover in made:
            with contextlib.suppress(OSError):
                leftover.unlink(missing_ok=True)


def _opened(path: Path, want: FileId | None) -> Path | None:
    """A name that opens the file ``want``: ``path``, or this process's own descriptor of it.

    ``<path>-wal`` may no longer name the writer's WAL (removed while the run wrote, by a
    cleanup script's ``rm *-wal`` say): the writer still has it open, and reads it through
    ``/proc/self/fd`` (Linux; elsewhere the copy is not made, and the WAL is lost as before).
    """
    if want is None:
        return None
    if file_id(path) == want:
        return path
    try:
        descriptors = list(Path("/proc/self/fd").iterdir())
    except OSError:
        return None
    return next((fd for fd in descriptors if file_id(fd) == want), None)


def _fsync(path: Path) -> None:
    """Flush ``path`` (a file, or a folder's entries) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
