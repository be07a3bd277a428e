"""Where a run's trace goes: the path asked for, never over another run's result.

A run writes the file it is given, else ``<folder>/<name>.sqlite``. That file may hold another
run: a finished result of another identity is never replaced unless ``overwrite`` says so; a
finished result of this run by other package code, or one replayed from a recording, is kept
and the run goes beside it (``<name>-code-<digest>.sqlite``, ``<name>-replay.sqlite``) with a
``TracePathWarning``; a trace a live process is writing is never touched. Every entry point
(``Experiment.run``, a sweep's workers, the panel, ``vvm``) chooses its path here.
"""

from __future__ import annotations

import os
import sqlite3
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from vivarium.errors import TraceError, TracePathWarning
from vivarium.settings import DEFAULT_RUNS_DIR

if TYPE_CHECKING:
    from vivarium.experiment.config import ExperimentConfig

__all__ = ["default_trace_path", "trace_path"]


def default_trace_path(config: ExperimentConfig, folder: str | os.PathLike[str] | None) -> Path:
    """The config's ``db``, else ``<folder>/<name>.sqlite`` (``folder`` default ``runs/``).

    Args:
        config: The experiment config.
        folder: The folder for a config without ``db``; None: ``DEFAULT_RUNS_DIR``.

    Returns:
        The path a run of ``config`` writes to when the caller names no file.
    """
    if config.db:
        return Path(config.db)
    base = Path(folder) if folder is not None else DEFAULT_RUNS_DIR
    return base / f"{config.name}.sqlite"


def trace_path(
    config: ExperimentConfig,
    db: str | os.PathLike[str] | None = None,
    *,
    overwrite: bool = False,
    folder: str | os.PathLike[str] | None = None,
    stacklevel: int = 1,
) -> Path:
    """Where a run of ``config`` writes its trace; nothing is touched.

    A trace there that holds this run (same config and seed: same run id) is replaced, and so
    is one holding another run when ``overwrite`` is true. A finished trace of this run id
    made by other package code (``vivarium.experiment.identity.package_code_digest``), or recorded with
    another config under a run id given by hand, or the recording of the LLM replies this run
    would replay from a cassette (its calls were made), is a different result: it is replaced
    only when ``overwrite`` is true, else refused; at the default path a run made by other code
    gives way instead to ``runs/<name>-code-<digest>.sqlite`` (a notebook re-run after an
    upgrade keeps both results), and a replay to ``runs/<name>-replay.sqlite``, with a
    ``TracePathWarning``. Otherwise a path the user named (``db``, or the config's ``db``) is
    refused, and the default ``runs/<name>.sqlite`` gives way to ``runs/<run id>.sqlite``, with
    a ``TracePathWarning`` that says so: a loop over seeds keeps every run. The run's own
    cassette (``llm.cache``) given as the trace is refused.

    Args:
        config: The experiment config.
        db: The file the caller named, if any.
        overwrite: Replace a trace of another run.
        folder: The folder of the default path (see ``default_trace_path``).
        stacklevel: As for ``warnings.warn``, counted from the caller of this function.

    Returns:
        The path to write.

    Raises:
        TraceError: The path is a folder, a foreign file, a trace being written, or (without
            ``overwrite``) a named file holding another run, or a finished trace of this run
            id that is another result: one line that says which.
    """
    from vivarium.trace.db import check_new_trace_path, recorded_run_id

    run_id = config.resolved_run_id()
    explicit = db is not None or bool(config.db)
    path = Path(db) if db is not None else default_trace_path(config, folder)
    cassette = config.llm.cache if config.llm is not None else None
    if cassette and Path(cassette).resolve() == path.resolve():
        raise TraceError(
            f"{path} is given as both the trace and the cassette (llm cache): give the "
            "cassette another file"
        )
    try:
        check_new_trace_path(path)  # a folder, a foreign file, a run writing it: said first
    except TraceError:
        beside = None if explicit else _beside_a_live_run(path, config, run_id)
        if beside is None:
            raise
        warnings.warn(beside[1], TracePathWarning, stacklevel=stacklevel + 1)
        return beside[0]
    held = recorded_run_id(path)
    if overwrite or held is None:
        return path
    if held == run_id:
        why = _another_result(path, config)
        if why is None:
            return path
        if not explicit and why.startswith((_OTHER_CODE, _RECORDING)):
            # The default path (a notebook re-run after an upgrade, or replaying a recording):
            # the old result stays and the new one goes beside it, named by its code or as a
            # replay.
            beside = _beside(path, why)
            if recorded_run_id(beside) is None or _another_result(beside, config) is None:
                warnings.warn(
                    f"{path} holds this run ({run_id}) {why}; this run is written to {beside}",
                    TracePathWarning,
                    stacklevel=stacklevel + 1,
                )
                return beside
        raise TraceError(
            f"{path} holds the finished run {run_id} {why}; rerunning would replace its result "
            "with a different one: pass overwrite=True (vvm: --overwrite) to replace it, or "
            "give another path"
        )
    if not explicit:
        name = config.name
        own = path.with_name(
            f"{run_id}.sqlite" if run_id.startswith(f"{name}-") else f"{name}-{run_id}.sqlite"
        )
        if recorded_run_id(own) in (None, run_id):
            warnings.warn(
                f"{path} holds run {held}; this run ({run_id}) is written to {own}",
                TracePathWarning,
                stacklevel=stacklevel + 1,
            )
            return own
        path, held = own, recorded_run_id(own)
    raise TraceError(
        f"{path} holds run {held}, not this one ({run_id}): pass overwrite=True "
        "(vvm: --overwrite) to replace it, or give another path"
    )


