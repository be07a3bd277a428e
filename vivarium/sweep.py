"""Sweeps: many runs of one experiment over a grid of config values, in parallel, resumable.

```python
from vivarium.sweep import run_sweep

sweep = run_sweep(base, grid={"agents": [5, 50], "llm.temperature": [0.0, 0.7]}, replications=3)
sweep.actions        # pandas: every run's actions, with run_id, run, replication, seed and the
                     # grid's parameters as leading columns, rows in run order
sweep.index          # one row per run: params, seed, status, error, path, attempts
```

- **Runs.** A grid over any config field (dotted names reach into nested fields:
  ``llm.temperature``, ``world_options.size``), an explicit list of configs (dicts of overrides
  of the base, or whole configs), or both (every config crossed with the grid); then
  ``replications`` runs of each point. Each run writes its own trace in the sweep folder
  (default ``runs/<name>-sweep/``), named by its run id.
- **The index** is ``index.sqlite`` in the folder: one row per run (run_id, params, seed,
  status pending/running/complete/failed, error, path, attempts). Every change is one SQLite
  transaction (WAL, busy timeout), so workers and readers in other processes never see half a
  write; a lock file keeps a second sweep process out of a folder while one is running.
- **Resuming.** Running a sweep again skips the runs whose trace is complete and valid, resumes
  interrupted or failed runs from their last checkpoint (``vivarium.experiment.resume_run``) when
  they have one and reruns the rest. A run that fails records its error (one line) in the index;
  the other runs go on. At the end, a sweep whose every run failed raises ``SweepFailed``; one
  with failed runs, or complete runs that are not clean results (``Sweep.problems``: decisions
  that fell back), warns (``SweepWarning``) with the count and the first error.
- **Seeds.** Each run's seed is recorded. Unless the grid (or a config) gives ``seed``, a run
  gets ``run_seed_of(sweep_seed, params, replication)``: derived from its parameters, never its
  position, so a value added to a grid changes no other run's seed or run id, and the index
  keeps each run's row by run id; with a given seed, replication 0 keeps it and replication
  ``r > 0`` gets ``derive_seed(seed, "replication", r)``.
- **Backends.** ``local`` starts worker processes with ``python -c`` that import only Vivarium
  (multiprocessing's spawn and forkserver would re-run the user's script in every worker, and
  a script without a main guard would start its sweep again in each; ``fork`` is unsafe in a
  threaded kernel). Workers receive plain config dicts, and the worlds and policies the runs
  use that are not built in travel with them, pickled by cloudpickle (by value when defined in
  ``__main__``: a notebook cell, a script); ``plugins=`` names modules to import first. ``ray``
  runs one Ray task per run (``ray_address`` joins a cluster whose nodes share the sweep
  folder); ``inline`` runs in this process, in turn. Every backend and worker count gives the
  same merged frames.
- **LLM cassettes.** Runs whose config names ``llm.cache`` share that cassette; it is safe for
  concurrent writers, so one sweep records every reply once and replays offline afterwards.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import hashlib
import importlib
import itertools
import json
import os
import pickle
import selectors
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from vivarium.config import MAX_SEED, ExperimentConfig, make_config
from vivarium.errors import ConfigError, SweepFailed, SweepWarning, TraceError, VivariumError
from vivarium.seeding import canonical_json, derive_seed
from vivarium.trace.views import FrameViews

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from vivarium.experiment import Experiment, Run

Backend = Literal["local", "ray", "inline"]
BACKENDS = ("local", "ray", "inline")
STATUSES = ("pending", "running", "complete", "failed")
INDEX_FILE = "index.sqlite"
LOCK_FILE = ".sweep.lock"
INDEX_FORMAT = "vivarium-sweep"
INDEX_VERSION = 1
SWEEP_FRAMES = ("actions", "messages", "llm_calls", "transitions", "steps", "agents")
# Columns every merged frame starts with (after the trace's own run_id).
RUN_COLUMNS = ("run", "replication", "seed")
# Config fields that say where a run is written, never what it is: not parameters.
_NOT_PARAMS = frozenset({"db", "run_id"})
_MAX_ERROR_CHARS = 500

# -- planning ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """One run of a sweep: its position, parameters, seed and the full config."""

    index: int
    params: dict[str, Any]
    replication: int
    seed: int
    config: ExperimentConfig
    run_id: str
    file: str


def _as_config(base: Any) -> ExperimentConfig:
    if isinstance(base, ExperimentConfig):
        return base
    config = getattr(base, "config", None)  # an Experiment
    if isinstance(config, ExperimentConfig):
        return config
    if isinstance(base, Mapping):
        return make_config(ExperimentConfig, dict(base))
    raise ConfigError(
        "sweep: base must be an Experiment, an ExperimentConfig or a dict, "
        f"not {type(base).__name__}"
    )


def _config_data(config: ExperimentConfig) -> dict[str, Any]:
    """A config as plain data (the API key stays a SecretStr, never printed)."""
    return config.model_dump(exclude=set(_NOT_PARAMS))


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    if not all(parts):
        raise ConfigError(f"sweep: '{key}' is not a field name")
    if parts[0] not in ExperimentConfig.model_fields:
        raise ConfigError(f"sweep: {key}: unknown field")
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise ConfigError(
                f"sweep: {key}: '{'.'.join(parts[: i + 1])}' is not a group of fields"
            )
        node = child
    node[parts[-1]] = copy.deepcopy(value)


def _check_field(key: str) -> None:
    if key in _NOT_PARAMS:
        raise ConfigError(f"sweep: {key}: set by the sweep for each run; it cannot be swept")


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"llm": {"temperature": 0.5}}`` -> ``{"llm.temperature": 0.5}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def _grid_points(grid: Mapping[str, Sequence[Any]] | None) -> list[dict[str, Any]]:
    if not grid:
        return [{}]
    if not isinstance(grid, Mapping):
        raise ConfigError(
            f"sweep: grid must be a mapping of field -> values, not {type(grid).__name__}"
        )
    keys, values = [], []
    for key, options in grid.items():
        if not isinstance(key, str):
            raise ConfigError(f"sweep: grid: field names must be text, not {key!r}")
        if isinstance(options, str | bytes) or not isinstance(options, Sequence | range):
            raise ConfigError(
                f"sweep: grid: {key}: expected a list of values, got {type(options).__name__}"
            )
        if len(options) == 0:
            raise ConfigError(f"sweep: grid: {key}: give at least one value")
        _check_field(key)
        keys.append(key)
        values.append(list(options))
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*values)]


def _explicit_points(
    base: ExperimentConfig, configs: Sequence[Any] | None
) -> list[tuple[dict[str, Any], dict[str, Any], bool]]:
    """(config data, params, seed given) for each explicit config, or the base alone."""
    base_data = _config_data(base)
    if configs is None:
        return [(base_data, {}, False)]
    if isinstance(configs, Mapping | str | bytes) or not isinstance(configs, Sequence):
        raise ConfigError("sweep: configs must be a list of configs or dicts of overrides")
    if not configs:
        raise ConfigError("sweep: configs is empty; give at least one config")
    base_flat = _flatten(base_data)
    out = []
    for i, item in enumerate(configs):
        if isinstance(item, ExperimentConfig):
            data = _config_data(item)
            flat = _flatten(data)
            params = {k: v for k, v in flat.items() if k != "seed" and base_flat.get(k, None) != v}
            out.append((data, params, "seed" in item.model_fields_set))
        elif isinstance(item, Mapping):
            data = copy.deepcopy(base_data)
            flat = _flatten(item)
            for key, value in flat.items():
                _check_field(key)
                _set_dotted(data, key, value)
            out.append((data, flat, "seed" in flat))
        else:
            raise ConfigError(
                f"sweep: configs[{i}] must be an ExperimentConfig or a dict, "
                f"not {type(item).__name__}"
            )
    return out


def plan_sweep(
    base: Experiment | ExperimentConfig | Mapping[str, Any],
    grid: Mapping[str, Sequence[Any]] | None = None,
    configs: Sequence[ExperimentConfig | Mapping[str, Any]] | None = None,
    *,
    seed: int | None = None,
    replications: int | None = None,
) -> list[PlannedRun]:
    """Every run of a sweep, in run order, with its config and seed (nothing is run)."""
    base_config = _as_config(base)
    reps = 1 if replications is None else replications
    if not isinstance(reps, int) or isinstance(reps, bool) or reps < 1:
        raise ConfigError(f"sweep: replications must be a whole number >= 1, not {replications!r}")
    sweep_seed = base_config.seed if seed is None else seed
    if not isinstance(sweep_seed, int) or not 0 <= sweep_seed <= MAX_SEED:
        raise ConfigError(f"sweep: seed must be an integer in [0, 2**63), not {seed!r}")
    runs: list[PlannedRun] = []
    files: dict[str, int] = {}
    twins: dict[str, int] = {}
    for data, explicit, seed_given in _explicit_points(base_config, configs):
        for point in _grid_points(grid):
            params = {**explicit, **point}
            given = seed_given or "seed" in point
            for rep in range(reps):
                i = len(runs)
                run_data = copy.deepcopy(data)
                for key, value in point.items():
                    _set_dotted(run_data, key, value)
                if not given:
                    run_seed = run_seed_of(sweep_seed, params, rep)
                elif rep == 0:
                    run_seed = run_data.get("seed", base_config.seed)
                else:
                    run_seed = derive_seed(run_data["seed"], "replication", rep) % (MAX_SEED + 1)
                run_data["seed"] = run_seed
                run_data.pop("run_id", None)
                run_data.pop("db", None)
                where = f"sweep run {i} ({_describe(params, rep)})"
                config = make_config(ExperimentConfig, run_data, where=where)
                run_id = config.resolved_run_id()
                if run_id in files:
                    # Numbered by how often this config came before, not by position, so that
                    # adding other values to the grid leaves the name alone.
                    twins[run_id] = twins.get(run_id, 0) + 1
                    twin = f"{run_id}-{twins[run_id]}"
                    warnings.warn(
                        f"sweep runs {files[run_id]} and {i} have the same config (run id "
                        f"{run_id}); run {i} is recorded as {twin}",
                        stacklevel=2,
                    )
                    run_id = twin
                    config = config.model_copy(update={"run_id": run_id})
                files[run_id] = i
                runs.append(
                    PlannedRun(i, params, rep, config.seed, config, run_id, f"{run_id}.sqlite")
                )
    return runs


def run_seed_of(sweep_seed: int, params: Mapping[str, Any], replication: int) -> int:
    """The seed of a run whose config gives none: from its parameters, never its position.

    ``derive_seed(sweep_seed, "sweep", canonical_json(params), replication)`` reduced below
    2**63, where ``params`` are the run's grid values and explicit overrides. A value added to
    a grid leaves the seeds (and run ids) of every other run as they were, so a re-run of the
    grown sweep in the same folder runs only the new runs.
    """
    return derive_seed(sweep_seed, "sweep", canonical_json(dict(params)), replication) % (
        MAX_SEED + 1
    )


def _describe(params: Mapping[str, Any], rep: int) -> str:
    parts = [f"{k}={_short(v)}" for k, v in params.items()]
    parts.append(f"replication={rep}")
    return ", ".join(parts)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else canonical_json(value)
    return text if len(text) <= 40 else text[:37] + "..."


# -- the index --------------------------------------------------------------------------------

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
_INDEX_FIELDS = (
    "status",
    "error",
    "action",
    "worker",
    "started_at",
    "finished_at",
    "seconds",
)


def _now() -> str:
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
def _transaction(con: sqlite3.Connection) -> Any:
    con.execute("BEGIN IMMEDIATE")
    try:
        yield con
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


class SweepIndex:
    """``index.sqlite``: one row per run. Each change is one transaction, safe across processes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
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
        self._con.close()

    def __enter__(self) -> SweepIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sync(self, runs: Sequence[PlannedRun], meta: Mapping[str, Any]) -> None:
        """Make the index list exactly ``runs``, keeping what it knew of each run id.

        Rows follow their run id, not their position: a value added at the front of a grid
        moves the rows after it and keeps their status, attempts and timings.
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


class _FolderLock:
    """An advisory lock on the sweep folder: one sweep process at a time (POSIX; else a no-op).

    The kernel drops it when the process dies, so a killed sweep never leaves a stale lock.
    """

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK_FILE
        self._fd: int | None = None

    def __enter__(self) -> _FolderLock:
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
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# -- the worker -------------------------------------------------------------------------------

_IMPORTED_PLUGINS: set[str] = set()
_APPLIED_REGISTRATIONS: set[str] = set()


def _import_plugins(modules: Iterable[str]) -> None:
    for module in modules:
        if module not in _IMPORTED_PLUGINS:
            importlib.import_module(module)
            _IMPORTED_PLUGINS.add(module)


def _pack_registrations(runs: Sequence[PlannedRun]) -> bytes | None:
    """The user's worlds and policies that the runs use, pickled for the workers (None: none).

    A world or policy registered in a notebook cell or a script exists only in that process:
    a worker process or a Ray node has never seen it. cloudpickle sends a factory defined in
    ``__main__`` (a notebook, a script, ``python -c``) by value, with the classes and closures
    it uses, and one from an importable module by reference (the worker imports the module).
    """
    from vivarium.build import POLICIES, WORLDS

    user: dict[str, dict[str, Any]] = {"world": {}, "policy": {}}
    for run in runs:
        c = run.config
        groups = c.agents if isinstance(c.agents, list) else None
        used = [("world", c.world, WORLDS)]
        policies = {g.policy for g in groups} if groups else {c.policy}
        used += [("policy", name, POLICIES) for name in sorted(policies)]
        for kind, name, table in used:
            factory = table[name]
            if getattr(factory, "__module__", None) != "vivarium.build":  # not a built-in
                user[kind].setdefault(name, factory)
    if not user["world"] and not user["policy"]:
        return None
    import cloudpickle

    for kind, table in user.items():
        for name, factory in sorted(table.items()):
            try:
                cloudpickle.dumps(factory)
            except Exception as exc:
                raise ConfigError(
                    f"sweep: the {kind} '{name}' cannot be sent to worker processes "
                    f"({_one_line(exc)}): make what its factory uses picklable, or use "
                    "backend='inline'"
                ) from None
    return cloudpickle.dumps(user)


def _apply_registrations(blob: bytes | None) -> None:
    """Register, in this worker, the worlds and policies the sweep process sent (once each)."""
    if not blob:
        return
    key = hashlib.sha256(blob).hexdigest()
    if key in _APPLIED_REGISTRATIONS:
        return
    import cloudpickle  # noqa: F401  (objects pickled by value need it to load)

    from vivarium.build import register_policy, register_world

    user = pickle.loads(blob)
    for name, factory in user["world"].items():
        register_world(name, factory)
    for name, factory in user["policy"].items():
        register_policy(name, factory)
    _APPLIED_REGISTRATIONS.add(key)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0].strip() if text else ""
    line = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    if isinstance(exc, VivariumError) and first:
        line = first
    return line if len(line) <= _MAX_ERROR_CHARS else line[: _MAX_ERROR_CHARS - 3] + "..."


def _resumable(path: Path, run_id: str) -> bool:
    """An unfinished trace of this run with at least one checkpoint to resume from."""
    if not path.is_file():
        return False
    from vivarium.trace.db import TraceDb

    try:
        con = TraceDb.connect_readonly(path)
    except TraceError:
        return False
    try:
        row = con.execute("SELECT run_id, status FROM runs").fetchone()
        if row is None or row[0] != run_id or row[1] == "complete":
            return False
        return con.execute("SELECT count(*) FROM checkpoints").fetchone()[0] > 0
    except sqlite3.Error:
        return False
    finally:
        con.close()


def _llm_transport(config: ExperimentConfig) -> dict[str, Any] | None:
    """What a resumed run needs that its trace does not record (cassette, API base and key)."""
    if config.llm is None:
        return None
    from vivarium.config import LLM_TRANSPORT_FIELDS

    data = config.llm.model_dump(include=set(LLM_TRANSPORT_FIELDS))
    return {k: v for k, v in data.items() if v is not None}


def run_task(task: dict[str, Any]) -> dict[str, Any]:
    """Run (or resume) one sweep run; never raises. The worker function of every backend.

    ``task`` is plain data: index, run_id, config (a ``model_dump``), path, index path, plugins,
    cwd, and the user's worlds and policies (``registrations``, see ``_pack_registrations``).
    Returns index, run_id, status, error, action, seconds.
    """
    start = time.perf_counter()
    idx = task["index"]
    result: dict[str, Any] = {"index": idx, "run_id": task["run_id"], "action": None}
    index: SweepIndex | None = None
    with contextlib.suppress(Exception):
        index = SweepIndex(task["index_path"])
        index.update(
            idx,
            attempt=True,
            status="running",
            error=None,
            worker=f"{socket.gethostname()}:{os.getpid()}",
            started_at=_now(),
            finished_at=None,
        )
    try:
        cwd = task.get("cwd")
        if cwd and os.path.isdir(cwd) and os.getcwd() != cwd:
            os.chdir(cwd)
        try:
            _import_plugins(task.get("plugins") or ())
        except Exception as exc:
            raise ConfigError(f"cannot import plugin module: {_one_line(exc)}") from None
        try:
            _apply_registrations(task.get("registrations"))
        except Exception as exc:
            raise ConfigError(
                f"cannot load the sweep's worlds and policies: {_one_line(exc)}"
            ) from None
        config = make_config(ExperimentConfig, task["config"], where=f"sweep run {idx}")
        path = Path(task["path"])
        from vivarium.errors import RunHealthWarning
        from vivarium.experiment import Experiment, Run, resume_run

        with warnings.catch_warnings():
            # The sweep reports every run's health at its end, in one warning (Sweep.problems).
            warnings.simplefilter("ignore", RunHealthWarning)
            if _resumable(path, task["run_id"]):
                try:
                    resume_run(path, progress=False, llm=_llm_transport(config))
                    result["action"] = "resumed"
                except (TraceError, ConfigError):  # the checkpoint cannot be used: start over
                    Experiment(config).run(path, progress=False)
                    result["action"] = "reran"
            else:
                Experiment(config).run(path, progress=False)
                result["action"] = "ran"
        meta = Run.open(path).metadata
        if meta["status"] != "complete":
            raise VivariumError(f"run ended with status '{meta['status']}'")
        result.update(status="complete", error=None)
    except Exception as exc:
        result.update(status="failed", error=_one_line(exc))
    result["seconds"] = round(time.perf_counter() - start, 6)
    if index is not None:
        with contextlib.suppress(Exception):
            index.update(
                idx,
                status=result["status"],
                error=result["error"],
                action=result["action"],
                finished_at=_now(),
                seconds=result["seconds"],
            )
        index.close()
    return result


# -- running ----------------------------------------------------------------------------------


def _finished(path: Path, run_id: str) -> bool:
    """The run's trace is there, complete, and passes validation."""
    if not path.is_file():
        return False
    from vivarium.trace.validate import validate_trace

    try:
        from vivarium.experiment import Run

        meta = Run.open(path).metadata
        if meta["run_id"] != run_id or meta["status"] != "complete":
            return False
        return validate_trace(path).ok
    except (TraceError, sqlite3.Error):
        return False


