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
import functools
import inspect
import json
import os
import sqlite3
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from vivarium.errors import (
    ConfigError,
    ResumeDiverged,
    ResumedWarning,
    RunHealthWarning,
    RunInterrupted,
    TraceError,
)
from vivarium.experiment.config import LLM_TRANSPORT_FIELDS, ExperimentConfig, make_config
from vivarium.experiment.paths import default_trace_path, trace_path  # noqa: F401  (older imports)
from vivarium.settings import DEFAULT_RUNS_DIR
from vivarium.trace.resume import (
    is_complete,
    record_llm_settings,
    recorded_llm_settings,
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
    "health_warning",
    "interrupted_error",
    "llm_settings",
    "progress_enabled",
    "resume_run",
    "run_experiment",
    "transport_settings",
    "unfinished_steps",
    "warn_if_unhealthy",
]


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
F = TypeVar("F", bound=Callable[..., Any])


def identified(function: F) -> F:
    """Run ``function`` with the user code's identity taken once (``vivarium.experiment.digest``).

    The run id is asked for several times as a run starts (its path, its record, a resume's
    check): the code and the values it reads are digested once, as they are at the start.
    """
    counts_frames = "stacklevel" in inspect.signature(function).parameters

    @functools.wraps(function)
    def inner(*args: Any, **kwargs: Any) -> Any:
        from vivarium.experiment.digest import snapshot

        if counts_frames:  # this frame too, between the caller and the warning
            kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
        with snapshot():
            return function(*args, **kwargs)

    return inner  # type: ignore[return-value]


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
    fields = set(LLM_TRANSPORT_FIELDS) - {"api_key"}
    settings = config.llm.model_dump(include=fields)
    # The concurrency the run used, whichever place gave it (the run's own is not recorded
    # elsewhere), so a resume goes on at the same pace.
    settings["max_concurrency"] = config.decisions_in_flight
    return settings


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
    from vivarium.engine.engine import WorldEngine, WorldEngineConfig
    from vivarium.experiment.build import build_agents, build_world, recorded_seeds
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
            max_concurrency=c.decisions_in_flight,
            agent_timeout_s=c.llm_in_force.agent_timeout,
            agent_retries=c.llm_in_force.agent_retries,
            on_llm_error=c.llm_in_force.on_llm_error,
        ),
        agents,
        world,
        trace_db,
        metadata=meta,
        checkpoint_every=c.checkpoint_every,
        agent_seeds=recorded_seeds(shared["plan"], agents),
    )


def _record_code(trace: TraceDb) -> None:
    """Record which package code makes the run (``package_code_digest``), outside its id."""
    from vivarium.experiment.identity import CODE_META_KEY, package_code_digest

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
    from vivarium.gateways.base import ClosableGateway
    from vivarium.protocols import implements

    gateway = shared.get("gateway")
    if implements(gateway, ClosableGateway):
        gateway.close()


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


