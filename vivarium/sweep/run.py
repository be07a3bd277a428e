"""``run_sweep``: plan a sweep, bring its index up to date, run what is left, report.

A sweep run again in the same folder skips the runs whose trace is finished, resumes
interrupted or failed runs exactly (their committed steps kept, see ``runner.resume_run``) and
reruns the rest.
A failed run records its error (one line) in the index and the other runs go on; at the end, a
sweep whose every run failed raises ``SweepFailed``, and one with failed runs or complete runs
that are not clean results warns (``SweepWarning``) with the count and the first error.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vivarium.errors import ConfigError, SweepFailed, SweepWarning
from vivarium.experiment.config import ExperimentConfig
from vivarium.experiment.identity import opaque_inputs
from vivarium.experiment.objects import resolve_references
from vivarium.experiment.runner import DEFAULT_RUNS_DIR, identified, progress_enabled
from vivarium.sweep.backends import BACKENDS, EXECUTORS, Backend, default_workers
from vivarium.sweep.index import INDEX_FILE, FolderLock, SweepIndex, utc_now
from vivarium.sweep.plan import ConfigSource, as_config, plan_sweep
from vivarium.sweep.results import RunOpener, Sweep
from vivarium.sweep.worker import error_line, pack_registrations
from vivarium.trace.status import is_finished

__all__ = ["run_sweep"]

# The Vivarium package: warnings point at the first caller outside it.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _other_code(path: Path) -> bool:
    """Whether a trace records other package code than this process runs (see build)."""
    from vivarium.experiment.identity import CODE_META_KEY, package_code_digest
    from vivarium.trace.db import read_meta

    try:
        recorded = read_meta(path, CODE_META_KEY)
    except Exception:  # unreadable: is_finished said it was fine; leave it so
        return False
    return recorded is not None and recorded != package_code_digest()


@identified
def run_sweep(
    base: ConfigSource | ExperimentConfig | Mapping[str, Any],
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
    open_run: RunOpener | None = None,
    paired: bool = False,
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

    Args:
        base: The experiment every run starts from: an ``Experiment``, an ``ExperimentConfig``
            or a dict of config fields.
        grid: Config fields mapped to lists of values; every combination is a point.
        configs: Explicit configs, each crossed with the grid.
        folder: The sweep folder (default ``runs/<name>-sweep/``).
        backend: ``local`` (worker processes), ``ray`` or ``inline`` (this process).
        max_workers: Runs at once (default: the CPUs this process may use; on Ray, the
            cluster's).
        ray_address: The Ray cluster to join (``ray`` only).
        seed: The sweep's seed (default: the base config's); see ``run_seed_of``.
        progress: Show a progress bar (default: unless ``VIVARIUM_PROGRESS=0``).
        replications: Runs of each point (default 1).
        plugins: Modules the workers import before running (worlds and policies they register).
        open_run: Reads a complete run's trace for ``Sweep.runs`` (default ``SweepRun.open``).
        paired: Every point of a replication runs with the same seed (common random numbers,
            see ``plan_sweep``), for ``vivarium.analysis.paired_difference``.

    Returns:
        The sweep, read back from its folder.

    Raises:
        ConfigError: An argument, grid value or config is invalid, or the folder cannot be
            created.
        SweepFailed: Every run failed.
        VivariumError: Another sweep process is using the folder.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"sweep: backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if max_workers is not None and (
        not isinstance(max_workers, int) or isinstance(max_workers, bool) or max_workers < 1
    ):
        raise ConfigError(f"sweep: max_workers must be a whole number >= 1, not {max_workers!r}")
    # Objects referred to as they are now, so workers receive them under the references the
    # runs' identities use (``vivarium.experiment.objects.resolve_references``).
    base_config = resolve_references(as_config(base))
    runs = plan_sweep(
        base_config, grid, configs, seed=seed, replications=replications, paired=paired
    )
    out = Path(folder) if folder is not None else DEFAULT_RUNS_DIR / f"{base_config.name}-sweep"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create sweep folder {out}: {exc.strerror}") from None
    out = out.resolve()
    modules = list(plugins or ())
    if backend != "inline":
        _check_sendable_options(runs)
    registrations = None if backend == "inline" else pack_registrations(runs)
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
        "updated_at": utc_now(),
    }
    with FolderLock(out), SweepIndex(out / INDEX_FILE) as index:
        index.sync(runs, meta)
        tasks: list[dict[str, Any]] = []
        skipped = 0
        for run in runs:
            path = out / run.file
            # A finished trace made by other package code is not this sweep's result: its run
            # goes to a worker, which refuses to replace it (one line, the run failed).
            # Nor is a run whose code reads what cannot be digested (``opaque_inputs``):
            # nothing tells whether its stored result is still this run's.
            if (
                is_finished(path, run.run_id)
                and not _other_code(path)
                and not opaque_inputs(run.config)
            ):
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
        if progress_enabled(progress):
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
                fields["finished_at"] = utc_now()
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
                workers = max_workers or default_workers()
                EXECUTORS[backend](
                    tasks,
                    done,
                    max_workers=workers if backend != "ray" else max_workers,
                    ray_address=ray_address,
                    index=index,
                )
        except BaseException as exc:
            # Interrupted: the runs that were running are recorded as failed (their traces are
            # resumable), those not started stay pending; a re-run of the sweep does the rest.
            reason = f"interrupted ({error_line(exc)}): re-run the sweep to finish it"
            for row in index.rows():
                if row["idx"] in started and row["status"] == "running":
                    index.update(row["idx"], status="failed", error=reason)
            raise
        finally:
            if bar is not None:
                bar.close()
    sweep = Sweep.open(out, open_run=open_run)
    _report_failures(sweep)
    return sweep


def _check_sendable_options(runs: Sequence[Any]) -> None:
    """Refuse, in one line, options a worker process cannot be sent (a notebook's function).

    A sweep sends each run's config to its workers as plain data; a world or policy given as
    an object is sent by value (``pack_registrations``), so that is where an object belongs.
    """
    from vivarium.experiment.config import non_plain_options

    for run in runs:
        found = non_plain_options(run.config)
        if found:
            raise ConfigError(
                f"sweep: {found[0]} is a Python object, which cannot be sent to worker "
                "processes as an option: bind it to the world or policy given as an object "
                "(world=functools.partial(MyWorld, rule=...)), or run the sweep with "
                "backend='inline'"
            )


def _report_failures(sweep: Sweep) -> None:
    """Every run failed: raise. Some did, or some complete runs are not clean results: warn.

    A complete run is not a clean result when its decisions fell back (a policy raised, replies
    were unusable); the warning gives the counts and the first error.
    """
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


def _user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first caller outside Vivarium."""
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def _task_config(config: ExperimentConfig, path: Path) -> dict[str, Any]:
    """The config a worker rebuilds: plain data, cassette path made absolute.

    What its user code reads that cannot be digested is said here, where the code is: the
    worker's identity of the run is then this process's.
    """
    data = config.model_dump()
    data["opaque_inputs"] = sorted({*config.opaque_inputs, *opaque_inputs(config)})
    data["db"] = str(path)
    llm = data.get("llm")
    if llm and llm.get("cache"):
        llm["cache"] = str(Path(llm["cache"]).expanduser().resolve())
    return data
