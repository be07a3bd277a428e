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
  the other runs go on.
- **Seeds.** Each run's seed is recorded. Unless the grid (or a config) gives ``seed``, run ``i``
  gets ``derive_seed(sweep_seed, "sweep", i)`` reduced below 2**63, so replications never share
  a seed by accident; with a given seed, replication 0 keeps it and replication ``r > 0`` gets
  ``derive_seed(seed, "replication", r)``.
- **Backends.** ``local`` is a process pool (``forkserver`` where the platform has it, else
  ``spawn``; never ``fork``), so it works from Jupyter on Linux and macOS: workers receive plain
  config dicts and import the module that registered any custom world or policy (detected from
  the registries, or named with ``plugins=``). ``ray`` runs one Ray task per run (``ray_address``
  joins a cluster whose nodes share the sweep folder); ``inline`` runs in this process, in turn.
  Every backend and worker count gives the same merged frames.
- **LLM cassettes.** Runs whose config names ``llm.cache`` share that cassette; it is safe for
  concurrent writers, so one sweep records every reply once and replays offline afterwards.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import itertools
import json
import os
import socket
import sqlite3
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from vivarium.config import MAX_SEED, ExperimentConfig, make_config
from vivarium.errors import ConfigError, TraceError, VivariumError
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
                    run_seed = derive_seed(sweep_seed, "sweep", i) % (MAX_SEED + 1)
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
                    warnings.warn(
                        f"sweep runs {files[run_id]} and {i} have the same config (run id "
                        f"{run_id}); run {i} is recorded as {run_id}-{i}",
                        stacklevel=2,
                    )
                    run_id = f"{run_id}-{i}"
                    config = config.model_copy(update={"run_id": run_id})
                files[run_id] = i
                runs.append(
                    PlannedRun(i, params, rep, config.seed, config, run_id, f"{run_id}.sqlite")
                )
    return runs


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
        """Make the index list exactly ``runs`` (keeping what it knew of runs it already held)."""
        with _transaction(self._con) as con:
            for key, value in meta.items():
                con.execute(
                    "INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, canonical_json(value))
                )
            known = {
                row[0]: row[1:]
                for row in con.execute("SELECT idx, run_id, status FROM runs").fetchall()
            }
            for run in runs:
                identity = canonical_json(run.config.identity())
                params = canonical_json(run.params)
                old = known.get(run.index)
                if old is not None and old[0] == run.run_id:
                    con.execute(
                        "UPDATE runs SET params=?, replication=?, seed=?, path=?, config=? "
                        "WHERE idx=?",
                        (params, run.replication, run.seed, run.file, identity, run.index),
                    )
                else:
                    con.execute(
                        "INSERT OR REPLACE INTO runs (idx, run_id, params, replication, seed, "
                        "status, path, config) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?)",
                        (
                            run.index,
                            run.run_id,
                            params,
                            run.replication,
                            run.seed,
                            run.file,
                            identity,
                        ),
                    )
            con.execute("DELETE FROM runs WHERE idx >= ?", (len(runs),))

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
_WATCHDOG_STARTED = False


def _import_plugins(modules: Iterable[str]) -> None:
    for module in modules:
        if module not in _IMPORTED_PLUGINS:
            importlib.import_module(module)
            _IMPORTED_PLUGINS.add(module)


def _process_token(pid: int) -> str | None:
    """Something that tells a live process from a dead one or a new one with its pid.

    On Linux: its start time, from /proc (None for a zombie or no process). Elsewhere: "alive"
    while ``kill(pid, 0)`` finds the process.
    """
    stat = Path(f"/proc/{pid}/stat")
    if sys.platform.startswith("linux") and Path("/proc/self/stat").exists():
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return None if fields[0] in {"Z", "X"} else fields[19]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return "alive"


def _init_local_worker(sweep_pid: int, token: str | None) -> None:
    """In each pool process: stop when the sweep process is gone (killed, or its kernel died).

    A pool worker outlives a killed sweep process (it waits on a queue it holds both ends of),
    and would race a resumed sweep for the same trace. The watchdog sees the sweep process
    vanish and exits at once, leaving the trace as a kill would: resumable.
    """
    global _WATCHDOG_STARTED
    if _WATCHDOG_STARTED:
        return
    _WATCHDOG_STARTED = True
    os.environ.setdefault("VIVARIUM_PROGRESS", "0")
    if token is None:
        return

    def watch() -> None:
        while True:
            time.sleep(0.25)
            if _process_token(sweep_pid) != token:
                os._exit(70)

    threading.Thread(target=watch, name="vivarium-sweep-watchdog", daemon=True).start()


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
    cwd. Returns index, run_id, status, error, action, seconds.
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
        config = make_config(ExperimentConfig, task["config"], where=f"sweep run {idx}")
        path = Path(task["path"])
        from vivarium.experiment import Experiment, Run, resume_run

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


def _plugin_modules(runs: Sequence[PlannedRun], extra: Iterable[str] | None) -> list[str]:
    """Modules that registered the worlds and policies the runs use (workers import them)."""
    from vivarium.build import POLICIES, WORLDS

    found: list[str] = list(extra or ())
    for run in runs:
        c = run.config
        factories = [WORLDS.get(c.world)]
        groups = c.agents if isinstance(c.agents, list) else None
        names = {g.policy for g in groups} if groups else {c.policy}
        factories.extend(POLICIES.get(n) for n in sorted(names))
        for factory in factories:
            module = getattr(factory, "__module__", None)
            if not module or module in found or module in {"__main__", "__mp_main__"}:
                continue
            if module == "vivarium.build":
                continue
            found.append(module)
    return found


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


