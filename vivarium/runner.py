"""Run one experiment config into a trace, or resume one from its trace.

This is the machinery under ``Experiment.run`` and ``Run.resume``, and what a sweep's workers
and the control panel call for each of their runs: choose the trace path (never replacing
another run's trace unless told to), build the engine, record how LLM calls are made (so a
resume goes on the same way), drive a progress bar, turn an LLM outage into one line that
says how to go on, and warn when a run is not a clean result.

It knows configs, the engine and the trace, and nothing above them (no sweep, no panel, no
``Experiment``). A caller that wants its own ``Run`` class (``Experiment``'s, which can also
summarise and resume itself) passes its ``open`` as ``open_run``; by default a run is read
with the trace's own reader, ``TraceRun``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from vivarium.config import LLM_TRANSPORT_FIELDS, ExperimentConfig, make_config
from vivarium.errors import (
    ConfigError,
    RunHealthWarning,
    RunInterrupted,
    TraceError,
    TracePathWarning,
)
from vivarium.trace.resume import (
    is_complete,
    record_llm_settings,
    recorded_llm_settings,
    resume_point,
)
from vivarium.trace.run import TraceRun

if TYPE_CHECKING:
    from vivarium.engine.engine import WorldEngine
    from vivarium.trace.db import TraceDb
    from vivarium.trace.health import RunHealth

__all__ = [
    "DEFAULT_RUNS_DIR",
    "RunResult",
    "build_engine",
    "default_trace_path",
    "health_warning",
    "interrupted_error",
    "llm_settings",
    "progress_enabled",
    "resume_run",
    "run_experiment",
    "trace_path",
    "warn_if_unhealthy",
]

DEFAULT_RUNS_DIR = Path("runs")
"""Where traces go when neither the call nor the config names a file or a folder."""


class RunResult(Protocol):
    """What this module needs of a run read from its trace (any ``Run`` class)."""

    path: Path
    run_id: str

    @property
    def metadata(self) -> dict[str, Any]:
        """The trace's run record (``status``, ``steps``, ``steps_done``, ``config``, ...)."""
        ...

    @property
    def health(self) -> RunHealth:
        """Whether the run is a result to trust (see ``vivarium.trace.health``)."""
        ...


R = TypeVar("R", bound=RunResult)


def _open_trace_run(path: Path) -> Any:
    """The run in ``path``, read with the trace's own reader (the default ``open_run``)."""
    return TraceRun.open(path)


def progress_enabled(progress: bool | None) -> bool:
    """Whether to show a progress bar.

    Args:
        progress: The caller's choice; None defers to the ``VIVARIUM_PROGRESS`` environment
            variable (bars unless it is ``0``, ``false``, ``no`` or ``off``), which is how tests
            and batch jobs turn every bar off at once.

    Returns:
        True to show a bar.
    """
    if progress is not None:
        return progress
    return os.environ.get("VIVARIUM_PROGRESS", "1").lower() not in {"0", "false", "no", "off"}


