"""A sweep's results: ``Sweep``, the index and the runs' frames merged, read from its folder.

``Sweep.open(folder)`` reads the index in one snapshot (also while the sweep runs) and opens
the complete runs' traces only when a frame is asked for. Every merged frame starts with the
trace's ``run_id``, then the run columns (``run``, ``replication``, ``seed``) and the sweep's
parameters, rows in run order; a run column whose name the trace's table already has is
prefixed ``sweep.``.

``Sweep.runs`` reads each complete run with ``open_run``: by default a ``SweepRun`` (the trace's
reader, with the config it ran as a model); a caller that wants another run class (such as
``vivarium.Run``, which can also summarise itself) passes its ``open``.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vivarium.errors import TraceError
from vivarium.experiment.config import ExperimentConfig
from vivarium.seeding import canonical_json
from vivarium.sweep.index import STATUSES, read_index
from vivarium.sweep.plan import describe_run
from vivarium.trace.run import TraceRun
from vivarium.trace.status import first_fallback
from vivarium.trace.views import FrameViews

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

__all__ = ["RUN_COLUMNS", "SWEEP_FRAMES", "RunOpener", "Sweep", "SweepRun"]

SWEEP_FRAMES = (
    "actions",
    "messages",
    "llm_calls",
    "transitions",
    "steps",
    "agents",
    "model_vars",  # the reporters' frames: a column per reporter (runs may differ: nulls)
    "agent_vars",
)
# Columns every merged frame starts with (after the trace's own run_id).
RUN_COLUMNS = ("run", "replication", "seed")


class SweepRun(TraceRun):
    """One run of a sweep, read from its trace, with the config it ran as a model."""

    @cached_property
    def config(self) -> ExperimentConfig | None:
        """The recorded config as an ``ExperimentConfig`` (None if this version cannot read it)."""
        try:
            return ExperimentConfig.model_validate(self.metadata["config"])
        except Exception:
            return None


# Reads one run's trace into the run object ``Sweep.runs`` holds (``SweepRun.open`` by default).
RunOpener = Callable[[Path], TraceRun]


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
    """The runs of a sweep, read from its folder: the index and the merged frames.

    Made by ``run_sweep`` and ``Sweep.open``; the frames (``actions``, ``messages``, ...) hold
    the complete runs only, and ``failed`` and ``problems`` say which runs are not results.

    Attributes:
        folder: The sweep folder.
        meta: The sweep's description from its index (name, seed, params, grid, ...).
        name: The sweep's name (the base config's).
        params: The swept parameters, in order of first appearance (``seed`` excluded).
    """

    frame_names = SWEEP_FRAMES

    def __init__(
        self,
        folder: Path,
        meta: dict[str, Any],
        rows: list[dict[str, Any]],
        *,
        open_run: RunOpener | None = None,
    ) -> None:
        """A sweep from its index, as read by ``Sweep.open`` (use that).

        Args:
            folder: The sweep folder.
            meta: The index's meta table.
            rows: The index's rows, in run order.
            open_run: Reads a complete run's trace for ``runs`` (default ``SweepRun.open``).
        """
        self.folder = folder
        self.meta = meta
        self.name: str = meta.get("name", folder.name)
        self.params: list[str] = list(meta.get("params") or [])
        self._rows = rows
        self._tables: dict[str, Any] = {}
        self._open_run: RunOpener = open_run or SweepRun.open
        self._runs: list[TraceRun] | None = None
        self._problems: list[str] | None = None

    @classmethod
    def open(cls, folder: str | os.PathLike[str], *, open_run: RunOpener | None = None) -> Sweep:
        """Read a sweep folder (while it runs, too: the index is read in one transaction).

        Args:
            folder: The sweep folder.
            open_run: Reads a complete run's trace for ``runs`` (default ``SweepRun.open``).

        Returns:
            The sweep.

        Raises:
            TraceError: The folder has no sweep index, or it cannot be read.
        """
        p = Path(folder)
        meta, rows = read_index(p)
        return cls(p, meta, rows, open_run=open_run)

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
        """How many runs have each status.

        Returns:
            ``{"pending": 0, "running": 0, "complete": 7, "failed": 1}``.
        """
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
        """Complete runs that are not clean results, one line each in run order.

        Not clean means what ``Run.health`` says (decisions that fell back, every LLM call
        failed); each line gives the run, its problems and the first fallback's reason.
        """
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
                    where = f"run {row['idx']} ({describe_run(row['params'], row['replication'])})"
                    out.append(f"{where}: {health}{_first_fallback_note(path)}")
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
                where = describe_run(row["params"], row["replication"])
                return f"run {row['idx']} ({where}): {error}"
        return None

    @property
    def runs(self) -> list[TraceRun]:
        """The complete runs, in run order (as ``open_run`` reads them)."""
        if self._runs is None:
            self._runs = [
                self._open_run(self.folder / row["path"])
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
        """What the frames come from, for messages: ``sweep <name>``."""
        return f"sweep {self.name}"

    def parquet_tables(self) -> dict[str, Any]:
        """Every merged frame, and the index."""
        import pyarrow as pa

        tables = super().parquet_tables()
        tables["index"] = pa.Table.from_pandas(self.index, preserve_index=False)
        return tables

    # -- views --------------------------------------------------------------------------------
    def summary(self) -> str:
        """The sweep in one line, with its first failure and first problem if any.

        ``sweep demo: 8 runs: 7 complete, 1 failed (runs/demo-sweep)``, and when runs failed,
        the first error: ``...; first failure: run 3 (agents=5, ...): ...``.
        """
        counts = {k: v for k, v in self.counts().items() if v}
        parts = ", ".join(f"{v} {k}" for k, v in counts.items()) or "no runs"
        line = f"sweep {self.name}: {len(self._rows)} runs: {parts} ({self.folder})"
        first = self.first_error
        if first is not None:
            line += f"; first failure: {first}"
        if self.problems:
            line += f"; {len(self.problems)} complete runs with problems, first: {self.problems[0]}"
        return line

    def bundle(self, out: str | os.PathLike[str]) -> list[str]:
        """Write this sweep's finished runs to the archive ``out``: ``vvm bundle``.

        Returns:
            Notes on what ``vvm verify`` cannot re-run, and why.
        """
        from vivarium.experiment.bundle import make_bundle

        finished = [self.folder / row["path"] for row in self._rows if row["status"] == "complete"]
        return make_bundle(list(finished), out)

    def diff(self, other: Sweep | str | os.PathLike[str]) -> Any:
        """Compare this sweep with ``other`` run by run (``vvm diff A B`` on two folders).

        Returns:
            A ``SweepDiff``: each pair of runs' ``RunDiff``, the runs one sweep lacks, and
            ``identical``.
        """
        from vivarium.sweep.diff import diff_sweeps

        return diff_sweeps(self.folder, other.folder if isinstance(other, Sweep) else other)

    def inspect(self, **kwargs: Any) -> Any:
        """A notebook decision inspector over this sweep's runs (``vivarium.inspector``)."""
        from vivarium.inspector import Inspector  # the one upward import (see pyproject)

        return Inspector(self, **kwargs)

    def __len__(self) -> int:
        """How many runs the sweep has (complete or not)."""
        return len(self._rows)

    def __repr__(self) -> str:
        """The name, counts, first failure and problem, and folder."""
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


def _first_fallback_note(path: Path) -> str:
    """``; first: step 3, agent_001: policy error: ...`` for a trace with fallbacks, else ""."""
    fallback = first_fallback(path)
    if fallback is None:
        return ""
    return f"; first: step {fallback.step}, {fallback.agent_id}: {_short_error(fallback.error)}"


def _short_error(text: Any) -> str:
    line = " ".join(str(text or "no reason recorded").split())
    return line if len(line) <= 200 else line[:197] + "..."