def _default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS
        return max(1, os.cpu_count() or 1)


def _execute_inline(
    tasks: list[dict[str, Any]], done: Callable[[dict[str, Any]], None], **_: Any
) -> None:
    for task in tasks:
        done(run_task(task))


# The local backend's workers are fresh interpreters started with ``python -c`` (never
# multiprocessing's spawn or forkserver, which re-run the user's script or notebook kernel
# module as ``__mp_main__`` in every worker: a script without a main guard would start its sweep
# again in each one). A worker imports only Vivarium, gets the sweep process's ``sys.path``, and
# exchanges pickled task and result dicts over pipes; the user's worlds and policies travel in
# the tasks (``_pack_registrations``).
_SYS_PATH_VAR = "VIVARIUM_SWEEP_SYS_PATH"
_WORKER_CODE = (
    "import json, os, sys; "
    f"sys.path[:] = json.loads(os.environ.pop({_SYS_PATH_VAR!r})); "
    "from vivarium.sweep import _worker_main; _worker_main()"
)
_HEADER = struct.Struct("!Q")
_MAX_START_FAILURES = 3
_STOP_SECONDS = 10.0


def _send(fd: int, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _recv(fd: int) -> Any:
    """The next message on ``fd``, or None when the other end is closed (or died)."""
    head = _read_exactly(fd, _HEADER.size)
    if head is None:
        return None
    data = _read_exactly(fd, _HEADER.unpack(head)[0])
    return None if data is None else pickle.loads(data)


def _watch_sweep(alive_fd: int) -> None:
    """Exit when the sweep process is gone (killed, or its kernel died).

    The sweep process holds the only write end of this pipe and never writes to it: the read
    returns only when the kernel closes it, at the sweep's death. A worker would otherwise
    finish its run racing a resumed sweep for the same trace; exiting at once leaves the trace
    as a kill would: resumable.
    """
    with contextlib.suppress(OSError):
        os.read(alive_fd, 1)
    os._exit(70)


def _interrupt_once(signum: int, frame: Any) -> None:
    """Ctrl-C in a worker: interrupt the run once, then ignore further Ctrl-Cs.

    A terminal's Ctrl-C reaches the whole process group and the sweep process passes it on as
    well, so a worker often gets two. The second must not cut short the recording of the
    first (the run's ``interrupted`` status and the trace's close).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _worker_main() -> None:
    """A local worker: run each task the sweep process sends, send back its result."""
    task_fd, result_fd, alive_fd = (int(arg) for arg in sys.argv[1:4])
    os.environ.setdefault("VIVARIUM_PROGRESS", "0")
    signal.signal(signal.SIGINT, _interrupt_once)
    threading.Thread(
        target=_watch_sweep, args=(alive_fd,), name="vivarium-sweep-watchdog", daemon=True
    ).start()
    try:
        _send(result_fd, {"ready": os.getpid()})
        while (task := _recv(task_fd)) is not None:
            _send(result_fd, run_task(task))
    except KeyboardInterrupt:  # Ctrl-C: the run is recorded as interrupted, resumable
        sys.exit(130)


class _LocalWorker:
    """One worker process, its pipes, and the task it is running."""

    def __init__(self, env: dict[str, str]) -> None:
        task_r, self.task_w = os.pipe()
        self.result_r, result_w = os.pipe()
        alive_r, self.alive_w = os.pipe()
        child = (task_r, result_w, alive_r)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _WORKER_CODE, *map(str, child)],
                pass_fds=child,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except BaseException:
            for fd in (self.task_w, self.result_r, self.alive_w):
                os.close(fd)
            raise
        finally:
            for fd in child:
                os.close(fd)
        self.task: dict[str, Any] | None = None
        self.ready = False

    def give(self, task: dict[str, Any]) -> None:
        self.task = task
        with contextlib.suppress(OSError):  # gone: its closed result pipe says so
            _send(self.task_w, task)

    def finish(self) -> None:
        """No more tasks: the worker exits when it reads the end of its task pipe."""
        if self.task_w >= 0:
            os.close(self.task_w)
            self.task_w = -1

    def close(self, timeout: float) -> int:
        self.finish()
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        for fd in (self.result_r, self.alive_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        return code


def _worker_env() -> dict[str, str]:
    paths = [os.getcwd() if p == "" else p for p in sys.path]
    return {**os.environ, "VIVARIUM_PROGRESS": "0", _SYS_PATH_VAR: json.dumps(paths)}


def _death(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


def _execute_local(
    tasks: list[dict[str, Any]],
    done: Callable[[dict[str, Any]], None],
    *,
    max_workers: int,
    **_: Any,
) -> None:
    """Run ``tasks`` on up to ``max_workers`` worker processes, each started once.

    A worker that dies fails only the run it was running (a segfault, the OOM killer); a new
    worker takes its place. Workers that cannot start at all fail the runs with that reason.
    """
    if not sys.executable:
        raise ConfigError("sweep: no Python executable to start workers with; use backend='inline'")
    queue = collections.deque(tasks)
    env = _worker_env()
    selector = selectors.DefaultSelector()
    workers: list[_LocalWorker] = []
    start_failures = 0
    started_once = False

    def start() -> None:
        worker = _LocalWorker(env)
        workers.append(worker)
        selector.register(worker.result_r, selectors.EVENT_READ, worker)
        feed(worker)

    def feed(worker: _LocalWorker) -> None:
        if queue:
            worker.give(queue.popleft())
        else:
            worker.finish()

    try:
        for _ in range(min(max_workers, len(queue))):
            start()
        while any(w.task is not None for w in workers):
            for key, _events in selector.select():
                worker = key.data
                message = _recv(worker.result_r)
                if message is not None and "ready" in message:
                    worker.ready = started_once = True
                    continue
                if message is not None:
                    worker.task = None
                    done(message)
                    feed(worker)
                    continue
                # The worker is gone.
                selector.unregister(worker.result_r)
                workers.remove(worker)
                code = worker.close(_STOP_SECONDS)
                task, worker.task = worker.task, None
                if worker.ready:
                    if task is not None:
                        died = f"the worker process running this run died ({_death(code)})"
                        done(_failure(task, died))
                    if queue:
                        start()
                    continue
                if task is not None:
                    queue.appendleft(task)
                start_failures += 1
                if started_once and start_failures < _MAX_START_FAILURES:
                    start()
                elif not any(w.task is not None for w in workers):
                    error = (
                        f"the worker processes could not start ({_death(code)}; their error is "
                        "on stderr); use backend='inline' to run in this process"
                    )
                    while queue:
                        done(_failure(queue.popleft(), error))
    except BaseException:
        _stop_workers(workers)
        raise
    finally:
        for worker in workers:
            worker.close(_STOP_SECONDS)
        selector.close()


def _stop_workers(workers: Sequence[_LocalWorker]) -> None:
    """Interrupted: Ctrl-C the workers (their runs end as interrupted, resumable), then wait.

    A terminal's Ctrl-C reaches the workers itself; a notebook's interrupt reaches only the
    kernel, so it is passed on. A worker that does not stop in time is killed, as a crash
    would: its trace stays resumable.
    """
    for worker in workers:
        if worker.process.poll() is None:
            with contextlib.suppress(OSError):
                worker.process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + _STOP_SECONDS
    for worker in workers:
        worker.close(max(0.0, deadline - time.monotonic()))


def _failure(task: dict[str, Any], error: str) -> dict[str, Any]:
    return {
        "index": task["index"],
        "run_id": task["run_id"],
        "status": "failed",
        "error": error,
        "action": None,
    }


def _execute_ray(
    tasks: list[dict[str, Any]],
    done: Callable[[dict[str, Any]], None],
    *,
    max_workers: int | None,
    ray_address: str | None,
    **_: Any,
) -> None:
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "backend 'ray' needs Ray: pip install 'vivarium-lab[scale]' (or 'ray>=2.9')"
        ) from None
    import logging

    if not ray.is_initialized():
        if ray_address:
            ray.init(address=ray_address, logging_level=logging.WARNING)
        else:
            ray.init(
                num_cpus=max_workers or _default_workers(),
                include_dashboard=False,
                logging_level=logging.WARNING,
            )
    remote = ray.remote(num_cpus=1, max_retries=0)(run_task)
    limit = max_workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    queue = list(tasks)
    running: dict[Any, dict[str, Any]] = {}
    try:
        while queue or running:
            while queue and len(running) < limit:
                task = queue.pop(0)
                running[remote.remote(task)] = task
            ready, _ = ray.wait(list(running), num_returns=1)
            for ref in ready:
                task = running.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as exc:  # the worker died, or Ray could not run the task
                    result = {"index": task["index"], "run_id": task["run_id"], "action": None}
                    result.update(status="failed", error=_one_line(exc))
                done(result)
    except BaseException:
        for ref in running:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        raise


_EXECUTORS: dict[str, Callable[..., None]] = {
    "inline": _execute_inline,
    "local": _execute_local,
    "ray": _execute_ray,
}


def run_sweep(
    base: Experiment | ExperimentConfig | Mapping[str, Any],
    grid: Mapping[str, Sequence[Any]] | None = None,
    configs: Sequence[ExperimentConfig | Mapping[str, Any]] | None = None,
    *,
    folder: str | os.PathLike[str] | None = None,
    backend: Backend = "local",
    max_workers: int | None = None,
    ray_address: str | None = None,
    seed: int | None = None,
    progress: bool | None = None,
    replications: int | None = None,
    plugins: Sequence[str] | None = None,
) -> Sweep:
    """Run every run of a sweep that is not already done, and return the ``Sweep``.

    ``grid`` maps config fields (dotted for nested ones: ``llm.temperature``) to lists of values;
    ``configs`` lists explicit configs (dicts of overrides of ``base``, or whole configs).
    Traces go to ``folder`` (default ``runs/<name>-sweep/``) with ``index.sqlite``. Finished runs
    are skipped, interrupted ones resumed or redone. A failed run is recorded and the others go
    on; then, if every run failed, ``SweepFailed`` is raised (one line, the first error; the
    ``Sweep`` is its ``sweep``), and if some did, a ``SweepWarning`` gives their count and the
    first error. Worlds and policies registered in this process (a notebook cell, a script) are
    sent to the workers; ``plugins`` names modules that workers import first.
    """
    from vivarium.experiment import DEFAULT_RUNS_DIR, _progress_enabled

    if backend not in BACKENDS:
        raise ConfigError(f"sweep: backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if max_workers is not None and (
        not isinstance(max_workers, int) or isinstance(max_workers, bool) or max_workers < 1
    ):
        raise ConfigError(f"sweep: max_workers must be a whole number >= 1, not {max_workers!r}")
    base_config = _as_config(base)
    runs = plan_sweep(base_config, grid, configs, seed=seed, replications=replications)
    out = Path(folder) if folder is not None else DEFAULT_RUNS_DIR / f"{base_config.name}-sweep"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create sweep folder {out}: {exc.strerror}") from None
    out = out.resolve()
    modules = list(plugins or ())
    registrations = None if backend == "inline" else _pack_registrations(runs)
    param_names: list[str] = []
    for run in runs:
        param_names.extend(k for k in run.params if k not in param_names and k != "seed")
    meta = {
        "name": base_config.name,
        "seed": base_config.seed if seed is None else seed,
        "params": param_names,
        "grid": {k: list(v) for k, v in (grid or {}).items()},
        "replications": replications or 1,
        "runs": len(runs),
        "updated_at": _now(),
    }
    with _FolderLock(out), SweepIndex(out / INDEX_FILE) as index:
        index.sync(runs, meta)
        tasks: list[dict[str, Any]] = []
        skipped = 0
        for run in runs:
            path = out / run.file
            if _finished(path, run.run_id):
                index.update(run.index, status="complete", error=None)
                skipped += 1
                continue
            index.update(run.index, status="pending")
            tasks.append(
                {
                    "index": run.index,
                    "run_id": run.run_id,
                    "config": _task_config(run.config, path),
                    "path": str(path),
                    "index_path": str(index.path),
                    "plugins": modules,
                    "registrations": registrations,
                    "cwd": os.getcwd(),
                }
            )
        bar = None
        if _progress_enabled(progress):
            from tqdm.auto import tqdm

            bar = tqdm(
                total=len(runs),
                initial=skipped,
                desc=f"{base_config.name} sweep",
                unit="run",
                leave=True,
            )
        failures = 0

        def done(result: dict[str, Any]) -> None:
            nonlocal failures
            status = result.get("status", "failed")
            fields = {"status": status, "error": result.get("error")}
            if result.get("action"):
                fields["action"] = result["action"]
            if result.get("seconds") is not None:
                fields["seconds"] = result["seconds"]
                fields["finished_at"] = _now()
            index.update(result["index"], **fields)
            if status != "complete":
                failures += 1
            if bar is not None:
                bar.update(1)
                if failures:
                    bar.set_postfix(failed=failures)

        started = {t["index"] for t in tasks}
        try:
            if tasks:
                workers = max_workers or _default_workers()
                _EXECUTORS[backend](
                    tasks,
                    done,
                    max_workers=workers if backend != "ray" else max_workers,
                    ray_address=ray_address,
                    index=index,
                )
        except BaseException as exc:
            # Interrupted: the runs that were running are recorded as failed (their traces are
            # resumable), those not started stay pending; a re-run of the sweep does the rest.
            reason = f"interrupted ({_one_line(exc)}): re-run the sweep to finish it"
            for row in index.rows():
                if row["idx"] in started and row["status"] == "running":
                    index.update(row["idx"], status="failed", error=reason)
            raise
        finally:
            if bar is not None:
                bar.close()
    sweep = Sweep.open(out)
    _report_failures(sweep)
    return sweep


def _report_failures(sweep: Sweep) -> None:
    """Every run failed: raise. Some did, or some complete runs are not clean results (their
    decisions fell back: a policy raised, replies were unusable): warn, with the count and the
    first error."""
    failed, problems = sweep.failed_count, sweep.problems
    if not failed and not problems:
        return
    where = f"{sweep.folder / INDEX_FILE}"
    if failed and failed == len(sweep):
        raise SweepFailed(
            f"sweep {sweep.name}: all {failed} runs failed; first: {sweep.first_error} "
            f"(every error: sweep.failed, or {where})",
            sweep,
        )
    parts = []
    if failed:
        parts.append(
            f"{failed} of {len(sweep)} runs failed; first: {sweep.first_error} (every error: "
            f"sweep.failed); the frames hold the {len(sweep) - failed} complete runs"
        )
    if problems:
        parts.append(
            f"{len(problems)} of {len(sweep)} runs completed with problems; first: {problems[0]} "
            "(every one: sweep.problems)"
        )
    warnings.warn(
        f"sweep {sweep.name}: " + "; ".join(parts), SweepWarning, stacklevel=_user_stacklevel()
    )


def _first_fallback(path: Path) -> str:
    """``; first: step 3, agent_001: policy error: ...`` for a trace with fallbacks, else ""."""
    from vivarium.trace.db import TraceDb

    with contextlib.suppress(TraceError, sqlite3.Error):
        con = TraceDb.connect_readonly(path)
        try:
            row = con.execute(
                "SELECT step, agent_id, error FROM actions WHERE fallback = 1 LIMIT 1"
            ).fetchone()
        finally:
            con.close()
        if row is not None:
            return f"; first: step {row[0]}, {row[1]}: {_short_error(row[2])}"
    return ""


def _short_error(text: Any) -> str:
    line = " ".join(str(text or "no reason recorded").split())
    return line if len(line) <= 200 else line[:197] + "..."


def _user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first caller outside Vivarium."""
    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _task_config(config: ExperimentConfig, path: Path) -> dict[str, Any]:
    """The config a worker rebuilds: plain data, cassette path made absolute."""
    data = config.model_dump()
    data["db"] = str(path)
    llm = data.get("llm")
    if llm and llm.get("cache"):
        llm["cache"] = str(Path(llm["cache"]).expanduser().resolve())
    return data


# -- results ----------------------------------------------------------------------------------


def _param_array(values: list[Any]) -> pa.Array:
    """One typed Arrow column for a parameter: scalars as they are, anything else as JSON."""
    import pyarrow as pa

    if all(v is None or isinstance(v, bool | int | float | str) for v in values):
        kinds = {type(v) for v in values if v is not None}
        if not (kinds & {str} and kinds - {str}) and not (kinds & {bool} and kinds - {bool}):
            try:
                return pa.array(values)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                pass
    return pa.array([None if v is None else canonical_json(v) for v in values], pa.string())


class Sweep(FrameViews):
    """The runs of a sweep, read from its folder: the index and the merged frames."""

    frame_names = SWEEP_FRAMES

    def __init__(self, folder: Path, meta: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        self.folder = folder
        self.meta = meta
        self.name: str = meta.get("name", folder.name)
        self.params: list[str] = list(meta.get("params") or [])
        self._rows = rows
        self._tables: dict[str, Any] = {}
        self._runs: list[Run] | None = None
        self._problems: list[str] | None = None

    @classmethod
    def open(cls, folder: str | os.PathLike[str]) -> Sweep:
        """Read a sweep folder (while it runs, too: the index is read in one transaction)."""
        p = Path(folder)
        con = _connect_index(p / INDEX_FILE, readonly=True)
        try:
            con.execute("BEGIN")  # one snapshot of meta and rows
            meta = _read_meta(con)
            if meta.get("format") != INDEX_FORMAT:
                raise TraceError(f"{p / INDEX_FILE} is not a Vivarium sweep index")
            rows = _read_index_rows(con)
            con.execute("COMMIT")
        except sqlite3.Error as exc:
            raise TraceError(f"cannot read sweep index {p / INDEX_FILE}: {exc}") from None
        finally:
            con.close()
        return cls(p, meta, rows)

    # -- the index ----------------------------------------------------------------------------
    @property
    def index(self) -> pd.DataFrame:
        """One row per run: run, run_id, replication, seed, the parameters, status, error..."""
        import pandas as pd

        records = []
        for row in self._rows:
            record = {
                "run": row["idx"],
                "run_id": row["run_id"],
                "replication": row["replication"],
                "seed": row["seed"],
            }
            for name in self.params:
                value = row["params"].get(name)
                record[name] = (
                    value if not isinstance(value, list | dict) else canonical_json(value)
                )
            record.update(
                status=row["status"],
                error=row["error"],
                path=str(self.folder / row["path"]),
                attempts=row["attempts"],
                action=row["action"],
                seconds=row["seconds"],
                started_at=row["started_at"],
                finished_at=row["finished_at"],
            )
            records.append(record)
        columns = ["run", "run_id", "replication", "seed", *self.params, "status", "error"]
        columns += ["path", "attempts", "action", "seconds", "started_at", "finished_at"]
        return pd.DataFrame.from_records(records, columns=columns)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for row in self._rows:
            out[row["status"]] = out.get(row["status"], 0) + 1
        return out

    @property
    def ok(self) -> bool:
        """Every run is complete."""
        return all(row["status"] == "complete" for row in self._rows)

    @property
    def failed(self) -> pd.DataFrame:
        """The index rows of runs that are not complete, with their errors."""
        frame = self.index
        return frame[frame["status"] != "complete"].reset_index(drop=True)

    @property
    def problems(self) -> list[str]:
        """Complete runs that are not clean results (see ``Run.health``: decisions that fell
        back, every LLM call failed), one line each in run order, with the first reason."""
        if self._problems is None:
            from vivarium.trace.health import run_health

            out = []
            for row in self._rows:
                if row["status"] != "complete":
                    continue
                path = self.folder / row["path"]
                try:
                    health = run_health(path)
                except (TraceError, sqlite3.Error):
                    continue
                if not health.ok:
                    where = f"run {row['idx']} ({_describe(row['params'], row['replication'])})"
                    out.append(f"{where}: {health}{_first_fallback(path)}")
            self._problems = out
        return self._problems

    @property
    def failed_count(self) -> int:
        """How many runs are not complete (failed, or never finished)."""
        return sum(row["status"] != "complete" for row in self._rows)

    @property
    def first_error(self) -> str | None:
        """The first run that is not complete, with its parameters and error (None: none)."""
        for row in self._rows:
            if row["status"] != "complete":
                error = row["error"] or f"status {row['status']}"
                return f"run {row['idx']} ({_describe(row['params'], row['replication'])}): {error}"
        return None

    @property
    def runs(self) -> list[Run]:
        """The complete runs, in run order."""
        if self._runs is None:
            from vivarium.experiment import Run

            self._runs = [
                Run.open(self.folder / row["path"])
                for row in self._rows
                if row["status"] == "complete"
            ]
        return self._runs

    # -- frames -------------------------------------------------------------------------------
    def arrow(self, name: str) -> pa.Table:
        """A merged trace table (complete runs, in run order) with the run columns in front."""
        if name not in SWEEP_FRAMES:
            raise ValueError(f"unknown frame '{name}' (known: {', '.join(SWEEP_FRAMES)})")
        if name in self._tables:
            return self._tables[name]
        import pyarrow as pa

        rows = [row for row in self._rows if row["status"] == "complete"]
        run_columns: dict[str, pa.Array] = {
            "run": pa.array([r["idx"] for r in rows], pa.int64()),
            "replication": pa.array([r["replication"] for r in rows], pa.int64()),
            "seed": pa.array([r["seed"] for r in rows], pa.int64()),
        }
        for param in self.params:
            run_columns[param] = _param_array([r["params"].get(param) for r in rows])
        tables = []
        for i, run in enumerate(self.runs):
            table = run.arrow(name)
            n = table.num_rows
            own = set(table.column_names)
            columns = {"run_id": table.column("run_id")}
            for col, values in run_columns.items():
                label = col if col not in own else f"sweep.{col}"
                columns[label] = pa.repeat(values[i], n)
            for col in table.column_names:
                if col != "run_id":
                    columns[col] = table.column(col)
            tables.append(pa.table(columns))
        if tables:
            merged = pa.concat_tables(tables, promote_options="permissive")
        else:
            merged = self._empty(name, run_columns)
        self._tables[name] = merged
        return merged

    def _empty(self, name: str, run_columns: dict[str, Any]) -> pa.Table:
        import pyarrow as pa

        fields = [pa.field("run_id", pa.dictionary(pa.int32(), pa.string()))]
        fields += [pa.field(k, v.type) for k, v in run_columns.items()]
        return pa.schema(fields).empty_table()

    @property
    def agents(self) -> pd.DataFrame:
        """Agents of every run; the run's seed is ``sweep.seed`` here (``seed`` is the agent's)."""
        return self.frame("agents")

    @property
    def source_id(self) -> str:
        return f"sweep {self.name}"

    def parquet_tables(self) -> dict[str, Any]:
        """Every merged frame, and the index."""
        import pyarrow as pa

        tables = super().parquet_tables()
        tables["index"] = pa.Table.from_pandas(self.index, preserve_index=False)
        return tables

    # -- views --------------------------------------------------------------------------------
    def summary(self) -> str:
        """One line: ``sweep demo: 8 runs: 7 complete, 1 failed (runs/demo-sweep)``, and when
        runs failed, the first error: ``...; first failure: run 3 (agents=5, ...): ...``."""
        counts = {k: v for k, v in self.counts().items() if v}
        parts = ", ".join(f"{v} {k}" for k, v in counts.items()) or "no runs"
        line = f"sweep {self.name}: {len(self._rows)} runs: {parts} ({self.folder})"
        first = self.first_error
        if first is not None:
            line += f"; first failure: {first}"
        if self.problems:
            line += f"; {len(self.problems)} complete runs with problems, first: {self.problems[0]}"
        return line

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.counts().items() if v)
        first = self.first_error
        failure = "" if first is None else f", first_failure={first!r}"
        if self.problems:
            failure += f", with_problems={len(self.problems)}, first_problem={self.problems[0]!r}"
        return (
            f"Sweep(name={self.name!r}, runs={len(self._rows)}, {counts}{failure}, "
            f"folder='{self.folder}')"
        )

    def _repr_html_(self) -> str:
        from html import escape

        head = escape(self.summary())
        failed = [r for r in self._rows if r["status"] == "failed"]
        items = "".join(
            f"<li>run {r['idx']} ({escape(r['run_id'])}): {escape(r['error'] or '')}</li>"
            for r in failed[:10]
        )
        more = f"<p>... and {len(failed) - 10} more failed runs</p>" if len(failed) > 10 else ""
        body = f"<ul>{items}</ul>{more}" if items else ""
        return f"<div><b>Vivarium sweep</b><p>{head}</p>{body}</div>"


# -- the command line -------------------------------------------------------------------------


# The keys of a config file's ``sweep:`` section, with what each must be.
SWEEP_SETTINGS = {
    "grid": "a mapping of field -> list of values",
    "configs": "a list of dicts of overrides",
    "replications": "a whole number >= 1",
    "backend": "local, ray or inline",
    "max_workers": "a whole number >= 1",
    "seed": "an integer in [0, 2**63)",
    "folder": "a folder path",
    "ray_address": "a Ray cluster address",
    "plugins": "a list of module names",
}


def split_sweep_section(
    data: Mapping[str, Any], where: str = "config"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a config mapping into (experiment fields, sweep settings), checking the latter.

    ``sweep: {grid: {seed: [1, 2, 3], agents: [5, 50]}, replications: 2, backend: local,
    max_workers: 4}``. Settings come back as keyword arguments of ``run_sweep`` (plus ``grid``
    and ``configs``); a wrong key or value raises a one-line ``ConfigError``.
    """
    experiment = {k: v for k, v in data.items() if k != "sweep"}
    section = data.get("sweep")
    if section is None:
        return experiment, {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"{where}: sweep: expected a mapping, got {type(section).__name__}")
    problems = []
    settings: dict[str, Any] = {}
    for key, value in section.items():
        if key not in SWEEP_SETTINGS:
            problems.append(f"sweep.{key}: unknown field (known: {', '.join(SWEEP_SETTINGS)})")
            continue
        ok = True
        if key == "grid":
            ok = isinstance(value, Mapping) and all(
                isinstance(v, list) and v for v in value.values()
            )
        elif key == "configs":
            ok = isinstance(value, list) and all(isinstance(v, Mapping) for v in value) and value
        elif key in {"replications", "max_workers"}:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        elif key == "seed":
            ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SEED
        elif key == "backend":
            ok = value in BACKENDS
        elif key in {"folder", "ray_address"}:
            ok = isinstance(value, str) and bool(value)
        elif key == "plugins":
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        if not ok:
            problems.append(f"sweep.{key}: expected {SWEEP_SETTINGS[key]}, got {value!r}")
        else:
            settings[key] = dict(value) if isinstance(value, Mapping) else value
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems))
    return experiment, settings


def parse_grid_items(items: Iterable[str]) -> dict[str, list[Any]]:
    """``["agents=5,50", "llm.temperature=0,0.7"]`` -> a grid (values parsed as YAML scalars).

    For ``vvm sweep --grid agents=5,50``; a value that is a YAML list (``agents=[5, 50]``) is
    taken as it is.
    """
    import yaml

    grid: dict[str, list[Any]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or not text.strip():
            raise ConfigError(f"--grid {item!r}: expected FIELD=VALUE,VALUE,...")
        try:
            parsed = yaml.safe_load(text)
        except yaml.YAMLError:
            parsed = None
        if isinstance(parsed, list):
            values = parsed
        else:
            values = [yaml.safe_load(part) if part.strip() else "" for part in text.split(",")]
        grid.setdefault(key, []).extend(values)
    return grid


def _set_base_dir(data: dict[str, Any], config_path: Path) -> None:
    """Relative agent folders resolve from the config's folder (or the parent where they
    exist), as ``Experiment.from_file`` does."""
    if "base_dir" not in ExperimentConfig.model_fields or "base_dir" in data:
        return
    groups = data.get("agents")
    if not isinstance(groups, list):
        return
    folders = [g["agent"] for g in groups if isinstance(g, Mapping) and g.get("agent")]
    if not folders:
        return
    here = config_path.resolve().parent
    for base in (here, *here.parents):
        if all((base / f).exists() for f in folders):
            data["base_dir"] = str(base)
            return


def main_sweep(
    config_path: str | os.PathLike[str],
    grid: Mapping[str, Sequence[Any]] | None = None,
    folder: str | os.PathLike[str] | None = None,
    backend: Backend | None = None,
    max_workers: int | None = None,
    *,
    replications: int | None = None,
    seed: int | None = None,
    ray_address: str | None = None,
    progress: bool | None = None,
    overrides: Mapping[str, Any] | None = None,
    plugins: Sequence[str] | None = None,
) -> Sweep:
    """``vvm sweep CONFIG``: run the sweep a config file describes; arguments given win.

    The file holds an experiment config and an optional ``sweep:`` section (see
    ``split_sweep_section``). ``grid`` entries replace the file's entries of the same field;
    ``overrides`` are experiment fields (the shared flags: steps, agents, ...). Plugin modules
    are imported before the config is checked, so it may name the worlds they register.
    """
    from vivarium.config import load_config_data

    data = load_config_data(config_path)
    experiment, settings = split_sweep_section(data, where=str(config_path))
    modules = [*settings.get("plugins", []), *(plugins or [])]
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise ConfigError(
                f"{config_path}: sweep.plugins: cannot import {module}: {_one_line(exc)}"
            ) from None
    experiment.update(overrides or {})
    _set_base_dir(experiment, Path(config_path))
    base = make_config(ExperimentConfig, experiment, where=str(config_path))
    merged_grid = {**settings.get("grid", {}), **(dict(grid) if grid else {})}
    return run_sweep(
        base,
        merged_grid or None,
        settings.get("configs"),
        folder=folder if folder is not None else settings.get("folder"),
        backend=backend or settings.get("backend", "local"),
        max_workers=max_workers if max_workers is not None else settings.get("max_workers"),
        ray_address=ray_address or settings.get("ray_address"),
        seed=seed if seed is not None else settings.get("seed"),
        progress=progress,
        replications=replications if replications is not None else settings.get("replications"),
        plugins=modules or None,
    )


__all__ = [
    "BACKENDS",
    "PlannedRun",
    "Sweep",
    "SweepIndex",
    "main_sweep",
    "parse_grid_items",
    "plan_sweep",
    "run_seed_of",
    "run_sweep",
    "run_task",
    "split_sweep_section",
]
