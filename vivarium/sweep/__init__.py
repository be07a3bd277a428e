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
  interrupted or failed runs exactly, their committed steps kept (``vivarium.experiment.runner.resume_run``),
  and reruns the rest. A run that fails records its error (one line) in the index;
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

The package, one concept a module, each importing only those above it in this list:

- ``plan``: the runs of a sweep (grid and explicit points, replications, seeds, run ids).
- ``index``: the sweep's own database, ``index.sqlite``, and the folder lock.
- ``worker``: running one run (``run_task``) and the local worker process.
- ``backends``: inline, local processes and Ray.
- ``results``: ``Sweep``, the index and the merged frames read from the folder.
- ``run``: ``run_sweep``, which ties them together.
- ``cli``: ``vvm sweep`` and a config file's ``sweep:`` section.

What a run's trace says (finished, resumable, first fallback) is asked in
``vivarium.trace.status``.
"""

from vivarium.sweep.backends import BACKENDS, Backend
from vivarium.sweep.cli import SWEEP_SETTINGS, main_sweep, parse_grid_items, split_sweep_section
from vivarium.sweep.index import INDEX_FILE, LOCK_FILE, STATUSES, FolderLock, SweepIndex
from vivarium.sweep.plan import PlannedRun, plan_sweep, run_seed_of
from vivarium.sweep.results import RUN_COLUMNS, SWEEP_FRAMES, Sweep, SweepRun
from vivarium.sweep.run import run_sweep
from vivarium.sweep.worker import run_task

__all__ = [
    "BACKENDS",
    "INDEX_FILE",
    "LOCK_FILE",
    "RUN_COLUMNS",
    "STATUSES",
    "SWEEP_FRAMES",
    "SWEEP_SETTINGS",
    "Backend",
    "FolderLock",
    "PlannedRun",
    "Sweep",
    "SweepIndex",
    "SweepRun",
    "main_sweep",
    "parse_grid_items",
    "plan_sweep",
    "run_seed_of",
    "run_sweep",
    "run_task",
    "split_sweep_section",
]