def _mp_context() -> Any:
    import multiprocessing as mp

    methods = mp.get_all_start_methods()
    return mp.get_context("forkserver" if "forkserver" in methods else "spawn")


def _execute_inline(
    tasks: list[dict[str, Any]], done: Callable[[dict[str, Any]], None], **_: Any
) -> None:
    for task in tasks:
        done(run_task(task))


def _execute_local(
    tasks: list[dict[str, Any]],
    done: Callable[[dict[str, Any]], None],
    *,
    max_workers: int,
    index: SweepIndex,
    **_: Any,
) -> None:
    queue = list(tasks)
    suspects: list[dict[str, Any]] = []
    while queue or suspects:
        # After a crash, the runs that were running are retried one at a time, so the one that
        # kills its worker is found (and failed) without taking the others down with it.
        if suspects:
            batch, workers, suspects = suspects, 1, []
        else:
            batch, workers, queue = queue, min(max_workers, len(queue)), []
        finished, broken = _run_pool(batch, workers, done)
        if not broken:
            continue
        state = {row["idx"]: row["status"] for row in index.rows()}
        left = [t for t in batch if t["index"] not in finished]
        running = [t for t in left if state.get(t["index"]) == "running"]
        waiting = [t for t in left if state.get(t["index"]) != "running"]
        if not finished and not running:
            for task in left:
                done(_failure(task, _NO_START))
            for task in queue + suspects:
                done(_failure(task, _NO_START))
            return
        for task in left:
            index.update(task["index"], status="pending")
        if workers == 1:
            for task in running:
                done(_failure(task, "the worker process running this run died"))
            suspects = waiting
        else:
            suspects = running
            queue = waiting + queue


_NO_START = (
    "the worker processes could not start (their error is on stderr): run a sweep from a "
    "notebook, or from a script file under `if __name__ == '__main__':`, or use "
    "backend='inline'"
)


def _failure(task: dict[str, Any], error: str) -> dict[str, Any]:
    return {
        "index": task["index"],
        "run_id": task["run_id"],
        "status": "failed",
        "error": error,
        "action": None,
    }


def _run_pool(
    batch: list[dict[str, Any]], workers: int, done: Callable[[dict[str, Any]], None]
) -> tuple[set[int], bool]:
    """Run ``batch`` in a fresh process pool; returns the runs finished and whether it broke."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    executor = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=_mp_context(),
        initializer=_init_local_worker,
        initargs=(os.getpid(), _process_token(os.getpid())),
    )
    futures = {executor.submit(run_task, task): task for task in batch}
    finished: set[int] = set()
    broken = False
    try:
        waiting = set(futures)
        while waiting:
            ready, waiting = wait(waiting, return_when=FIRST_COMPLETED)
            for future in ready:
                task = futures[future]
                try:
                    result = future.result()
                except BrokenProcessPool:
                    broken = True
                    continue
                except Exception as exc:  # the task could not be sent: this run only
                    result = _failure(task, _one_line(exc))
                finished.add(task["index"])
                done(result)
    except BaseException:
        _stop_pool(executor)
        raise
    executor.shutdown(wait=True, cancel_futures=True)
    return finished, broken


def _stop_pool(executor: Any) -> None:
    """Interrupted: stop the workers now (their runs stay resumable), drop queued runs."""
    processes = list(getattr(executor, "_processes", {}).values())
    for process in processes:
        with contextlib.suppress(Exception):
            process.terminate()
    executor.shutdown(wait=False, cancel_futures=True)


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
    are skipped, interrupted ones resumed or redone; a failed run is recorded, not raised.
    ``plugins`` names modules that workers import to register custom worlds and policies (the
    modules that registered those the runs use are found on their own).
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
    modules = _plugin_modules(runs, plugins)
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
            # Interrupted: what was running or queued is recorded as failed; a rerun redoes it.
            for row in index.rows():
                if row["idx"] in started and row["status"] in {"pending", "running"}:
                    index.update(row["idx"], status="failed", error=_one_line(exc) or "interrupted")
            raise
        finally:
            if bar is not None:
                bar.close()
    return Sweep.open(out)


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

    def to_parquet(self, directory: str | os.PathLike[str]) -> dict[str, Path]:
        """Write every merged frame as ``<directory>/<frame>.parquet`` (and the index)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        paths = super().to_parquet(directory)
        out = Path(directory)
        paths["index"] = out / "index.parquet"
        pq.write_table(pa.Table.from_pandas(self.index, preserve_index=False), paths["index"])
        return paths

    # -- views --------------------------------------------------------------------------------
    def summary(self) -> str:
        """One line: ``sweep demo: 8 runs: 7 complete, 1 failed (runs/demo-sweep)``."""
        counts = {k: v for k, v in self.counts().items() if v}
        parts = ", ".join(f"{v} {k}" for k, v in counts.items()) or "no runs"
        return f"sweep {self.name}: {len(self._rows)} runs: {parts} ({self.folder})"

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.counts().items() if v)
        return (
            f"Sweep(name={self.name!r}, runs={len(self._rows)}, {counts}, folder='{self.folder}')"
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
    "run_sweep",
    "run_task",
    "split_sweep_section",
]