@identified
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
    there) is checked before the file is touched. An unfinished trace of this same run at the
    path (``unfinished_steps``: a notebook cell run again after Ctrl-C, ``vvm run`` again, a
    sweep again) is resumed instead of started over (``resume_run``: its committed steps are
    kept, and the result is the run's as if never stopped), with a ``ResumedWarning`` that says
    from which step and that ``overwrite=True`` starts over.

    Args:
        config: The experiment config.
        db: The trace file; None: the config's ``db``, else ``<folder>/<name>.sqlite``. See
            ``trace_path`` for when an existing trace is replaced.
        overwrite: Replace a trace of another run, or start this run over instead of
            resuming its unfinished trace.
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
        ResumeDiverged: The unfinished trace it resumed cannot be reproduced (nothing changed).
        TraceError: The trace path cannot be used.
        ConfigError: The config cannot be built into a run.
    """
    from vivarium.trace.db import TraceDb, check_new_trace_path

    path = trace_path(config, db, overwrite=overwrite, folder=folder, stacklevel=stacklevel + 1)
    check_new_trace_path(path)
    done = None if overwrite else unfinished_steps(path, config)
    begins = False
    if done is None and config.fork_of is not None:
        # A fork begins as its parent's steps before the fork, copied, and its state there;
        # from then on it is an unfinished run like any other, finished by a resume.
        copied = start_fork(config, path)
        if copied and is_complete(open_run(path)):
            return open_run(path)  # a fork that changes nothing: its finished parent, copied
        begins = not copied
    elif done is not None:
        # The same run, stopped (Ctrl-C, an outage, a killed process) after committing steps:
        # a cell run again goes on from there instead of throwing them away.
        warnings.warn(
            f"{path} holds this run ({config.resolved_run_id()}) stopped after {done} of "
            f"{config.steps} steps: resumed from step {done}, the committed steps kept; "
            "pass overwrite=True (vvm: --overwrite) to start it over",
            ResumedWarning,
            stacklevel=stacklevel + 1,
        )
    if done is not None or config.fork_of is not None:
        return resume_run(
            path,
            progress=progress,
            llm=transport_settings(config),
            open_run=open_run,
            stacklevel=stacklevel + 1,
            on_step=on_step,
            on_start=on_start,
            _fork_begins=begins,
        )
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


def unfinished_steps(path: Path, config: ExperimentConfig) -> int | None:
    """The steps committed by an unfinished trace of this very run at ``path``, if a resume can go on.

    That is a trace of this run id (same config, same code, same values it reads), made by
    this package code, of a schema a resume continues, not complete, and no process writing it (the
    caller checked: ``check_new_trace_path``). Anything else (no file, another run, an older
    schema or package) is not resumed: a run there starts over, as before. One that stopped
    before its first step resumes too (from step 0): its stop stays on record.

    Args:
        path: The trace path a run of ``config`` writes.
        config: The experiment config.

    Returns:
        The steps done, or None.
    """
    from vivarium.experiment.identity import CODE_META_KEY, package_code_digest
    from vivarium.seeding import canonical_json
    from vivarium.trace.db import TraceDb, read_meta, schema_version
    from vivarium.trace.schema import RESUMABLE_VERSIONS

    try:
        if not path.is_file() or schema_version(path) not in RESUMABLE_VERSIONS:
            return None
        con = TraceDb.connect_readonly(path)
        try:
            row = con.execute("SELECT run_id, status, steps_done, config_json FROM runs").fetchone()
        finally:
            con.close()
        code = read_meta(path, CODE_META_KEY)
    except (sqlite3.Error, TraceError, OSError):
        return None
    if row is None or row[0] != config.resolved_run_id() or row[1] == "complete":
        return None
    if config.run_id and row[3] != canonical_json(config.identity()):
        return None  # a run id given by hand, with another config: not this run
    if code is not None and code != package_code_digest():
        return None
    return int(row[2])


def transport_settings(config: ExperimentConfig) -> dict[str, Any] | None:
    """How ``config`` makes its LLM calls, as a resume takes them (``llm=``); the API key too.

    None for a run without LLM agents.
    """
    if config.llm is None:
        return None
    settings = llm_settings(config) or {}
    settings["api_key"] = config.llm.api_key
    return {k: v for k, v in settings.items() if v is not None}


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


@identified
def resume_run(
    path: str | os.PathLike[str],
    *,
    progress: bool | None = None,
    llm: dict[str, Any] | None = None,
    open_run: Callable[[Path], R] = _open_trace_run,
    stacklevel: int = 1,
    on_step: Callable[[int, Any], None] | None = None,
    on_start: Callable[[Any], None] | None = None,
    _fork_begins: bool = False,
) -> R:
    """Finish an interrupted run in place: its trace ends as if the run had never stopped.

    The property (tested over worlds, policies, schedulings, stop points and checkpoint
    settings in ``tests/test_resume_property.py``): interrupting a run at any step, by any
    means (Ctrl-C, SIGTERM, an LLM outage, a killed process), and resuming it gives exactly the
    tables of the run never interrupted: decisions, state hashes, messages, reporters, LLM
    calls, transitions, checkpoints. How:

    1. The engine is built again and the latest checkpoint whose world and agent states can be
       restored is restored (none: the run's start). Checkpoints only save time.
    2. The steps committed after it are re-executed without writing (the trace has them), each
       checked against its recorded state hash; their LLM calls are answered from the trace's
       own ``llm_calls`` (``vivarium.gateways.recorded``), so a model that samples, or a
       server that is down, changes nothing. A re-executed step that differs from the record
       means the run cannot be reproduced from its inputs: ``ResumeDiverged`` (what differs,
       at which step, and how to start over), the trace left as it was. (A checkpoint that did
       not hold all the state, say a policy of one's own with a generator but no
       ``get_state``, shows up there too: the resume then re-executes from the start.)
    3. The run goes on from its first step not committed, writing, with the LLM settings it
       recorded (server, transport, rate limits, timeouts, concurrency, cassette,
       ``on_llm_error``). Nothing committed is dropped.

    Each stop is recorded in the trace's ``interruptions`` table (when, at which step, why,
    and the decisions and LLM call attempts of the unfinished step it discarded); a process
    killed outright is recorded when its resume finds the trace still ``running``. A resume
    that fails before its first step leaves every other table as it was. An autonomous run
    on the virtual clock resumes the same way (its wake-ups are re-executed); one on the real
    clock cannot be reproduced, and is redone from its start.

    Args:
        path: The trace of the run.
        progress: Show a progress bar (None: see ``progress_enabled``).
        llm: Overrides any recorded LLM setting, and gives the API key, which is never
            recorded.
        open_run: Reads the trace into the returned run (default: ``TraceRun.open``).
        stacklevel: As for ``warnings.warn``, counted from the caller of this function: where
            a ``RunHealthWarning`` points.
        on_step: Called after each step with the step and its record (re-executed ones too).
        on_start: Called with the engine once it is built, before the first step.
        _fork_begins: The trace is a fork's, just written (``start_fork``): its ``running``
            status is its start, not a killed process.

    Returns:
        The finished run (as it was when it had nothing left to do).

    Raises:
        RunInterrupted: The LLM infrastructure stopped the run again.
        ResumeDiverged: A committed step re-executed to another state (nothing is changed).
        ConfigError: ``llm`` does not apply, an agent folder changed or is not found, or
            the code of a registered world or policy changed.
        TraceError: The trace or its checkpoints cannot be read, or another process writes it.
    """
    from vivarium.engine.deciding import RunAborted
    from vivarium.engine.reporters import check_resumed
    from vivarium.trace.db import TraceDb

    p = Path(path)
    run = open_run(p)
    meta = run.metadata
    if is_complete(run):
        return run
    config = _anchor_agent_folders(p, _resume_config(p, meta, llm))
    # What this resume records for the next: the settings as the run gave them (a cassette
    # found from another folder stays the relative path it was).
    settings = llm_settings(config)
    if "cache" not in (llm or {}):
        config = _anchor_cassette(p, config)
    _check_registered_code(p, config)
    done = int(meta["steps_done"])
    # A real clock cannot be re-executed: such a run is redone from its start, as always.
    redo = config.mode == "autonomous" and config.autonomous.clock == "real"
    # Taking the writer's lock first refuses a second process while the first still writes;
    # rows and status change only with the first step committed (for_resume), so a resume
    # refused or failed before it leaves the trace as it was.
    trace = TraceDb.for_resume(p, from_step=0 if redo else done)
    shared: dict[str, Any] = {}
    bar = None
    phase = "build"
    # Left running: the writer's lock was free, so its process was killed (unless the file
    # is a fork's, just made, which begins so).
    killed = [meta["status"] == "running" and not _fork_begins]
    try:
        if redo:
            engine = build_engine(config, None, shared)
            engine._run_started = True  # the run record is there: kept, not written again
            start = 0
        else:
            phase = "replay"  # from here a stop is one of the resume: recorded as such
            engine, start = _rebuilt(config, p, done, shared, trace)
        check_resumed(trace, engine.reporters)
        if on_start is not None:
            on_start(engine)
        if progress_enabled(progress):
            bar = _progress_bar(config, f"{config.name} (resumed)", initial=start)
        phase = "replay"
        if config.mode != "autonomous" and engine.replaying:
            # The committed steps, re-executed without writing (a divergence leaves nothing).
            try:
                engine.run(done - start, progress=bar, on_step=on_step, finish=False)
            except (ResumeDiverged, RunAborted):
                if start == first_own_step(config):
                    raise
                # Restored from a checkpoint that held less than the run's state (a
                # snapshot() that leaves something out): it vouched for the step after it,
                # not for the ones the forgotten state decides. From the run's start, the run
                # is re-executed from its inputs alone; only a divergence there refuses it.
                _discard(shared)
                engine, start = _rebuilt(config, p, done, shared, trace, checkpoints=False)
                if on_start is not None:
                    on_start(engine)
                if bar is not None:
                    bar.reset(total=bar.total)
                engine.run(done - start, progress=bar, on_step=on_step, finish=False)
        _note_killed(trace, killed, done)
        record_llm_settings(trace, settings)  # what this resume used, for the next
        engine.trace_db = trace
        phase = "live"
        _drive(engine, config, config.steps - done, bar, on_step)
    except ResumeDiverged as exc:
        raise ResumeDiverged(_refusal(p, meta, exc), step=exc.step, record=exc.record) from None
    except RunAborted as exc:
        if phase != "replay":
            raise
        raise ResumeDiverged(_refusal(p, meta, exc), step=done) from None
    except RunInterrupted as exc:
        if phase == "replay":  # a call not on record failed while re-executing
            _note_killed(trace, killed, done)
            trace.record_interruption(step=done, ended="interrupted", reason=exc.reason)
            exc.step = done  # what is kept: every committed step
        raise interrupted_error(exc, meta["run_id"], p) from None
    except KeyboardInterrupt as exc:
        if phase == "replay":  # the engine records a stop once it writes; not before
            _note_killed(trace, killed, done)
            trace.record_interruption(
                step=done, ended="interrupted", reason=f"KeyboardInterrupt: {exc}"
            )
        raise
    finally:
        if bar is not None:
            bar.close()
        _discard(shared)
        _close_trace(trace)
    return warn_if_unhealthy(open_run(p), stacklevel=stacklevel + 1)


_KILLED = "its process ended without recording how (killed, or its machine stopped)"


def _note_killed(trace: TraceDb, killed: list[bool], done: int) -> None:
    """Record, once, that the run's last process was killed (its trace was left ``running``).

    Its writer's lock was free (``for_resume`` took it), so no process writes it any more.
    Noted when the resume gets past re-executing, or stops while at it (a refused resume
    changes nothing). ``killed`` holds whether it is still to be noted.
    """
    if killed and killed.pop():
        trace.record_interruption(step=done, ended="killed", reason=_KILLED)


def _rebuilt(
    config: ExperimentConfig,
    path: Path,
    done: int,
    shared: dict[str, Any],
    trace: TraceDb,
    *,
    checkpoints: bool = True,
) -> tuple[WorldEngine, int]:
    """The engine, restored from the latest usable checkpoint, set to re-execute to ``done``.

    A checkpoint is used when its world state and every agent's state can be restored, and
    when at least one committed step after it can check it: re-executing that step must give
    its recorded hash (a policy with state it does not save would not). One that fails is
    dropped for the run's start. The engine writes nothing until ``end_replay``.

    Returns:
        The engine and the first step it re-executes.

    Raises:
        ResumeDiverged: Re-executing from the start differs from the record.
    """
    from vivarium.engine.deciding import RunAborted
    from vivarium.gateways.recorded import RecordedCalls
    from vivarium.trace.resume import recorded_calls, recorded_hashes, usable_checkpoints

    # A fork starts from its fork's checkpoint, not from step 0: the steps before it are its
    # parent's, made under the parent's config (``start_fork``).
    first = first_own_step(config)
    found = usable_checkpoints(path, done) if checkpoints or first else []
    candidates: list[Any] = []
    if checkpoints:  # (without: from the run's start, a checkpoint having failed its steps)
        candidates = [c for c in found if first - 1 < c.step < done - 1][:1]
    base = None
    if first:
        base = next((c for c in found if c.step == first - 1), None)
        if base is None:
            raise TraceError(
                f"{path}: the state this fork started from (its checkpoint after step "
                f"{first - 1}) is missing; fork its parent again"
            )
    candidates.append(base)
    for checkpoint in candidates:
        engine = build_engine(config, None, shared)
        engine.trace_db = trace
        engine._run_started = True  # the run record is there: kept, not written again
        start = 0
        if checkpoint is not None:
            if not _restore(engine, checkpoint):
                _discard(shared)
                if checkpoint is base:
                    raise ConfigError(
                        f"{path}: this fork's world or policies cannot take the state it "
                        f"started from (after step {first - 1})"
                    )
                continue
            start = checkpoint.step + 1
        # The calls are read from the trace as the re-execution reaches their steps.
        shared["recorded_calls"] = calls = RecordedCalls(recorded_calls(path, start, done))
        engine.replay_recorded(recorded_hashes(path, start, done), calls)
        if checkpoint is base or config.mode == "autonomous":
            return engine, start
        try:  # the first step after the checkpoint vouches for it
            engine.run(1, finish=False)
        except (ResumeDiverged, RunAborted):
            _discard(shared)
            continue
        return engine, start + 1
    raise AssertionError("unreachable: the run's start is always a candidate")


# -- forks ------------------------------------------------------------------------------------
def first_own_step(config: ExperimentConfig) -> int:
    """The first step a run makes under its own config: a fork's step, else 0."""
    fork = config.fork_of
    if fork is None or config.resolved_run_id() == fork.run_id:
        return 0  # no fork, or one that changes nothing: the parent's run itself
    return fork.step


def fork_base(parent: str | os.PathLike[str], at_step: int) -> ExperimentConfig:
    """The config of a fork of the run at ``parent`` at ``at_step``, before its changes.

    The parent's recorded config (its options given as objects taken back from this process,
    its agent folders found from its trace's folder), its run id and db left out, and
    ``fork_of`` naming the parent, the step and where its trace is.

    Raises:
        ConfigError: ``at_step`` is not a step from 0 to the steps the parent committed.
    """
    from vivarium.experiment.config import ForkOrigin

    p = Path(parent)
    meta = _open_trace_run(p).metadata
    done = int(meta["steps_done"])
    if isinstance(at_step, bool) or not isinstance(at_step, int) or not 0 <= at_step <= done:
        raise ConfigError(
            f"fork {p}: at_step must be a step from 0 to {done} (the steps it committed), "
            f"not {at_step!r}"
        )
    recorded = _anchor_agent_folders(p, _resume_config(p, meta, None))
    data = recorded.model_dump()
    data.update(run_id=None, db=None)
    data["fork_of"] = ForkOrigin(
        run_id=meta["run_id"],
        step=at_step,
        trace=str(p.resolve()),  # wherever the fork runs from (a sweep's worker, a notebook)
        parent_fork=meta["config"].get("fork_of"),
    ).model_dump()
    return make_config(ExperimentConfig, data, where=f"fork {p}")


def fork_trace_path(parent: str | os.PathLike[str], config: ExperimentConfig) -> Path:
    """Where a fork's trace goes by default: beside its parent's, named by step and run id."""
    p = Path(parent)
    fork = config.fork_of
    step = 0 if fork is None else fork.step
    return p.with_name(f"{p.stem}.fork{step}.{config.resolved_run_id()[-8:]}.sqlite")


def start_fork(config: ExperimentConfig, path: Path) -> bool:
    """Write the file a fork begins as at ``path`` (``vivarium.trace.fork_file``).

    The parent's steps before the fork step ``t`` are copied, never run again; its state
    after step ``t - 1`` is rebuilt as a resume rebuilds a run's (the parent's engine,
    restored from its latest usable checkpoint, re-executes its committed steps without
    writing, every LLM call answered from its trace, every step checked against its state
    hash), then handed to the child's engine, built from the child's config. An agent whose
    policy class the fork changed starts its new policy fresh; every other state (the world,
    the agents' memories, their generators) goes on from the parent's. A fork that changes
    nothing (its config is its parent's, so its run id too) is its parent, copied.

    Returns:
        True for a fork that changes nothing (the parent's file was copied as it is).

    Raises:
        ConfigError: The parent cannot be found or forked at that step, or the child cannot
            take its state (one line).
    """
    from vivarium.trace.db import recorded_run_id
    from vivarium.trace.fork_file import ForkState, write_fork_file

    fork = config.fork_of
    assert fork is not None
    where = f"fork of {fork.run_id} at step {fork.step}"
    if fork.trace is None:
        raise ConfigError(f"{where}: fork_of.trace, where the parent's trace is, is not given")
    parent = Path(fork.trace)
    try:
        held = recorded_run_id(parent) if parent.is_file() else None
    except TraceError:
        held = None
    if held != fork.run_id:
        found = "no file" if not parent.is_file() else f"run {held}"
        raise ConfigError(f"{where}: {parent} holds {found}, not the parent run")
    if parent.resolve() == path.resolve():
        raise ConfigError(f"{where}: the fork would replace its parent {parent}; give it a db")
    run = _open_trace_run(parent)
    meta = run.metadata
    done = int(meta["steps_done"])
    if fork.step > done:
        raise ConfigError(f"{where}: {parent} has {done} steps committed; fork at 0 to {done}")
    if fork.step > config.steps:
        raise ConfigError(f"{where}: the fork runs {config.steps} steps, fewer than its fork step")
    if config.resolved_run_id() == fork.run_id:
        from vivarium.trace.fork_file import copy_trace

        copy_trace(parent, path)
        return True
    state = None
    shared: dict[str, Any] = {}
    try:
        child = build_engine(config, None, shared)
        if fork.step:
            state = _fork_state(config, parent, meta, child, where)
        meta_rows = _fork_meta(config, child)
        from vivarium.engine.interrupts import interrupts_deferred

        with interrupts_deferred():
            write_fork_file(
                parent,
                path,
                at_step=fork.step,
                meta=child.metadata,
                agents=child.agent_rows(),
                state=state if state is None else ForkState(*state),
                created=None if config.deterministic_timestamps else _now(),
                meta_rows=meta_rows,
            )
    finally:
        _discard(shared)
    return False


def _fork_state(
    config: ExperimentConfig, parent: Path, meta: dict[str, Any], child: WorldEngine, where: str
) -> tuple[int, str, str, str]:
    """The parent's state after the step before the fork, as the child's checkpoint holds it."""
    from vivarium.seeding import canonical_json
    from vivarium.trace.resume import Checkpoint

    fork = config.fork_of
    assert fork is not None
    parent, meta = _state_source(parent, meta, fork.step, where)
    pconfig = _anchor_cassette(
        parent, _anchor_agent_folders(parent, _resume_config(parent, meta, None))
    )
    if pconfig.mode == "autonomous":
        raise ConfigError(f"{where}: an autonomous run is forked at step 0 only")
    _check_registered_code(parent, pconfig)
    shared: dict[str, Any] = {}
    try:
        # Built as a resume builds it (its checkpoints used); checked before any step runs.
        engine, start = _rebuilt(pconfig, parent, fork.step, shared, None)  # type: ignore[arg-type]
        if not engine.world_capabilities.checkpoints:
            raise ConfigError(
                f"{where}: world {type(engine.world).__name__} cannot save its state "
                "(snapshot()/restore()), which a fork after step 0 starts from; fork at step 0, "
                "or give the world both methods"
            )
        if engine.agent_ids != child.agent_ids:
            raise ConfigError(
                f"{where}: a fork keeps its parent's agents ({len(engine.agent_ids)}: "
                f"{_few(engine.agent_ids)}), not {len(child.agent_ids)} ({_few(child.agent_ids)})"
            )
        engine.run(fork.step - start, finish=False)
        saved = engine.checkpoint_state()
        handed = Checkpoint(
            fork.step - 1,
            engine.state_hash,
            canonical_json(saved["world"]),
            canonical_json(saved["agents"]),
        )
        agents = saved["agents"]
        reseeded = pconfig.seed != config.seed
        for idx, agent_id in enumerate(child.agent_ids):
            if reseeded or type(child.policies[idx]) is not type(engine.policies[idx]):
                # A policy the fork changed, or every policy of a fork to another seed, starts
                # as the child built it (for the built-ins: a generator from the child's seed);
                # the agent's own state (its memory) goes on.
                fresh = child.capabilities[idx].stateful
                agents[agent_id]["policy"] = child.policies[idx].get_state() if fresh else None
        state = (
            fork.step - 1,
            engine.state_hash,
            canonical_json(saved["world"]),
            canonical_json(agents),
        )
    except ResumeDiverged as exc:
        raise ConfigError(
            f"{where}: the parent cannot be re-executed to its state: {exc}"
        ) from None
    finally:
        _discard(shared)
    if int(meta["steps_done"]) > fork.step:
        _vouch(pconfig, parent, handed, where)
    if not _restore(child, Checkpoint(*state)):
        raise ConfigError(
            f"{where}: the fork's world or policies cannot take the parent's state after step "
            f"{fork.step - 1} (a world or policy the fork changed saves another kind of state)"
        )
    return state


def _vouch(config: ExperimentConfig, parent: Path, state: Any, where: str) -> None:
    """Check that ``state`` is all of the parent's: restored, it makes the parent's next step.

    A world or policy that keeps state its ``snapshot()`` or ``get_state()`` leaves out (a
    generator of its own) would hand a fork less than the parent had, and the fork would go on
    from another state than its parent's without a word. As a resume checks a checkpoint, the
    parent is built again from the state alone and its next step re-executed (its calls
    answered from its trace) against the state hash it recorded.

    Raises:
        ConfigError: The step comes out otherwise (one line).
    """
    from vivarium.engine.deciding import RunAborted
    from vivarium.gateways.recorded import RecordedCalls
    from vivarium.trace.resume import recorded_calls, recorded_hashes

    step = state.step + 1
    shared: dict[str, Any] = {}
    try:
        engine = build_engine(config, None, shared)
        if not _restore(engine, state):
            raise ResumeDiverged("its state cannot be restored", step=step)
        shared["recorded_calls"] = calls = RecordedCalls(recorded_calls(parent, step, step + 1))
        engine.replay_recorded(recorded_hashes(parent, step, step + 1), calls)
        engine.run(1, finish=False)
    except (ResumeDiverged, RunAborted):
        raise ConfigError(
            f"{where}: the parent's state after step {step - 1} does not make its step {step} "
            "again: its world or a policy keeps state that snapshot()/get_state() leaves out "
            "(a generator of its own); save all of it, or fork at step 0"
        ) from None
    finally:
        _discard(shared)


def _state_source(
    parent: Path, meta: dict[str, Any], step: int, where: str
) -> tuple[Path, dict[str, Any]]:
    """The run whose config made the parent's state after ``step - 1``.

    The parent, or the ancestor whose steps it copied: a fork of a fork at a step before the
    first fork's starts from the grandparent's run, made under the grandparent's config.

    Raises:
        ConfigError: That ancestor's trace is no longer where its fork recorded it.
    """
    while True:
        fork = meta["config"].get("fork_of")
        if not isinstance(fork, dict) or int(fork["step"]) <= step:
            return parent, meta
        found = _fork_parent(parent)
        above = Path(found) if found is not None else None
        if above is None or not above.is_file():
            raise ConfigError(
                f"{where}: the steps before {step} are those of {fork['run_id']}, whose trace "
                f"is not at {found or 'the path its fork recorded'}; fork at step "
                f"{fork['step']} or later, or put it back"
            )
        parent, meta = above, _open_trace_run(above).metadata


def _fork_parent(path: Path) -> str | None:
    """Where the fork at ``path`` found its parent's trace (None: not recorded)."""
    from vivarium.trace.db import read_meta
    from vivarium.trace.fork_file import FORK_PARENT_META_KEY

    reference = read_meta(path, FORK_PARENT_META_KEY)
    if reference is None:
        return None
    parent = Path(reference)
    return str(parent if parent.is_absolute() else path.resolve().parent / parent)


def _few(ids: list[str]) -> str:
    return ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else "")