def _beside_a_live_run(
    path: Path, config: ExperimentConfig, run_id: str
) -> tuple[Path, str] | None:
    """Where a run goes when its default path is being written by another run, and the note.

    Two notebooks (or two ``vvm run --seed`` in two terminals) running the same experiment
    with other seeds at once: the second finds ``runs/<name>.sqlite`` written by the first.
    As when that run had finished, the second goes beside it to ``runs/<name>-<run id>.sqlite``
    instead of being refused. The same run written twice at once is still refused (None).
    """
    from vivarium.trace.db import check_new_trace_path, recorded_run_id
    from vivarium.trace.onefile import writer_alive

    if not writer_alive(path):
        return None
    try:
        held = recorded_run_id(path)
    except TraceError:
        return None
    if held == run_id:
        return None
    name = config.name
    own = path.with_name(
        f"{run_id}.sqlite" if run_id.startswith(f"{name}-") else f"{name}-{run_id}.sqlite"
    )
    check_new_trace_path(own)
    if recorded_run_id(own) not in (None, run_id):
        return None
    writer = f"run {held}" if held else "a run starting"
    return own, f"{path} is being written by {writer}; this run ({run_id}) is written to {own}"


_OTHER_CODE = "made by other Vivarium code"
_RECORDING = "recorded from the LLM"


def _beside(path: Path, why: str) -> Path:
    """Where a run goes beside the result at ``path`` that it would not give (``why``)."""
    if why.startswith(_RECORDING):
        return path.with_name(f"{path.stem}-replay.sqlite")
    from vivarium.experiment.identity import package_code_digest

    code = package_code_digest().rpartition("+")[2][:8]
    return path.with_name(f"{path.stem}-code-{code}.sqlite")


def _calls_made(con: sqlite3.Connection, config: ExperimentConfig) -> int:
    """The LLM calls a trace made (not cache hits), when a run of ``config`` replays them.

    A run that takes replies from a cassette (cache mode ``replay`` or ``auto``) writes them as
    cache hits: over the recording of those replies it would put another trace (and one that
    differs in every reply if the cassette changed since), so the recording is kept.
    """
    llm = config.llm
    if llm is None or not llm.cache or llm.cache_mode == "record":
        return 0
    try:
        return int(con.execute("SELECT count(*) FROM llm_calls WHERE cache_hit = 0").fetchone()[0])
    except sqlite3.Error:
        return 0


def _another_result(path: Path, config: ExperimentConfig) -> str | None:
    """Why the finished trace of this run id at ``path`` is a result a rerun would not give.

    Rerunning the same config and seed rewrites its trace with the same bytes, which is why
    it may replace it unasked; that holds only for the same code. A trace that records other
    package code (its worlds or policies edited, or another version) or, under a run id given
    by hand, another config, is another result; so is the recording of a run's LLM replies
    (calls made) to a run that replays them from a cassette.

    Returns:
        The reason (``made by other Vivarium code (...)``), or None: unfinished, unreadable, or
        the same result.
    """
    from vivarium.experiment.identity import CODE_META_KEY, package_code_digest
    from vivarium.seeding import canonical_json
    from vivarium.trace.db import TraceDb, read_meta

    try:
        con = TraceDb.connect_readonly(path)
        try:
            row = con.execute("SELECT status, config_json FROM runs").fetchone()
            made = _calls_made(con, config)
        finally:
            con.close()
    except (sqlite3.Error, TraceError):  # unreadable: no finished result (validate says why)
        return None
    if row is None or row[0] != "complete":
        return None  # an unfinished run is no result: a rerun replaces it, as before
    recorded, now = read_meta(path, CODE_META_KEY), package_code_digest()
    if recorded is not None and recorded != now:
        return f"{_OTHER_CODE} ({recorded}; now {now})"
    if config.run_id and row[1] != canonical_json(config.identity()):
        return "recorded with another config under that run id"
    if made:
        return f"{_RECORDING} ({made} calls made, not replayed from a cassette)"
    return None
