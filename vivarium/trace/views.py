"""The frame views a Run and a Sweep share: every frame as pandas, polars, Arrow or Parquet.

A subclass gives ``arrow(name)`` (the one source: a cached Arrow table) and may add to
``FRAME_NAMES``; the rest is here once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vivarium.trace.frames import FRAME_NAMES
from vivarium.trace.schema import REPORTER_FRAMES

if TYPE_CHECKING:
    import pandas as pd
    import polars as pl


class FrameViews:
    """Every frame of a run or sweep as pandas, polars, Arrow or Parquet, from ``arrow(name)``.

    Attributes:
        frame_names: The frames there are (a sweep adds its own).
    """

    frame_names: tuple[str, ...] = (*FRAME_NAMES, *REPORTER_FRAMES)

    def arrow(self, name: str) -> Any:
        """Frame ``name`` as an Arrow table: the one source of the others (subclasses give it).

        Raises:
            NotImplementedError: always, here.
        """
        raise NotImplementedError

    def _arguments_arrow(self) -> Any:
        """The arguments frame as Arrow: from the actions (a run reads only what it needs)."""
        from vivarium.trace import frames

        return frames.arguments_table(self.arrow("actions"))

    def frame(self, name: str, kind: str = "pandas") -> Any:
        """A frame as ``pandas`` (default), ``polars`` or ``arrow``."""
        from vivarium.trace import frames

        if name == "arguments":  # derived from the actions, not stored apart
            table = self._arguments_arrow()
            if kind == "pandas":
                df = frames.to_pandas(table, nullable_integers=True)
                for key in ("step", "seq"):  # never null: plain integers (column by column,
                    df[key] = df[key].to_numpy("int64")  # not a copy of the whole frame)
                return df
        else:
            table = self.arrow(name)
        if kind == "pandas":
            return frames.to_pandas(table)
        if kind == "polars":
            return frames.to_polars(table)
        if kind == "arrow":
            return table
        raise ValueError(f"kind must be 'pandas', 'polars' or 'arrow', not {kind!r}")

    @property
    def actions(self) -> pd.DataFrame:
        """One row per agent decision: step, seq, agent_id, action, arguments, outcome..."""
        return self.frame("actions")

    @property
    def arguments(self) -> pd.DataFrame:
        """The actions' arguments as typed columns, row for row as ``actions``.

        Step, seq, agent_id, action, then a column per argument key: numbers as numbers
        (integers as ``Int64``, null where an action lacks the key). The JSON is read once, in
        C++; ``frame("arguments", "polars")`` gives the same as polars.
        """
        return self.frame("arguments")

    @property
    def messages(self) -> pd.DataFrame:
        """One row per message: step, seq, author_id, channel, content."""
        return self.frame("messages")

    @property
    def llm_calls(self) -> pd.DataFrame:
        """One row per LLM call attempt: agent, model, tokens, cost, latency, cache hit, error."""
        return self.frame("llm_calls")

    @property
    def transitions(self) -> pd.DataFrame:
        """One row per workflow move: step, agent, from_state, to_state, trigger, routine."""
        return self.frame("transitions")

    @property
    def steps(self) -> pd.DataFrame:
        """One row per step: decisions and messages, world digest, state hash, clock."""
        return self.frame("steps")

    @property
    def agents(self) -> pd.DataFrame:
        """One row per agent: agent_idx, agent_id, policy, seed."""
        return self.frame("agents")

    @property
    def model_vars(self) -> pd.DataFrame:
        """One row per step (-1: before step 0), a column per model reporter (as Mesa's)."""
        return self.frame("model_vars")

    @property
    def agent_vars(self) -> pd.DataFrame:
        """One row per step and agent (step, agent_id), a column per agent reporter."""
        return self.frame("agent_vars")

    def to_polars(self, name: str | None = None) -> pl.DataFrame | dict[str, pl.DataFrame]:
        """The frames as polars: one by name, or all of them in a dict."""
        if name is not None:
            return self.frame(name, "polars")
        return {n: self.frame(n, "polars") for n in self.frame_names}

    @property
    def source_id(self) -> str:
        """What these frames are of (a run id, a sweep): recorded in exported files."""
        raise NotImplementedError

    def parquet_tables(self) -> dict[str, Any]:
        """The Arrow tables ``to_parquet`` writes, by file name.

        The reporters' frames only when they hold rows: the export of a run without reporters
        is what it was before they existed.
        """
        tables = {name: self.arrow(name) for name in self.frame_names}
        for name in REPORTER_FRAMES:
            if name in tables and tables[name].num_rows == 0:
                del tables[name]
        return tables

    def to_parquet(
        self, directory: str | os.PathLike[str], *, overwrite: bool = False
    ) -> dict[str, Path]:
        """Write every frame as ``<directory>/<frame>.parquet``; returns the paths.

        A folder holding another run's (or sweep's) frames is refused unless ``overwrite``:
        the same folder reused for two runs would otherwise keep only the last.
        """
        from vivarium.trace.parquet import write_frames

        return write_frames(directory, self.parquet_tables(), self.source_id, overwrite=overwrite)