def llm_settings(config: ExperimentConfig) -> dict[str, Any] | None:
    """How a run's LLM calls are made, as a resume needs them.

    The server, transport, limits, timeouts, cassette and what an outage does are not part of
    a run's identity (its run id), but a resume must go on the same way. Never the API key.

    Args:
        config: The experiment config.

    Returns:
        The settings; for a run without LLM agents only the ``max_concurrency`` it set (its
        async policies' pace, not part of the recorded config either), else None.
    """
    if config.llm is None:
        own = config.max_concurrency
        return None if own is None else {"max_concurrency": own}
    from vivarium.engine.deciding import DEFAULT_MAX_CONCURRENCY

    fields = set(LLM_TRANSPORT_FIELDS) - {"api_key"}
    settings = config.llm.model_dump(include=fields)
    # The concurrency the run used, whichever place gave it (the run's own is not recorded
    # elsewhere), so a resume goes on at the same pace.
    settings["max_concurrency"] = config.decisions_in_flight or DEFAULT_MAX_CONCURRENCY
    return settings


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
    made by other package code (``vivarium.build.package_code_digest``), or recorded with
    another config under a run id given by hand, is a different result: it is replaced only
    when ``overwrite`` is true, else refused; at the default path a run made by other code
    gives way instead to ``runs/<name>-code-<digest>.sqlite`` (a notebook re-run after an
    upgrade keeps both results), with a ``TracePathWarning``. Otherwise a path the user named
    (``db``, or the config's ``db``) is refused, and the default ``runs/<name>.sqlite`` gives
    way to ``runs/<run id>.sqlite``, with a ``TracePathWarning`` that says so: a loop over seeds
    keeps every run.

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
    check_new_trace_path(path)  # a folder, a foreign file, a run writing it: said first
    held = recorded_run_id(path)
    if overwrite or held is None:
        return path
    if held == run_id:
        why = _another_result(path, config)
        if why is None:
            return path
        if not explicit and why.startswith(_OTHER_CODE):
            # The default path (a notebook re-run after an upgrade): the old result stays and
            # the new one goes beside it, named by its code.
            from vivarium.build import package_code_digest

            code = package_code_digest().rpartition("+")[2][:8]
            beside = path.with_name(f"{path.stem}-code-{code}.sqlite")
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


_OTHER_CODE = "made by other Vivarium code"


def _another_result(path: Path, config: ExperimentConfig) -> str | None:
    """Why the finished trace of this run id at ``path`` is a result a rerun would not give.

    Rerunning the same config and seed rewrites its trace with the same bytes, which is why
    it may replace it unasked; that holds only for the same code. A trace that records other
    package code (its worlds or policies edited, or another version) or, under a run id given
    by hand, another config, is another result.

    Returns:
        The reason (``made by other Vivarium code (...)``), or None: unfinished, unreadable, or
        the same result.
    """
    from vivarium.build import CODE_META_KEY, package_code_digest
    from vivarium.seeding import canonical_json
    from vivarium.trace.db import TraceDb, read_meta

    try:
        con = TraceDb.connect_readonly(path)
        try:
            row = con.execute("SELECT status, config_json FROM runs").fetchone()
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
    return None


def build_engine(
    config: ExperimentConfig, trace_db: TraceDb | None, shared: dict[str, Any] | None = None
) -> WorldEngine:
    """The engine for ``config``, writing to ``trace_db`` (None: no trace).

    Args:
        config: The experiment config.
        trace_db: The trace to write; its LLM settings are recorded at once.
        shared: Receives what the agents share (the gateway stack), so the caller can close
            it when the run ends.

    Returns:
        The engine, ready to run.
    """
    from vivarium._version import __version__
    from vivarium.build import build_agents, build_world, recorded_seeds
    from vivarium.engine.deciding import DEFAULT_MAX_CONCURRENCY
    from vivarium.engine.engine import WorldEngine, WorldEngineConfig
    from vivarium.types import RunMetadata

    c = config
    run_id = c.resolved_run_id()
    shared = {} if shared is None else shared
    world = build_world(c, shared)
    agents = build_agents(c, shared)
    meta = RunMetadata(
        run_id=run_id,
        name=c.name,
        world=c.world,
        policy=_policy_names(c, shared.get("plan")) if agents else "",
        seed=c.seed,
        agents=len(agents),  # disabled agents are left out
        steps=c.steps,
        scheduling=c.scheduling,
        vivarium_version=__version__,
        config=c.identity(),
    )
    if trace_db is not None:
        record_llm_settings(trace_db, llm_settings(c))  # how calls are made, for a resume
        _record_code(trace_db)
    return WorldEngine(
        WorldEngineConfig(
            run_id=run_id,
            seed=c.seed,
            deterministic_timestamps=c.deterministic_timestamps,
            message_history_limit=c.message_history_limit,
            scheduling=c.scheduling,
            order=c.order,
            max_concurrency=c.decisions_in_flight or DEFAULT_MAX_CONCURRENCY,
            agent_timeout_s=c.llm.agent_timeout if c.llm else None,
            agent_retries=c.llm.agent_retries if c.llm else 0,
            on_llm_error=c.llm.on_llm_error if c.llm else "stop",
        ),
        agents,
        world,
        trace_db,
        metadata=meta,
        checkpoint_every=c.checkpoint_every,
        agent_seeds=recorded_seeds(shared["plan"]),
    )


def _record_code(trace: TraceDb) -> None:
    """Record which package code makes the run (``package_code_digest``), outside its id."""
    from vivarium.build import CODE_META_KEY, package_code_digest

    trace.set_meta(CODE_META_KEY, package_code_digest())


def _policy_names(config: ExperimentConfig, plan: list[Any] | None = None) -> str:
    """The policy names a run records: ``random``, or ``random,workflow`` for several.

    Only of the agents in the run: a disabled group is not.
    """
    if plan:
        return ",".join(sorted({p.group.policy for p in plan}))
    if isinstance(config.agents, list):
        return ",".join(sorted({group.policy for group in config.agents}))
    return config.policy


def _progress_bar(config: ExperimentConfig, desc: str, initial: int = 0) -> Any:
    """A tqdm bar for a run of ``config``.

    It counts steps (from ``initial``), or the seconds of an autonomous run's clock.
    """
    from tqdm.auto import tqdm

    if config.mode == "autonomous":
        from vivarium.engine.autonomous import progress_bar_options

        options = progress_bar_options(config.autonomous)
    else:
        options = {"total": config.steps, "initial": initial, "unit": "step"}
    return tqdm(desc=desc, leave=True, **options)


def _close_gateway(shared: dict[str, Any]) -> None:
    """Close the gateway stack the agents shared, if the run built one that can be closed."""
    close = getattr(shared.get("gateway"), "close", None)
    if callable(close):
        close()


def _drive(
    engine: WorldEngine,
    config: ExperimentConfig,
    steps: int,
    bar: Any,
    on_step: Callable[[int, Any], None] | None = None,
) -> None:
    """Run ``steps`` steps (or an autonomous run's whole duration) on ``engine``."""
    if config.mode == "autonomous":
        engine.run_autonomous(config.autonomous, progress=bar)
    else:
        engine.run(steps, progress=bar, on_step=on_step)


def run_experiment(
    config: ExperimentConfig,
    db: str | os.PathLike[str] | None = None,
    *,
    overwrite: bool = False,
    folder: str | os.PathLike[str] | None = None,
    progress: bool | None = None,
    on_step: Callable[[int, Any], None] | None = None,
    on_start: Callable[[Any], None] | None = None,
    open_run: Callable[[Path], R] = _open_trace_run,
    stacklevel: int = 1,
) -> R:
    """Run every step of ``config``, write the trace, and return the run read from it.

    Everything that can refuse the run (the path, the agents, an LLM server that is not
    there) is checked before the file is touched.

    Args:
        config: The experiment config.
        db: The trace file; None: the config's ``db``, else ``<folder>/<name>.sqlite``. See
            ``trace_path`` for when an existing trace is replaced.
        overwrite: Replace a trace of another run.
        folder: The folder of the default path (default ``runs/``).
        progress: Show a progress bar (None: see ``progress_enabled``).
        on_step: Called after each step with the step and its record (the control panel's
            live figure).
        on_start: Called with the engine once it is built, before the first step (the
            control panel draws its live world from ``engine.world``).
        open_run: Reads the finished trace into the returned run (default: ``TraceRun.open``).
        stacklevel: As for ``warnings.warn``, counted from the caller of this function: where
            a ``TracePathWarning`` or a ``RunHealthWarning`` points.

    Returns:
        The run, as ``open_run`` reads it; a ``RunHealthWarning`` when it is not a clean result.

    Raises:
        RunInterrupted: The LLM infrastructure stopped the run (one line saying how to resume).
        TraceError: The trace path cannot be used.
        ConfigError: The config cannot be built into a run.
    """
    from vivarium.trace.db import TraceDb, check_new_trace_path

    path = trace_path(config, db, overwrite=overwrite, folder=folder, stacklevel=stacklevel + 1)
    check_new_trace_path(path)
    trace: TraceDb | None = None
    bar = None
    shared: dict[str, Any] = {}
    interrupted = False
    try:
        engine = build_engine(config, None, shared)
        trace = TraceDb(path, deterministic_timestamps=config.deterministic_timestamps)
        record_llm_settings(trace, llm_settings(config))
        _record_code(trace)
        engine.trace_db = trace
        if on_start is not None:
            on_start(engine)
        if progress_enabled(progress):
            bar = _progress_bar(config, config.name)
        _drive(engine, config, config.steps, bar, on_step)
    except RunInterrupted as exc:
        raise interrupted_error(exc, config.resolved_run_id(), path) from None
    except KeyboardInterrupt:
        interrupted = True  # perhaps before the run was recorded: see _close_trace
        raise
    finally:
        if bar is not None:
            bar.close()
        _close_gateway(shared)
        if trace is not None:
            _close_trace(trace, drop_if_empty=interrupted)
    return warn_if_unhealthy(open_run(path), stacklevel=stacklevel + 1)


def _close_trace(trace: TraceDb, *, drop_if_empty: bool = False) -> None:
    """Close a trace with signals held (every queued write committed, the file released).

    A Ctrl-C that came before the run record was written (a trace just created, with no run
    in it) removes the file: what is left is no result at all, never a trace that looks like
    one that stopped.
    """
    from vivarium.engine.interrupts import interrupts_deferred
    from vivarium.trace.db import recorded_run_id

    with interrupts_deferred():
        trace.close()
        if drop_if_empty:
            with contextlib.suppress(OSError, TraceError):
                if recorded_run_id(trace.path) is None:
                    for suffix in ("", "-wal", "-shm", "-journal"):
                        Path(f"{trace.path}{suffix}").unlink(missing_ok=True)


def resume_run(
    path: str | os.PathLike[str],
    *,
    progress: bool | None = None,
    llm: dict[str, Any] | None = None,
    open_run: Callable[[Path], R] = _open_trace_run,
    stacklevel: int = 1,
) -> R:
    """Finish an interrupted run in place, from its last checkpoint (or from the start).

    Rows after the checkpoint are dropped and redone, so a deterministic run (random, mock or
    replayed LLM agents) ends with exactly the rows an uninterrupted run would have written.
    The run goes on with the LLM settings it recorded (server, transport, rate limits,
    timeouts, concurrency, cassette, ``on_llm_error``). A resume that fails before its first
    step leaves the trace as it was.

    Args:
        path: The trace of the run.
        progress: Show a progress bar (None: see ``progress_enabled``).
        llm: Overrides any recorded LLM setting, and gives the API key, which is never
            recorded.
        open_run: Reads the trace into the returned run (default: ``TraceRun.open``).
        stacklevel: As for ``warnings.warn``, counted from the caller of this function: where
            a ``RunHealthWarning`` points.

    Returns:
        The finished run (as it was when it had nothing left to do).

    Raises:
        RunInterrupted: The LLM infrastructure stopped the run again.
        ConfigError: ``llm`` does not apply, an agent folder changed or is not found, or
            the code of a registered world or policy changed.
        TraceError: The trace or its checkpoints cannot be read.
    """
    from vivarium.trace.db import TraceDb

    p = Path(path)
    run = open_run(p)
    meta = run.metadata
    if is_complete(run):
        return run
    config = _anchor_agent_folders(p, _resume_config(p, meta, llm))
    _check_registered_code(p, config)
    autonomous = config.mode == "autonomous"
    # An autonomous run has no checkpoints (its agents' wake-ups and rate windows are not
    # saved): it is redone from the start, which on the virtual clock gives the same rows.
    start, checkpoint = (0, None) if autonomous else resume_point(p, meta["steps_done"])

    # Rows after the checkpoint go only when the first redone step is committed (for_resume),
    # and the engine (LLM server check included) is built first: a resume refused or failed
    # before its first step leaves the trace as it was.
    trace = TraceDb.for_resume(p, from_step=start)
    shared: dict[str, Any] = {}
    bar = None
    try:
        engine = build_engine(config, None, shared)
        if checkpoint is not None:
            engine.restore(
                checkpoint.step,
                checkpoint.state_hash,
                json.loads(checkpoint.world_state),
                json.loads(checkpoint.agent_states),
            )
        record_llm_settings(trace, llm_settings(config))  # what this resume used, for the next
        engine.trace_db = trace
        if progress_enabled(progress):
            bar = _progress_bar(config, f"{config.name} (resumed)", initial=start)
        _drive(engine, config, config.steps - start, bar)
    except RunInterrupted as exc:
        raise interrupted_error(exc, meta["run_id"], p) from None
    finally:
        if bar is not None:
            bar.close()
        _close_gateway(shared)
        _close_trace(trace)
    return warn_if_unhealthy(open_run(p), stacklevel=stacklevel + 1)


def _anchor_agent_folders(trace: Path, config: ExperimentConfig) -> ExperimentConfig:
    """The recorded config, with ``base_dir`` set to where its agent folders are found.

    A run records agent folders as written (``data/agents/alpha_2``), relative to the project
    (``from_file``'s ``base_dir``) or to the folder the run started in; neither folder is
    recorded, since a trace holds no absolute path (the same run gives the same bytes anywhere).
    So they are looked up from the folders a run is started in: the working directory and its
    parents, then the trace's folder and its parents. The first base from which every folder
    has the content recorded (``spec_digest``) is used; a notebook in ``notebooks/`` resumes a
    run made from the project root. None: a one-line ``ConfigError`` (changed, or not found).
    """
    from vivarium.workflow.config import resolve_agent_folder, spec_digest

    groups = [g for g in config.agents if g.agent] if isinstance(config.agents, list) else []
    if not groups:
        return config
    cwd, home = Path.cwd(), trace.resolve().parent
    given = [Path(config.base_dir)] if config.base_dir else []
    bases = list(dict.fromkeys([*given, cwd, *cwd.parents, home, *home.parents]))

    def holds(base: Path, group: Any) -> bool:
        folder = resolve_agent_folder(group.agent, base)
        digest = spec_digest(folder)
        return digest is not None and group.spec_digest in (None, digest)

    for base in bases:
        if all(holds(base, g) for g in groups):
            return config.model_copy(update={"base_dir": str(base)})
    for group in groups:
        if any(holds(base, group) for base in bases):
            continue
        if any(spec_digest(resolve_agent_folder(group.agent, b)) for b in bases):
            raise ConfigError(
                f"{trace}: agent folder {group.agent} has changed since the run was recorded; "
                "resuming would not reproduce it (restore the folder, or start a new run)"
            )
        raise ConfigError(
            f"{trace}: agent folder {group.agent} not found from {cwd} or {home} or their "
            "parents (resume from the folder the run was started in)"
        )
    raise ConfigError(  # each folder is found, but from different places
        f"{trace}: agent folders {', '.join(g.agent or '' for g in groups)} are not found "
        "together from one folder (resume from the folder the run was started in)"
    )


def _check_registered_code(trace: Path, config: ExperimentConfig) -> None:
    """Refuse, in one line, a resume whose code is not the code that made the run.

    A run of a registered factory records its code's digest (``code_digests``), and every run
    the digest of the package's worlds and policies (``CODE_META_KEY``); going on with other
    code would give steps of two different policies in one trace, under one run id.
    """
    from vivarium.build import CODE_META_KEY, changed_code, package_code_digest
    from vivarium.trace.db import read_meta

    what = changed_code(config.code_digests, config)
    recorded = read_meta(trace, CODE_META_KEY)
    if what is None and recorded is not None and recorded != package_code_digest():
        what = f"Vivarium's worlds and policies code ({recorded}; now {package_code_digest()})"
    if what is not None:
        raise ConfigError(
            f"{trace}: {what} has changed since the run was recorded; resuming would not "
            "reproduce it (restore its code, or start a new run)"
        )


def _resume_config(p: Path, meta: dict[str, Any], llm: dict[str, Any] | None) -> ExperimentConfig:
    """The recorded config, with the recorded LLM settings and then ``llm`` on top."""
    data = {**meta["config"], "run_id": meta["run_id"], "db": str(p)}
    given = dict(llm or {})
    recorded = recorded_llm_settings(p)
    if data.get("llm") is not None:
        data["llm"] = {**data["llm"], **recorded, **given}
    elif set(given) - {"api_key"}:  # a key from the environment is no request for LLM agents
        names = ", ".join(sorted(set(given) - {"api_key"}))
        raise ConfigError(
            f"resume {p}: run {meta['run_id']} has no LLM agents; {names} do not apply"
        )
    elif "max_concurrency" in recorded:  # the pace the run set for its async policies
        data["max_concurrency"] = recorded["max_concurrency"]
    return make_config(ExperimentConfig, data, where=f"resume {p}")


def interrupted_error(exc: RunInterrupted, run_id: str, path: Path) -> RunInterrupted:
    """The one line a user sees when the LLM infrastructure stopped a run.

    Args:
        exc: The interruption the engine raised (its step and reason).
        run_id: The run's id.
        path: The run's trace, which keeps every step before the one that failed.

    Returns:
        A ``RunInterrupted`` saying what stopped, where the trace is, and how to go on.
    """
    message = (
        f"run {run_id} interrupted: {exc.reason}; {kept_steps(exc.step, path)}; "
        f"{when_to_resume(exc.reason)}, resume with "
        f"Run.open({str(path)!r}).resume() or `vvm resume {path}`"
    )
    return RunInterrupted(message, step=exc.step, reason=exc.reason, run_id=run_id, path=str(path))


def kept_steps(step: int | None, path: str | os.PathLike[str]) -> str:
    """What an interrupted run kept: ``steps 0-4 are kept in PATH`` (``step``: the one it stopped)."""
    if not step:
        return f"the trace is {path}"
    return f"step 0 is kept in {path}" if step == 1 else f"steps 0-{step - 1} are kept in {path}"


def when_to_resume(reason: str) -> str:
    """When resuming an interrupted run can work: a wrong URL or model is not a server outage."""
    if "NotFoundError" in reason:  # no server coming back fixes a wrong path or model name
        return "once the URL (or model) is right (`--api-base` on resume)"
    return "once the server is back"


def health_warning(run: RunResult) -> str | None:
    """The one-line warning for a run that is not a clean result.

    Args:
        run: A run read from its trace.

    Returns:
        ``run <id> (<path>): <problems>``, or None when the run is a clean result.
    """
    health = run.health
    if health.ok:
        return None
    return f"run {run.run_id} ({run.path}): {health}"


def warn_if_unhealthy(run: R, *, stacklevel: int = 1) -> R:
    """Warn once (``RunHealthWarning``) when ``run`` is not a clean result.

    Args:
        run: A run read from its trace.
        stacklevel: As for ``warnings.warn``, counted from the caller of this function.

    Returns:
        ``run`` itself.
    """
    text = health_warning(run)
    if text is not None:
        warnings.warn(text, RunHealthWarning, stacklevel=stacklevel + 1)
    return run
