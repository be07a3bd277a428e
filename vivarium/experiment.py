"""The public face: ``Experiment`` runs a config, ``Run`` reads its trace as frames."""

from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vivarium.config import ExperimentConfig, load_config_data, make_config
from vivarium.errors import ConfigError, TraceError
from vivarium.trace.views import FrameViews

if TYPE_CHECKING:
    from vivarium.engine.engine import WorldEngine
    from vivarium.trace.db import TraceDb

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
        """Load a YAML/JSON config; relative agent folders resolve next to the file (or cwd)."""
        data = load_config_data(path)
        if "sweep" in data:  # a sweep config runs here as its base experiment
            from vivarium.sweep import split_sweep_section

            data, _settings = split_sweep_section(data, where=str(path))
        data = {**data, **overrides}
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
        ``seed`` axis get seeds derived from ``sweep_seed`` (default: this experiment's seed).
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

    def default_db(self) -> Path:

        return (
            Path(self.config.db)
            if self.config.db
            else DEFAULT_RUNS_DIR / f"{self.config.name}.sqlite"
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
            policy=_policy_names(c) if agents else "",
            seed=c.seed,
            agents=c.agent_count,
            steps=c.steps,
            scheduling=c.scheduling,
            vivarium_version=__version__,
            config=c.identity(),
        )
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
        progress: bool | None = None,
        on_step: Any | None = None,
    ) -> Run:
        """Run every step, write the trace, and return the ``Run`` that reads it.

        The trace goes to ``db``, else the config's ``db``, else ``runs/<name>.sqlite``. An
        existing Vivarium trace there is replaced; any other file is left alone (an error).
        """
        from vivarium.trace.db import TraceDb

        path = Path(db) if db is not None else self.default_db()
        trace = TraceDb(path, deterministic_timestamps=self.config.deterministic_timestamps)
        bar = None
        shared: dict[str, Any] = {}
        try:
            engine = self.build(trace, shared)
            autonomous = self.config.mode == "autonomous"
            if _progress_enabled(progress):
                from tqdm.auto import tqdm

                total = None if autonomous else self.config.steps
                bar = tqdm(total=total, desc=self.config.name, unit="step", leave=True)
            if autonomous:
                engine.run_autonomous(self.config.autonomous, progress=bar)
            else:
                engine.run(self.config.steps, progress=bar, on_step=on_step)

        finally:
            if bar is not None:
                bar.close()
            close = getattr(shared.get("gateway"), "close", None)
            if callable(close):
                close()
            trace.close()
        return Run.open(path)


def resume_run(
    path: str | os.PathLike[str],
    *,
    progress: bool | None = None,
    llm: dict[str, Any] | None = None,
) -> Run:
    """Finish an interrupted run in place, from its last checkpoint (or from the start).

    Rows after the checkpoint are dropped and redone, so a deterministic run (random, mock or
    replayed LLM agents) ends with exactly the rows an uninterrupted run would have written.
    ``llm`` gives what the trace does not record: cassette, cache mode, API base and key.
    """
    from vivarium.trace.db import TraceDb

    p = Path(path)
    run = Run.open(p)
    meta = run.metadata
    if meta["status"] == "complete" and meta["steps_done"] >= meta["steps"]:
        return run
    data = {**meta["config"], "run_id": meta["run_id"], "db": str(p)}
    if llm:
        data["llm"] = {**(data.get("llm") or {}), **llm}
    config = make_config(ExperimentConfig, data, where=f"{p} (recorded config)")
    for group in config.agents if isinstance(config.agents, list) else []:
        recorded = group.spec_digest
        if recorded is not None and config.agent_spec_digest(group) != recorded:
            raise ConfigError(
                f"{p}: agent folder {group.agent} has changed since the run was recorded; "
                "resuming would not reproduce it (restore the folder, or start a new run)"
            )
    start, checkpoint = _resume_point(p, meta["steps_done"])

    trace = TraceDb.for_resume(p)
    shared: dict[str, Any] = {}
    bar = None
    try:
        trace.truncate_after(start - 1)
        engine = Experiment(config).build(trace, shared)
        if checkpoint is not None:
            step, state_hash, world_state, agent_states = checkpoint
            engine.restore(step, state_hash, json.loads(world_state), json.loads(agent_states))
        remaining = config.steps - start
        if _progress_enabled(progress):
            from tqdm.auto import tqdm

            bar = tqdm(
                total=config.steps, initial=start, desc=f"{config.name} (resumed)", unit="step"
            )
        engine.run(remaining, progress=bar)
    finally:
        if bar is not None:
            bar.close()
        close = getattr(shared.get("gateway"), "close", None)
        if callable(close):
            close()
        trace.close()
    return Run.open(p)


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
            ("trace", str(self.path)),
        ]

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v}" for k, v in self._facts())
        return f"Run({inner})"

    def _repr_html_(self) -> str:
        from html import escape

        rows = "".join(
            f"<tr><th style='text-align:left'>{escape(k)}</th><td>{escape(v)}</td></tr>"
            for k, v in self._facts()
        )
        return f"<div><b>Vivarium run</b><table>{rows}</table></div>"


def _policy_names(config: ExperimentConfig) -> str:
    """``random``, or ``random,workflow`` for a run of agent groups with several policies."""
    if isinstance(config.agents, list):
        return ",".join(sorted({group.policy for group in config.agents}))
    return config.policy