def _fork_meta(config: ExperimentConfig, child: WorldEngine) -> dict[str, str | None]:
    """The meta a fork records as any run does: its code, its reporters, its LLM settings.

    None removes a key the parent's file had (a fork without the parent's LLM agents).
    """
    from vivarium.engine.reporters import REPORTERS_META_KEY
    from vivarium.experiment.identity import CODE_META_KEY, package_code_digest
    from vivarium.seeding import canonical_json
    from vivarium.trace.resume import LLM_SETTINGS_KEY

    settings = llm_settings(config)
    rows: dict[str, str | None] = {
        CODE_META_KEY: package_code_digest(),
        LLM_SETTINGS_KEY: None if settings is None else canonical_json(settings),
    }
    if child.reporters is not None:
        rows[REPORTERS_META_KEY] = canonical_json(child.reporters.names())
    return rows


def _now() -> str:
    from vivarium.trace.db import now_iso

    return now_iso()


def _discard(shared: dict[str, Any]) -> None:
    """Let go of what a resume's engine held: its gateway stack, its reading of the calls."""
    _close_gateway(shared)
    calls = shared.pop("recorded_calls", None)
    if calls is not None:
        calls.close()
    shared.clear()


def _restore(engine: WorldEngine, checkpoint: Any) -> bool:
    """Restore ``checkpoint`` into ``engine``; False when it does not hold every state."""
    world = json.loads(checkpoint.world_state)
    agents = json.loads(checkpoint.agent_states)
    if world is None or not engine.world_capabilities.checkpoints or not isinstance(agents, dict):
        return False  # a world saved empty (before such worlds were refused): never trusted
    for idx, agent_id in enumerate(engine.agent_ids):
        saved = agents.get(agent_id)
        if not isinstance(saved, dict):
            return False
        if engine.capabilities[idx].stateful and saved.get("policy") is None:
            return False
    try:
        engine.restore(checkpoint.step, checkpoint.state_hash, world, agents)
    except (ConfigError, TypeError, ValueError, KeyError):
        return False
    return True


