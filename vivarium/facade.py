"""The public face: ``Experiment`` configures a run, ``Run`` reads its trace as frames.

``Experiment`` is a facade over the layers below it: running one config into a trace (and
resuming it) is ``vivarium.experiment.runner``'s, a grid of runs is ``vivarium.sweep``'s, the notebook
panel is ``vivarium.widgets``'. ``Run`` is the trace's reader (``vivarium.trace.run``) with
what needs this layer on top: the config as a model, ``resume()`` and ``summary()``.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vivarium.errors import ConfigError, OverrideWarning
from vivarium.experiment import paths, runner
from vivarium.experiment.config import ExperimentConfig, load_config_data, make_config
from vivarium.experiment.overrides import llm_switch, merge_overrides
from vivarium.trace.run import TraceRun

if TYPE_CHECKING:
    from vivarium.engine.engine import WorldEngine
    from vivarium.sweep import Sweep
    from vivarium.trace.db import TraceDb
    from vivarium.widgets import ControlPanel


def _agent_paths_exist(data: dict[str, Any], base: Path) -> bool:
    """Whether ``data`` names agent folders and each of them exists under ``base``."""
    groups = data.get("agents")
    if not isinstance(groups, list):
        return False
    folders = [
        g["agent"] for g in groups if isinstance(g, dict) and isinstance(g.get("agent"), str)
    ]

    return bool(folders) and all((base / f).exists() for f in folders)


def _find_relative_files(data: dict[str, Any], project: Path) -> dict[str, Any]:
    """A config file's cassette and input files, found as its agent folders are.

    ``cache: cassettes/study.sqlite`` and ``input_files: [data/prices.csv]`` are written
    relative to the project, and read relative to the working directory. Loaded from another
    folder (a notebook in ``notebooks/`` loading ``../study.yaml``), the cassette would be a
    new, empty one there (in ``auto`` mode every reply asked of the model again, and recorded
    beside the project's), and the input files would not be found. A path that names nothing
    from the working directory is looked up from the config's folder and its parents; the
    first folder that has it is used (a cassette by its path, input files by ``base_dir``).
    A path found nowhere stays as written: its own check says so.
    """
    llm = data.get("llm")
    cache = llm.get("cache") if isinstance(llm, dict) else None
    if isinstance(cache, str) and cache:
        given = Path(cache).expanduser()
        if not given.is_absolute() and not given.exists():
            for base in (project, *project.parents):
                if (base / given).is_file():
                    data = {**data, "llm": {**llm, "cache": str(base / given)}}
                    break
    files = data.get("input_files")
    if isinstance(files, list) and files and "base_dir" not in data:
        relative = [Path(f) for f in files if isinstance(f, str) and not Path(f).is_absolute()]
        if relative and not all(f.exists() for f in relative):
            for base in (project, *project.parents):
                if all((base / f).exists() for f in relative):
                    data = {**data, "base_dir": str(base)}
                    break
    return data


def _say_llm_switch(before: Any, after: Any) -> None:
    """Warn (``OverrideWarning``) when overrides moved the LLM from the mock to a model, or back."""
    note = llm_switch(before, after)
    if note is not None:
        warnings.warn(note, OverrideWarning, stacklevel=3)


class Experiment:
    """A configured experiment: ``Experiment(agents=5, steps=100, seed=42).run()``.

    Attributes:
        config: The validated ``ExperimentConfig``; the run id derives from it.
    """

    def __init__(self, config: ExperimentConfig | None = None, /, **fields: Any) -> None:
        """Make an experiment from a config, from config fields, or from both.

        ``world``, ``policy`` and each agent group's ``policy`` may be a class, a factory or an
        instance as well as a name (see ``vivarium.experiment.objects``): the config names it by reference.

        Args:
            config: A config to start from (default: the default config).
            **fields: Config fields, replacing the config's; and ``model_reporters`` /
                ``agent_reporters`` (name -> callable of the world, see
                ``vivarium.engine.reporters``), added to the world's: not config fields,
                they stay out of the run id (the trace records their names).

        Raises:
            ConfigError: A field is unknown or has a bad value (one line naming it).
        """
        from vivarium.engine.reporters import check_reporters
        from vivarium.experiment.objects import name_objects

        self.model_reporters = check_reporters(
            fields.pop("model_reporters", None), "model_reporters"
        )
        self.agent_reporters = check_reporters(
            fields.pop("agent_reporters", None), "agent_reporters"
        )

        fields = name_objects(fields)
        if config is not None and fields:
            # Overrides merge into the config's sections (``llm={"temperature": 0.7}`` keeps
            # its model), as ``from_file``, the CLI, the panel and sweeps merge them.
            merged = merge_overrides(config.model_dump(), fields)
            self.config = make_config(ExperimentConfig, merged)
            _say_llm_switch(config.llm, self.config.llm)
        elif config is not None:
            self.config = config
        else:
            self.config = make_config(ExperimentConfig, fields)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **overrides: Any) -> Experiment:
        """Load a YAML/JSON config; relative agent folders resolve next to the file (or cwd).

        ``overrides`` replace the file's fields; a mapping (``llm``, ``autonomous``,
        ``world_options``, ...) sets only the fields it names within that section
        (``vivarium.experiment.overrides.merge_overrides``, as everywhere).
        """
        from vivarium.experiment.objects import name_objects

        data = load_config_data(path)
        if "sweep" in data:  # a sweep config runs here as its base experiment
            from vivarium.sweep import split_sweep_section

            data, _settings = split_sweep_section(data, where=str(path))
        before = data.get("llm")
        data = merge_overrides(data, name_objects(overrides))
        _say_llm_switch(before, data.get("llm"))
        project = Path(path).resolve().parent

        # A config in <project>/data/experiments/ names agents as data/agents/...: look from
        # the folder that makes such paths exist (the config's, or a parent of it).
        for base in (project, *project.parents):
            if _agent_paths_exist(data, base):
                data.setdefault("base_dir", str(base))
                break
        data = _find_relative_files(data, project)
        return cls(make_config(ExperimentConfig, data, where=str(path)))

    def __repr__(self) -> str:
        """The experiment's name, world, policy, agents, steps and seed."""
        c = self.config
        return (
            f"Experiment(name={c.name!r}, world={c.world!r}, policy={c.policy!r}, "
            f"agents={c.agent_count}, steps={c.steps}, seed={c.seed})"
        )

    @property
    def run_id(self) -> str:
        """The run's id, derived from the config and the user code it uses, as they are now.

        The same config with the same code and the same values read by that code gives the
        same id (see "What a run is" in the README, and ``vivarium.experiment.digest``).
        """
        with self._started() as config:
            return config.resolved_run_id()

    @contextlib.contextmanager
    def _started(self) -> Iterator[ExperimentConfig]:
        """The config as a run starting now is identified: its user code digested once.

        Objects are referred to as they are now (a notebook global they read may have changed
        since the experiment was made), and the experiment's reporters are in force.
        """
        from vivarium.experiment.digest import snapshot
        from vivarium.experiment.objects import resolve_references

        with snapshot(), self._reporters():
            yield resolve_references(self.config)

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
        paired: bool = False,
        **grid: Any,
    ) -> Sweep:
        """Run this experiment over a grid (``seed=range(10), agents=[5, 50]``) or configs.

        Every run gets its own trace under one sweep folder with an index; the returned
        ``Sweep`` has the merged frames with the parameter columns added (see vivarium.sweep).
        Nested fields use ``__`` in keyword names: ``llm__temperature=[0, 0.7]``. Runs without a
        ``seed`` axis get seeds derived from ``sweep_seed`` (default: this experiment's seed),
        each run's parameters and its replication. Every run failed: ``SweepFailed``; some
        failed or fell back: a ``SweepWarning`` with the count and the first error. A
        ``world`` or ``policy`` axis may list classes or factories as well as names.
        ``paired=True`` gives every point of a replication the same seed, so that the arms
        share every random stream the treatment leaves alone (common random numbers); compare
        them with ``vivarium.analysis.paired_difference``.
        """
        from vivarium.experiment.objects import name_object
        from vivarium.sweep import run_sweep

        values = {key.replace("__", "."): list(v) for key, v in grid.items()}
        for key in ("world", "policy"):  # an axis of classes or factories
            if key in values:
                values[key] = [name_object(key, v) for v in values[key]]
        with self._started() as config:  # workers get reporters with the objects, by value
            return run_sweep(
                config,
                values or None,
                configs,
                folder=folder,
                backend=backend,  # type: ignore[arg-type]
                max_workers=max_workers,
                ray_address=ray_address,
                seed=sweep_seed,
                replications=replications,
                paired=paired,
                progress=progress,
                open_run=Run.open,  # the sweep's runs are ``Run``s, as ``run()``'s are
            )

    def controls(self, **kwargs: Any) -> ControlPanel:
        """An ipywidgets control panel for this experiment (see ``vivarium.widgets``).

        Args:
            **kwargs: Passed to ``ControlPanel`` (``folder``: where its runs go).

        Returns:
            The panel; its runs are ``Run``s.
        """
        from vivarium.widgets import ControlPanel

        kwargs.setdefault("open_run", Run.open)
        return ControlPanel(self, **kwargs)

    def default_db(self, folder: str | os.PathLike[str] | None = None) -> Path:
        """The config's ``db``, else ``<folder>/<name>.sqlite`` (``folder`` default ``runs/``)."""
        return paths.default_trace_path(self.config, folder)

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
        with self._started() as config:
            return paths.trace_path(config, db, overwrite=overwrite, folder=folder, stacklevel=2)

    def build(self, trace_db: TraceDb | None, shared: dict[str, Any] | None = None) -> WorldEngine:
        """The engine for this config, writing to ``trace_db`` (None: no trace).

        ``shared`` receives what the agents share (the gateway stack), so the caller can close
        it when the run ends.
        """
        with self._started() as config:
            return runner.build_engine(config, trace_db, shared)

    def _reporters(self) -> Any:
        """The experiment's reporters in force for the engines built inside the block."""
        from vivarium.engine.reporters import experiment_reporters

        return experiment_reporters(self.model_reporters, self.agent_reporters)

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
        (``folder`` default ``runs/``). A finished trace of this same run there is replaced;
        an unfinished one (the run stopped: Ctrl-C, an outage, a killed process) is resumed
        where it stopped, its committed steps kept, with a ``ResumedWarning`` (``overwrite=True``
        starts it over); one of another run is replaced only with ``overwrite=True`` (see
        ``trace_path``); any other file is left alone (an error). Everything that can refuse
        the run (the path, the agents, an LLM server that is not there) is checked before the
        file is touched. See ``vivarium.experiment.runner.run_experiment`` for the errors and warnings.

        Ctrl-C or SIGTERM stops the run with its trace marked ``interrupted`` (resumable) and
        raises ``KeyboardInterrupt``; the signal handlers are restored afterwards. Running the
        same cell again goes on from there: the result is the run's as if never stopped.
        """
        from vivarium.engine.interrupts import interrupt_signals

        with self._started() as config, interrupt_signals():
            return runner.run_experiment(
                config,
                db,
                overwrite=overwrite,
                folder=folder,
                progress=progress,
                on_step=on_step,
                open_run=Run.open,
                stacklevel=2,
            )


class Run(TraceRun):
    """A run read from its trace (see ``TraceRun``), with the experiment layer on top.

    ``Run.open(path)`` reads a trace; ``config`` is the recorded config as a model,
    ``resume()`` finishes an interrupted run and ``summary()`` is its one-row summary.
    """

    @cached_property
    def config(self) -> ExperimentConfig | None:
        """The recorded config as an ``ExperimentConfig`` (None if this version cannot read it)."""
        try:
            return ExperimentConfig.model_validate(self.metadata["config"])
        except Exception:
            return None

    def resume(
        self,
        *,
        progress: bool | None = None,
        llm: dict[str, Any] | None = None,
        world: Any = None,
        policy: Any = None,
        model_reporters: dict[str, Any] | None = None,
        agent_reporters: dict[str, Any] | None = None,
    ) -> Run:
        """Finish this run if it was interrupted; returns the reopened run.

        ``model_reporters`` / ``agent_reporters``: the experiment's reporters the run recorded
        (they are not in the config; a resume without them is refused, naming them).

        See ``vivarium.experiment.runner.resume_run``: the trace ends as that of the run never stopped
        (its committed steps are re-executed from the trace, LLM replies included, and checked
        against their state hashes; then the run goes on), with the LLM settings it recorded,
        ``llm`` overriding them (and giving the API key). A run that cannot be reproduced is
        refused in one line (``ResumeDiverged``), the trace left as it was. A run of
        a world or policy given as a Python object needs it again, in a new process: pass
        ``world=`` and ``policy=`` (a list for several policies); the same code resumes.
        """
        from vivarium.experiment.objects import name_object

        given = []
        if world is not None:
            given.append(("world", name_object("world", world)))
        for each in policy if isinstance(policy, (list, tuple)) else [policy]:
            if each is not None:
                given.append(("policy", name_object("policy", each)))
        self._check_same_objects(given)
        from vivarium.engine.interrupts import interrupt_signals
        from vivarium.engine.reporters import check_reporters, experiment_reporters

        with (
            experiment_reporters(
                check_reporters(model_reporters, "model_reporters"),
                check_reporters(agent_reporters, "agent_reporters"),
            ),
            interrupt_signals(),
        ):
            return runner.resume_run(
                self.path, progress=progress, llm=llm, open_run=type(self).open, stacklevel=2
            )

    def fork(
        self,
        at_step: int,
        /,
        *,
        db: str | os.PathLike[str] | None = None,
        agent_changes: dict[str, dict[str, Any]] | None = None,
        **changes: Any,
    ) -> Experiment:
        """The experiment that repeats this run before ``at_step`` and follows ``changes`` after.

        ``run.fork(10, llm={"system_prompt": "..."}).run()``: the child's steps before
        ``at_step`` are this run's, copied (never run, nor called, again): the same
        decisions, state hashes, messages, reporters and LLM calls. From ``at_step`` on it
        runs under its own config: this run's with ``changes`` merged in, as ``Experiment``
        merges fields (any field: a seed, a world option, the LLM settings, a group's policy,
        ``agents`` with one group changed), and with ``agent_changes`` one agent's own
        (``{"agent_001": {"system_prompt": "..."}}``, or its ``model``, ``temperature`` or
        ``policy``: the agent gets a group of its own, every id kept). The state it starts
        from is this run's after step
        ``at_step - 1``: the world, every agent's memory and generator (an agent whose policy
        class changed starts its new policy fresh). A change of ``seed`` gives the steps after
        the fork new random streams: every policy starts as the child's seed builds it (for
        the built-in ones, their generators; the agents' memories go on), and what is drawn
        from the run's seed step by step (the order of agents, the LLM's sampling seeds)
        follows it; a generator the world keeps in its state goes on as the parent's did.

        The child records its parent and fork step (``lineage``); a fork of a fork works. A
        fork without changes is this run: the same run id and, run, the same bytes. Its trace
        goes to ``db``, else beside this one (``<name>.fork<step>.<id>.sqlite``).

        Args:
            at_step: The child's first own step: 0 to the steps this run committed.
            db: Where the child's trace goes.
            agent_changes: Agent id -> its own policy and policy options after the fork.
            **changes: Config fields (and ``model_reporters`` / ``agent_reporters``).

        Returns:
            The child's ``Experiment``; ``.run()`` makes it (and resumes it after a stop).

        Raises:
            ConfigError: ``at_step`` is out of range or a change is not a config field; when
                run: this run's world or policies cannot save their state at ``at_step``.
        """
        from vivarium.experiment.runner import fork_base

        base = fork_base(self.path, at_step)
        child = Experiment(base, **changes) if changes else Experiment(base)
        if child.config.fork_of != base.fork_of:
            raise ConfigError("fork_of is set by the fork itself, not given as a change")
        if agent_changes:
            from vivarium.experiment.plan import agents_with_changes

            groups = agents_with_changes(child.config, agent_changes)
            child.config = make_config(
                ExperimentConfig, {**child.config.model_dump(), "agents": groups}
            )
        path = db if db is not None else runner.fork_trace_path(self.path, child.config)
        child.config = child.config.model_copy(update={"db": str(path)})
        return child

    def diff(self, other: str | os.PathLike[str] | TraceRun) -> Any:
        """Compare this run with ``other`` (a run or its trace): ``vvm diff``'s comparison.

        Returns:
            A ``RunDiff``: ``config`` (the keys that differ), ``first`` (the first divergence:
            step, agent and what differs), ``decisions_differing``, ``identical``; shown as a
            table in a notebook.
        """
        from vivarium.trace.diff import diff_runs

        return diff_runs(self.path, other.path if isinstance(other, TraceRun) else other)

    def report(self, out: str | os.PathLike[str], *, max_decisions: int = 2000) -> Path:
        """Write this run as one static HTML page: ``vvm report``.

        Summary, health, figures and a decision inspector that works offline
        (``vivarium.inspector.report``). Returns the path written.
        """
        from vivarium.inspector.report import write_report

        return write_report(self, out, max_decisions=max_decisions)

    def bundle(self, out: str | os.PathLike[str]) -> list[str]:
        """Write this run (and the runs it forks) to the archive ``out``: ``vvm bundle``.

        Returns:
            Notes on what ``vvm verify`` cannot re-run, and why (see
            ``vivarium.experiment.bundle``).
        """
        from vivarium.experiment.bundle import make_bundle

        return make_bundle([self.path], out)

    @property
    def lineage(self) -> list[Any]:
        """This run, then the run it forked, and so on: ``(run_id, path, fork_step)`` each.

        ``fork_step`` is the step from which that run followed its own config (None for a run
        that is no fork); a parent whose trace has moved ends the list with its run id and no
        path.
        """
        from vivarium.trace.fork_file import lineage

        return lineage(self.path)

    def interview(
        self,
        agent_id: str,
        step: int,
        question: str,
        *,
        model: str | None = None,
        llm: dict[str, Any] | None = None,
    ) -> Any:
        """Ask ``agent_id`` ``question`` in the context it had at ``step`` of this run.

        The agent's prompt at that step (system prompt, memory, working memory, observation),
        as the trace recorded it, then its own answer, then the question, through the run's
        model (or ``model``; ``llm`` overrides settings such as ``api_base``). The trace is
        not written; the exchange is kept beside it (``<trace>.interviews``), and the same
        question asked again is answered from there, offline. See
        ``vivarium.experiment.interview``.

        Returns:
            An ``Interview``: ``answer``, the ``request`` sent, and whether it was ``replayed``.

        Raises:
            ConfigError: The agent made no LLM call at ``step``, or the question is empty.
            TraceError: No such agent.
        """
        from vivarium.experiment.interview import interview

        return interview(self, agent_id, step, question, model=model, llm=llm)

    @property
    def interviews(self) -> Any:
        """The interviews of this run so far (``interview``), oldest first, as a DataFrame."""
        from vivarium.experiment.interview import interviews

        return interviews(self.path, self.run_id)

    def _check_same_objects(self, given: list[tuple[str, str]]) -> None:
        """Refuse, in one line, objects given to ``resume`` that are not the run's own.

        An object is the run's when its reference (its code and the values it reads, see
        ``vivarium.experiment.digest``) is the one the run recorded; one of the same class whose code or
        values changed would continue the run with other behaviour under its id.
        """
        from vivarium.experiment.digest import snapshot
        from vivarium.experiment.objects import current_reference, display_name, is_reference

        recorded = self.metadata["config"]
        names = [recorded.get("world"), recorded.get("policy")]
        groups = recorded.get("agents")
        if isinstance(groups, list):
            names += [g.get("policy") for g in groups if isinstance(g, dict)]
        refs = {n for n in names if isinstance(n, str) and is_reference(n)}
        with snapshot():
            for kind, name in given:
                now = current_reference(name)
                label = now.rpartition("@")[0]
                if now in refs or not any(r.rpartition("@")[0] == label for r in refs):
                    continue
                raise ConfigError(
                    f"{self.path}: {kind} {display_name(now)} has changed since the run was "
                    "recorded (its code, or a value it reads such as a notebook global); "
                    "resuming would not reproduce it (restore it, or start a new run)"
                )

    def summary(self, **kwargs: Any) -> Any:
        """``vivarium.analysis.summary`` of this run (one row), with its ``health``.

        ``health`` is "ok", or the run's problems, one per line.
        """
        from vivarium.analysis import summary

        table = summary(self, **kwargs)
        text = "ok" if self.health.ok else "\n".join(self.health.problems)
        if hasattr(table, "with_columns"):  # polars
            import polars as pl

            return table.with_columns(pl.lit(text).alias("health"))
        table["health"] = text
        return table

    def inspect(self, **kwargs: Any) -> Any:
        """A notebook decision inspector for this run (see ``vivarium.inspector.Inspector``)."""
        from vivarium.inspector import Inspector

        return Inspector(self, **kwargs)

    def to_trajectories(
        self, reward: Any = None, *, path: str | os.PathLike[str] | None = None
    ) -> Any:
        """One training episode per agent, in TRL's conversational prompt-completion format.

        Each step holds the messages the model was sent, its reply, the action, its outcome and
        ``reward(row)`` (default: the MetaRLGym world's own reward). A ``datasets.Dataset``
        with the ``rl`` extra, else JSONL written to ``path``. See
        ``vivarium.analysis.trajectories.to_trajectories``.
        """
        from vivarium.analysis.trajectories import to_trajectories

        return to_trajectories(self, reward, path=path)
