"""The public face: ``Experiment`` runs a config, ``Run`` reads its trace as frames."""

from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vivarium.config import LLM_TRANSPORT_FIELDS, ExperimentConfig, load_config_data, make_config
from vivarium.errors import (
    ConfigError,
    RunHealthWarning,
    RunInterrupted,
    TraceError,
    TracePathWarning,
)
from vivarium.trace.views import FrameViews

if TYPE_CHECKING:
    from vivarium.engine.engine import WorldEngine
    from vivarium.trace.db import TraceDb
    from vivarium.trace.health import RunHealth

DEFAULT_RUNS_DIR = Path("runs")


def _agent_paths_exist(data: dict[str, Any], base: Path) -> bool:
    groups = data.get("agents")
    if not isinstance(groups, list):
        return False
    folders = [
        g["agent"] for g in groups if isinstance(g, dict) and isinstance(g.get("agent"), str)
    ]

    return bool(folders) and all((base / f).exists() for f in folders)


def _progress_enabled(progress: bool | None) -> bool:

    if progress is not None:
        return progress
    return os.environ.get("VIVARIUM_PROGRESS", "1").lower() not in {"0", "false", "no", "off"}


class Experiment:
    """A configured experiment: ``Experiment(agents=5, steps=100, seed=42).run()``."""

    def __init__(self, config: ExperimentConfig | None = None, /, **fields: Any) -> None:
        if config is not None and fields:
            merged = {**config.model_dump(), **fields}
            self.config = make_config(ExperimentConfig, merged)
        elif config is not None:
            self.config = config
        else:
            self.config = make_config(ExperimentConfig, fields)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **overrides: Any) -> Experiment:
        """Load a YAML/JSON config; relative agent folders resolve next to the file (or cwd).

        ``overrides`` replace the file's fields; an ``llm`` or ``autonomous`` mapping replaces
        only the fields it names within that section.
        """
        data = load_config_data(path)
        if "sweep" in data:  # a sweep config runs here as its base experiment
            from vivarium.sweep import split_sweep_section

            data, _settings = split_sweep_section(data, where=str(path))
        merged = {**data, **overrides}
        for key in ("llm", "autonomous"):
            # ``llm={"mock": True}`` (or ``vvm run --mock-llm``) sets those fields of the file's
            # section and keeps the others (its temperature, its pacing) instead of dropping them.
            given, section = overrides.get(key), data.get(key)
            if isinstance(given, dict) and isinstance(section, dict):
                merged[key] = {**section, **given}
        data = merged
        project = Path(path).resolve().parent

        # A config in <project>/data/experiments/ names agents as data/agents/...: look from
        # the folder that makes such paths exist (the config's, or a parent of it).
        for base in (project, *project.parents):
            if _agent_paths_exist(data, base):
                data.setdefault("base_dir", str(base))
                break
        return cls(make_config(ExperimentConfig, data, where=str(path)))

    def __repr__(self) -> str:
        c = self.config
        return (
            f"Experiment(name={c.name!r}, world={c.world!r}, policy={c.policy!r}, "
            f"agents={c.agent_count}, steps={c.steps}, seed={c.seed})"
        )

    @property
    def run_id(self) -> str:
        return self.config.resolved_run_id()

    def sweep(
        self,
        configs: list[Any] | None = None,
        *,
        folder: str | os.PathLike[str] | None = None,
        backend: str = "local",
        max_workers: int | None = None,
        ray_address: str | None = None,
        sweep_seed: int | None = None,
        replications: int | None = None,
        progress: bool | None = None,
        **grid: Any,
    ) -> Any:
        """Run this experiment over a grid (``seed=range(10), agents=[5, 50]``) or configs.

        Every run gets its own trace under one sweep folder with an index; the returned
        ``Sweep`` has the merged frames with the parameter columns added (see vivarium.sweep).
        Nested fields use ``__`` in keyword names: ``llm__temperature=[0, 0.7]``. Runs without a
        ``seed`` axis get seeds derived from ``sweep_seed`` (default: this experiment's seed),
        each run's parameters and its replication. Every run failed: ``SweepFailed``; some
        failed or fell back: a ``SweepWarning`` with the count and the first error.
        """
        from vivarium.sweep import run_sweep

        values = {key.replace("__", "."): list(v) for key, v in grid.items()}
        return run_sweep(
            self,
            values or None,
            configs,
            folder=folder,
            backend=backend,  # type: ignore[arg-type]
            max_workers=max_workers,
            ray_address=ray_address,
            seed=sweep_seed,
            replications=replications,
            progress=progress,
        )

    def controls(self, **kwargs: Any) -> Any:
        """An ipywidgets control panel for this experiment (see ``vivarium.widgets``)."""
        from vivarium.widgets import ControlPanel

        return ControlPanel(self, **kwargs)

    def default_db(self, folder: str | os.PathLike[str] | None = None) -> Path:
        """The config's ``db``, else ``<folder>/<name>.sqlite`` (``folder`` default ``runs/``)."""
        if self.config.db:
            return Path(self.config.db)
        base = Path(folder) if folder is not None else DEFAULT_RUNS_DIR
        return base / f"{self.config.name}.sqlite"

    def trace_path(
        self,
        db: str | os.PathLike[str] | None = None,
        *,
        overwrite: bool = False,
        folder: str | os.PathLike[str] | None = None,
    ) -> Path:
        """Where ``run(db, overwrite=, folder=)`` writes its trace; nothing is touched.

        A trace there that holds this run (same config and seed: same run id) is replaced, and
        so is one holding another run when ``overwrite`` is true. Otherwise a path the user named
        (``db``, or the config's ``db``) is refused in one line naming the run it holds, and the
        default ``runs/<name>.sqlite`` gives way to ``runs/<run id>.sqlite``, with a
        ``TracePathWarning`` that says so: a loop over seeds keeps every run.
        """
        from vivarium.trace.db import check_new_trace_path, recorded_run_id

        explicit = db is not None or bool(self.config.db)
        path = Path(db) if db is not None else self.default_db(folder)
        check_new_trace_path(path)  # a folder, a foreign file, a run writing it: said first
        held = recorded_run_id(path)
        if overwrite or held is None or held == self.run_id:
            return path
        if not explicit:
            name, run_id = self.config.name, self.run_id
            own = path.with_name(
                f"{run_id}.sqlite" if run_id.startswith(f"{name}-") else f"{name}-{run_id}.sqlite"
            )
            if recorded_run_id(own) in (None, run_id):
                import warnings

                warnings.warn(
                    f"{path} holds run {held}; this run ({run_id}) is written to {own}",
                    TracePathWarning,
                    stacklevel=3,
                )
                return own
            path, held = own, recorded_run_id(own)
        raise TraceError(
            f"{path} holds run {held}, not this one ({self.run_id}): pass overwrite=True "
            "(vvm: --overwrite) to replace it, or give another path"
        )

    def build(self, trace_db: TraceDb | None, shared: dict[str, Any] | None = None) -> WorldEngine:
        """The engine for this config, writing to ``trace_db`` (None: no trace).

        ``shared`` receives what the agents share (the gateway stack), so the caller can close
        it when the run ends.
        """
        from vivarium._version import __version__
        from vivarium.build import build_agents, build_world
        from vivarium.engine.engine import WorldEngine, WorldEngineConfig
        from vivarium.types import RunMetadata

        c = self.config
        shared = {} if shared is None else shared
        world = build_world(c, shared)
        agents = build_agents(c, shared)
        meta = RunMetadata(
            run_id=self.run_id,
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
            record_llm_settings(trace_db, c)  # how calls are made, for a resume
        return WorldEngine(
            WorldEngineConfig(
                run_id=self.run_id,
                seed=c.seed,
                deterministic_timestamps=c.deterministic_timestamps,
                message_history_limit=c.message_history_limit,
                scheduling=c.scheduling,
                order=c.order,
                max_concurrency=c.llm.max_concurrency if c.llm else 16,
                agent_timeout_s=c.llm.agent_timeout if c.llm else None,
                agent_retries=c.llm.agent_retries if c.llm else 0,
                on_llm_error=c.llm.on_llm_error if c.llm else "stop",
            ),
            agents,
            world,
            trace_db,
            metadata=meta,
            checkpoint_every=c.checkpoint_every,
        )

    def run(
        self,
        db: str | os.PathLike[str] | None = None,
        *,
        overwrite: bool = False,
        folder: str | os.PathLike[str] | None = None,
        progress: bool | None = None,
        on_step: Any | None = None,
    ) -> Run:
        """Run every step, write the trace, and return the ``Run`` that reads it.

        The trace goes to ``db``, else the config's ``db``, else ``<folder>/<name>.sqlite``
        (``folder`` default ``runs/``). A trace of this same run there is replaced; one of
        another run only with ``overwrite=True`` (see ``trace_path``); any other file is left
        alone (an error). Everything that can refuse the run (the path, the agents, an LLM
        server that is not there) is checked before the file is touched.
        """
        from vivarium.trace.db import TraceDb, check_new_trace_path

        path = self.trace_path(db, overwrite=overwrite, folder=folder)
        check_new_trace_path(path)
        trace: TraceDb | None = None
        bar = None
        shared: dict[str, Any] = {}
        try:
            engine = self.build(None, shared)
            trace = TraceDb(path, deterministic_timestamps=self.config.deterministic_timestamps)
            record_llm_settings(trace, self.config)
            engine.trace_db = trace
            autonomous = self.config.mode == "autonomous"
            if _progress_enabled(progress):
                from tqdm.auto import tqdm

                if autonomous:
                    from vivarium.engine.autonomous import progress_bar_options

                    options = progress_bar_options(self.config.autonomous)
                else:
                    options = {"total": self.config.steps, "unit": "step"}
                bar = tqdm(desc=self.config.name, leave=True, **options)
            if autonomous:
                engine.run_autonomous(self.config.autonomous, progress=bar)
            else:
                engine.run(self.config.steps, progress=bar, on_step=on_step)
        except RunInterrupted as exc:
            raise interrupted_error(exc, self.run_id, path) from None
        finally:
            if bar is not None:
                bar.close()
            close = getattr(shared.get("gateway"), "close", None)
            if callable(close):
                close()
            if trace is not None:
                trace.close()
        return warn_if_unhealthy(Run.open(path))


LLM_SETTINGS_KEY = "llm_settings"


def llm_settings(config: ExperimentConfig) -> dict[str, Any] | None:
    """How a run's LLM calls are made (server, transport, limits, timeouts, cassette, what an
    outage does): not part of its identity, but what a resume needs to go on the same way.
    Never the API key."""
    if config.llm is None:
        return None
    fields = set(LLM_TRANSPORT_FIELDS) - {"api_key"}
    return config.llm.model_dump(include=fields)


def record_llm_settings(trace: TraceDb, config: ExperimentConfig) -> None:
    """Keep ``llm_settings(config)`` in the trace's ``meta`` table (read back by resume).

    The meta table is in every trace, so this needs no new schema, and it stays out of the
    recorded config, whose digest is the run id.
    """
    settings = llm_settings(config)
    if settings is not None:
        from vivarium.seeding import canonical_json

        trace.set_meta(LLM_SETTINGS_KEY, canonical_json(settings))


def recorded_llm_settings(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The LLM settings a trace recorded (empty for a run without LLM agents, or an older
    trace that did not record them)."""
    from vivarium.trace.db import read_meta

    text = read_meta(path, LLM_SETTINGS_KEY)
    return {} if text is None else dict(json.loads(text))


def resume_run(
    path: str | os.PathLike[str],
    *,
    progress: bool | None = None,
    llm: dict[str, Any] | None = None,
) -> Run:
    """Finish an interrupted run in place, from its last checkpoint (or from the start).

    Rows after the checkpoint are dropped and redone, so a deterministic run (random, mock or
    replayed LLM agents) ends with exactly the rows an uninterrupted run would have written.
    The run goes on with the LLM settings it recorded (server, transport, rate limits,
    timeouts, concurrency, cassette, ``on_llm_error``); ``llm`` overrides any of them and
    gives the API key, which is never recorded. A resume that fails before its first step
    leaves the trace as it was.
    """
    from vivarium.trace.db import TraceDb

    p = Path(path)
    run = Run.open(p)
    meta = run.metadata
    if is_complete(run):
        return run
    config = _anchor_agent_folders(p, _resume_config(p, meta, llm))
    autonomous = config.mode == "autonomous"
    # An autonomous run has no checkpoints (its agents' wake-ups and rate windows are not
    # saved): it is redone from the start, which on the virtual clock gives the same rows.
    start, checkpoint = (0, None) if autonomous else _resume_point(p, meta["steps_done"])

    # Rows after the checkpoint go only when the first redone step is committed (for_resume),
    # and the engine (LLM server check included) is built first: a resume refused or failed
    # before its first step leaves the trace as it was.
    trace = TraceDb.for_resume(p, from_step=start)
    shared: dict[str, Any] = {}
    bar = None
    try:
        engine = Experiment(config).build(None, shared)
        if checkpoint is not None:
            step, state_hash, world_state, agent_states = checkpoint
            engine.restore(step, state_hash, json.loads(world_state), json.loads(agent_states))
        record_llm_settings(trace, config)  # what this resume used, for the next one
        engine.trace_db = trace
        remaining = config.steps - start
        if _progress_enabled(progress):
            from tqdm.auto import tqdm

            if autonomous:
                from vivarium.engine.autonomous import progress_bar_options

                options = progress_bar_options(config.autonomous)
            else:
                options = {"total": config.steps, "initial": start, "unit": "step"}
            bar = tqdm(desc=f"{config.name} (resumed)", **options)
        if autonomous:
            engine.run_autonomous(config.autonomous, progress=bar)
        else:
            engine.run(remaining, progress=bar)
    except RunInterrupted as exc:
        raise interrupted_error(exc, meta["run_id"], p) from None
    finally:
        if bar is not None:
            bar.close()
        close = getattr(shared.get("gateway"), "close", None)
        if callable(close):
            close()
        trace.close()
    return warn_if_unhealthy(Run.open(p))


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


def is_complete(run: Run) -> bool:
    """The run finished every step (a resume has nothing to do)."""
    meta = run.metadata
    return bool(meta["status"] == "complete" and meta["steps_done"] >= meta["steps"])


def _resume_config(p: Path, meta: dict[str, Any], llm: dict[str, Any] | None) -> ExperimentConfig:
    """The recorded config, with the recorded LLM settings and then ``llm`` on top."""
    data = {**meta["config"], "run_id": meta["run_id"], "db": str(p)}
    given = dict(llm or {})
    if data.get("llm") is not None:
        data["llm"] = {**data["llm"], **recorded_llm_settings(p), **given}
    elif set(given) - {"api_key"}:  # a key from the environment is no request for LLM agents
        names = ", ".join(sorted(set(given) - {"api_key"}))
        raise ConfigError(
            f"resume {p}: run {meta['run_id']} has no LLM agents; {names} do not apply"
        )
    return make_config(ExperimentConfig, data, where=f"resume {p}")


def interrupted_error(exc: RunInterrupted, run_id: str, path: Path) -> RunInterrupted:
    """The one line a user sees when the LLM infrastructure stopped a run: what, where, and
    how to go on. The trace keeps every step before the one that failed."""
    kept = f"steps 0-{exc.step - 1} are kept in {path}" if exc.step else f"the trace is {path}"
    message = (
        f"run {run_id} interrupted: {exc.reason}; {kept}; once the server is back, resume with "
        f"Run.open({str(path)!r}).resume() or `vvm resume {path}`"
    )
    return RunInterrupted(message, step=exc.step, reason=exc.reason, run_id=run_id, path=str(path))


def health_warning(run: Run) -> str | None:
    """The one-line warning for a run that is not a clean result (None when it is)."""
    health = run.health
    if health.ok:
        return None
    return f"run {run.run_id} ({run.path}): {health}"


def warn_if_unhealthy(run: Run) -> Run:
    """Warn once (``RunHealthWarning``) when ``run`` is not a clean result; returns it."""
    text = health_warning(run)
    if text is not None:
        import warnings

        warnings.warn(text, RunHealthWarning, stacklevel=3)
    return run


def _resume_point(path: Path, steps_done: int) -> tuple[int, tuple[Any, ...] | None]:
    """The first step to redo, and the checkpoint to start from (whose hash matches its step)."""
    import sqlite3

    from vivarium.trace.db import TraceDb

    con = TraceDb.connect_readonly(path)
    try:
        rows = con.execute(
            "SELECT c.step, c.state_hash, c.world_state, c.agent_states FROM checkpoints c "
            "JOIN steps s ON s.step = c.step AND s.state_hash = c.state_hash "
            "WHERE c.step < ? ORDER BY c.step DESC LIMIT 1",
            (steps_done,),
        ).fetchall()
    except sqlite3.Error as exc:
        raise TraceError(f"cannot read checkpoints in {path}: {exc}") from None
    finally:
        con.close()
    if not rows:
        return 0, None
    return rows[0][0] + 1, rows[0]


class Run(FrameViews):
    """A finished (or interrupted) run, read from its trace file. Frames are loaded on demand."""

    def __init__(self, path: Path, metadata: dict[str, Any]) -> None:
        self.path = path
        self.metadata = metadata
        self.run_id: str = metadata["run_id"]
        self._frames: dict[str, Any] = {}

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Run:
        from vivarium.trace.db import TraceDb

        p = Path(path)
        con = TraceDb.connect_readonly(p)
        try:
            con.row_factory = __import__("sqlite3").Row
            row = con.execute("SELECT * FROM runs").fetchone()
        except Exception as exc:
            raise TraceError(f"cannot read the run record in {p}: {exc}") from None
        finally:
            con.close()
        if row is None:
            raise TraceError(f"{p} holds no run record (the run never started)")
        meta = dict(row)
        meta["config"] = json.loads(meta.pop("config_json"))
        return cls(p, meta)

    # -- frames -------------------------------------------------------------------------------
    @property
    def source_id(self) -> str:
        return f"run {self.run_id}"

    def arrow(self, name: str) -> Any:
        """A trace table as Arrow (cached): the source of every other frame."""
        if name not in self._frames:
            from vivarium.trace.frames import read_arrow

            self._frames[name] = read_arrow(self.path, name, run_id=self.run_id)
        return self._frames[name]

    # -- views --------------------------------------------------------------------------------
    @cached_property
    def config(self) -> ExperimentConfig | None:
        try:
            return ExperimentConfig.model_validate(self.metadata["config"])
        except Exception:
            return None

    def resume(self, *, progress: bool | None = None, llm: dict[str, Any] | None = None) -> Run:
        """Finish this run if it was interrupted (see ``resume_run``); returns the reopened run."""
        return resume_run(self.path, progress=progress, llm=llm)

    def validate(self) -> Any:

        from vivarium.trace.validate import validate_trace

        return validate_trace(self.path)

    @cached_property
    def health(self) -> RunHealth:
        """Whether this run is a result to trust: ``health.ok``, and ``health.problems``, one
        line each (interrupted, every LLM call failed, N of M decisions fell back, ...).
        See ``vivarium.trace.health`` for the full shape."""
        from vivarium.trace.health import run_health

        return run_health(self.path)

    def summary(self, **kwargs: Any) -> Any:
        """``vivarium.analysis.summary`` of this run (one row), with its ``health`` ("ok" or
        the problems, one per line)."""
        from vivarium.analysis import summary

        table = summary(self, **kwargs)
        text = "ok" if self.health.ok else "\n".join(self.health.problems)
        if hasattr(table, "with_columns"):  # polars
            import polars as pl

            return table.with_columns(pl.lit(text).alias("health"))
        table["health"] = text
        return table

    def _facts(self) -> list[tuple[str, str]]:
        m = self.metadata
        return [
            ("run_id", m["run_id"]),
            ("world", m["world"]),
            ("policy", m["policy"]),
            ("agents", str(m["agents"])),
            ("steps", f"{m['steps_done']}/{m['steps']}"),
            ("seed", m["seed"]),
            ("status", m["status"]),
            ("health", str(self.health)),
            ("trace", str(self.path)),
        ]

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v}" for k, v in self._facts())
        return f"Run({inner})"

    def _repr_html_(self) -> str:
        from html import escape

        def cell(key: str, value: str) -> str:
            if key == "health" and not self.health.ok:  # a run that is not a result shows red
                lines = "<br>".join(escape(p) for p in self.health.problems)
                return f"<td style='color:#c00000;font-weight:bold'>{lines}</td>"
            return f"<td>{escape(value)}</td>"

        rows = "".join(
            f"<tr><th style='text-align:left'>{escape(k)}</th>{cell(k, v)}</tr>"
            for k, v in self._facts()
        )
        return f"<div><b>Vivarium run</b><table>{rows}</table></div>"


def _policy_names(config: ExperimentConfig, plan: list[Any] | None = None) -> str:
    """``random``, or ``random,workflow`` for a run of agent groups with several policies (of
    the agents in the run: a disabled group is not)."""
    if plan:
        return ",".join(sorted({p.group.policy for p in plan}))
    if isinstance(config.agents, list):
        return ",".join(sorted({group.policy for group in config.agents}))
    return config.policy