def _refusal(path: Path, meta: dict[str, Any], exc: Exception) -> str:
    """The one line of a refused resume: what differs, where, and how to start over."""
    from vivarium.trace.resume import step_difference

    record = getattr(exc, "record", None)
    what = step_difference(path, record) if record is not None else str(exc)
    return (
        f"resume {path}: refused: {what}; run {meta['run_id']} is not reproducible from its "
        "inputs (its code, or data it reads, changed, or it draws randomness it does not "
        "own), so going on would join two different runs; the trace is left as it was: "
        "start it over with overwrite=True (vvm run --overwrite)"
    )


def _anchor_agent_folders(trace: Path, config: ExperimentConfig) -> ExperimentConfig:
    """The recorded config, with ``base_dir`` set to where its agent folders are found.

    Declared input files (``input_files``) are looked up the same way, with their recorded
    content; a base that has the folders but not the files still anchors the folders.

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
    inputs = [f for f in config.input_files if not Path(f).is_absolute()]
    if not groups and not inputs:
        return config
    bases = _bases(trace, config)

    def holds(base: Path, group: Any) -> bool:
        folder = resolve_agent_folder(group.agent, base)
        digest = spec_digest(folder)
        return digest is not None and group.spec_digest in (None, digest)

    def has(base: Path, given: str) -> bool:  # a declared input file, with its recorded content
        from vivarium.experiment.digest import digest_files

        target = base / given
        if not target.exists():
            return False
        now = digest_files([str(target)], None)[str(target)]
        return config.input_digests.get(given) in (None, now)

    # Input files are found as agent folders are (``input_files`` too are relative to where
    # the run started); a base with the folders but not the files still anchors the folders,
    # and the files' own check then says what is wrong with them.
    for files in (inputs, []):
        for base in bases:
            if all(holds(base, g) for g in groups) and all(has(base, f) for f in files):
                return config.model_copy(update={"base_dir": str(base)})
        if not groups:
            return config
    for group in groups:
        if any(holds(base, group) for base in bases):
            continue
        if any(spec_digest(resolve_agent_folder(group.agent, b)) for b in bases):
            raise ConfigError(
                f"{trace}: agent folder {group.agent} has changed since the run was recorded; "
                "resuming would not reproduce it (restore the folder, or start a new run)"
            )
        raise ConfigError(
            f"{trace}: agent folder {group.agent} not found from {Path.cwd()} or "
            f"{trace.resolve().parent} or their parents (resume from the folder the run was "
            "started in)"
        )
    raise ConfigError(  # each folder is found, but from different places
        f"{trace}: agent folders {', '.join(g.agent or '' for g in groups)} are not found "
        "together from one folder (resume from the folder the run was started in)"
    )


def _bases(trace: Path, config: ExperimentConfig) -> list[Path]:
    """Where a run's relative paths may start from: where a resume looks them up, in order.

    The config's ``base_dir``, the working directory and its parents, then the trace's folder
    and its parents (a notebook in ``notebooks/`` resumes a run made from the project root).
    """
    cwd, home = Path.cwd(), trace.resolve().parent
    given = [Path(config.base_dir)] if config.base_dir else []
    return list(dict.fromkeys([*given, cwd, *cwd.parents, home, *home.parents]))


def _anchor_cassette(trace: Path, config: ExperimentConfig) -> ExperimentConfig:
    """The config with its cassette (``llm.cache``) found where the run left it.

    A cassette given by a relative path is relative to the folder the run started in, which
    no trace records. Resumed from another folder (a notebook in ``notebooks/``), the path
    would name a new, empty cassette there: in ``auto`` mode the rest of the run's replies
    would go into it and the run's own cassette would never hold them. So, when the path does
    not name a file from here, it is looked up as agent folders are (``_bases``) and the first
    cassette found is used; none found: the path as it is (a run that never called the LLM
    before it stopped made none).
    """
    llm = config.llm
    if llm is None or not llm.cache:
        return config
    given = Path(llm.cache).expanduser()
    if given.is_absolute() or given.exists():
        return config
    for base in _bases(trace, config):
        if (base / given).is_file():
            found = llm.model_copy(update={"cache": str(base / given)})
            return config.model_copy(update={"llm": found})
    return config


def _check_registered_code(trace: Path, config: ExperimentConfig) -> None:
    """Refuse, in one line, a resume whose code is not the code that made the run.

    A run of a registered factory records its code's digest (``code_digests``), and every run
    the digest of the package's worlds and policies (``CODE_META_KEY``); going on with other
    code would give steps of two different policies in one trace, under one run id.
    """
    from vivarium.experiment.identity import CODE_META_KEY, changed_code, package_code_digest
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
    """The recorded config, with the recorded LLM settings and then ``llm`` on top.

    The pace the run recorded (``max_concurrency``, with its LLM settings or alone), or the
    one ``llm`` gives, becomes the run's own ``max_concurrency``, read as every run reads it
    (``ExperimentConfig.decisions_in_flight``), with or without LLM agents. Options the run
    was given as Python objects are given back from this process
    (``vivarium.experiment.config.restore_option_objects``; one line where it does not have them).
    """
    from vivarium.experiment.config import restore_option_objects

    data = restore_option_objects(dict(meta["config"]), f"resume {p}")
    data.update(run_id=meta["run_id"], db=str(p))
    if isinstance(data.get("fork_of"), dict):  # where its parent is: recorded beside the run
        data["fork_of"] = {**data["fork_of"], "trace": _fork_parent(p)}
    given = dict(llm or {})
    recorded = recorded_llm_settings(p)
    pace = recorded.pop("max_concurrency", None)
    if given.get("max_concurrency") is not None:
        pace = given["max_concurrency"]
    given.pop("max_concurrency", None)
    if pace is not None:
        data["max_concurrency"] = pace
    if data.get("llm") is not None:
        _check_same_llm(p, data["llm"], given)
        data["llm"] = {**data["llm"], **recorded, **given}
    elif set(given) - {"api_key"}:  # a key from the environment is no request for LLM agents
        names = ", ".join(sorted(set(given) - {"api_key"}))
        raise ConfigError(
            f"resume {p}: run {meta['run_id']} has no LLM agents; {names} do not apply"
        )
    return make_config(ExperimentConfig, data, where=f"resume {p}")


# LLM settings a resume may change though they are in the run's identity: how hard a failed
# call or decision is tried again (``vvm resume --num-retries --agent-timeout --agent-retries``).
RESUME_LLM_FIELDS = frozenset({"num_retries", "agent_timeout", "agent_retries"})


def _check_same_llm(p: Path, recorded: dict[str, Any], given: dict[str, Any]) -> None:
    """Refuse, in one line, a resume asked to change what the model answers.

    The model, the mock, the temperature, the system prompt, ... are part of what the run is
    (its id derives from them): the committed steps were answered under the recorded ones,
    and the steps after them under others would join two runs under one id. A resume takes
    the settings of how calls are made (the server, the key, timeouts, the cassette) and
    ``RESUME_LLM_FIELDS``; a value equal to the recorded one is no change.

    Raises:
        ConfigError: A given setting of the run's identity differs from the recorded one.
    """
    from vivarium.experiment.config import LLMConfig

    asked = {k: v for k, v in given.items() if k not in LLM_TRANSPORT_FIELDS | RESUME_LLM_FIELDS}
    if not asked:
        return
    try:
        before = LLMConfig.model_validate(recorded).identity()
        after = LLMConfig.model_validate({**recorded, **asked}).identity()
    except Exception:  # a bad value: the config's validation says which, in one line
        return
    for key in sorted(asked):
        if key in after and before.get(key) != after[key]:
            raise ConfigError(
                f"resume {p}: llm.{key} is part of what the run is, not of how its calls are "
                f"made: its committed steps were answered with {key}={before.get(key)!r}, and "
                f"going on with {after[key]!r} would join two runs under one id; resume "
                f"without it, or start a new run with it (Experiment(..., llm={{{key!r}: ...}}))"
            )


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
