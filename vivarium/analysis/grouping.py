"""Grouping: the keys a metric groups by, and the rows a per-step or per-agent result has.

A result is grouped by ``run_id`` (when the table has one), the ``by`` columns and the ``per``
columns (``step``, ``agent_id`` or both); ``grid`` and ``fill_missing`` give it the rows of
steps and agents that had nothing to count, with zeros.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

import polars as pl

__all__ = [
    "PER_COLUMNS",
    "Per",
    "check_per",
    "fill_missing",
    "grid",
    "group",
    "group_keys",
    "join_keys",
    "over",
    "universe",
]

Per = Literal["step", "agent", "agent_step", "run"]
"""What one row of a result is about: a step, an agent, an agent in a step, or a whole run."""

PER_COLUMNS: dict[str, list[str]] = {
    "step": ["step"],
    "agent": ["agent_id"],
    "agent_step": ["agent_id", "step"],
    "run": [],
}
"""The columns each ``per`` adds to a result's keys."""


def check_per(per: str, allowed: Iterable[str]) -> None:
    """Check a metric's ``per=`` argument.

    Raises:
        ValueError: ``per`` is not one of ``allowed``.
    """
    allowed = list(allowed)
    if per not in allowed:
        raise ValueError(f"per must be one of {', '.join(map(repr, allowed))}, not {per!r}")


def group_keys(df: pl.DataFrame, by: Sequence[str], table: str) -> list[str]:
    """``run_id`` (if the table has it) and the ``by`` columns, which must exist.

    Raises:
        ValueError: a ``by`` column is not in a non-empty ``table``.
    """
    missing = [b for b in by if b not in df.columns]
    if missing:
        if df.height == 0:
            return (["run_id"] if "run_id" in df.columns else []) + [
                b for b in by if b in df.columns
            ]
        raise ValueError(
            f"by: column {missing[0]!r} is not in the {table} table "
            f"(columns: {', '.join(df.columns)})"
        )
    return (["run_id"] if "run_id" in df.columns else []) + list(by)


def join_keys(left: pl.DataFrame, right: pl.DataFrame, on: list[str], how: str) -> pl.DataFrame:
    """A join on ``on`` in which null keys match each other (by columns may hold nulls)."""
    try:
        return left.join(right, on=on, how=how, nulls_equal=True, coalesce=True)  # type: ignore[arg-type]
    except TypeError:  # polars < 1.24 calls it join_nulls
        return left.join(right, on=on, how=how, join_nulls=True, coalesce=True)  # type: ignore[arg-type,call-arg]


def over(expr: pl.Expr, cols: list[str]) -> pl.Expr:
    """``expr`` computed within each group of ``cols`` (over the whole frame when none)."""
    return expr.over(cols) if cols else expr


def group(df: pl.DataFrame, cols: list[str], aggs: list[pl.Expr]) -> pl.DataFrame:
    """``aggs`` per group of ``cols``; with no ``cols``, one row (none for an empty frame)."""
    if cols:
        return df.group_by(cols).agg(aggs)
    if df.height == 0:
        return df.select(aggs).clear()
    return df.select(aggs)


def universe(frames: Iterable[pl.DataFrame], cols: list[str]) -> pl.DataFrame | None:
    """The distinct ``cols`` rows over the frames that have all of them (None: none has)."""
    parts = [f.select(cols) for f in frames if f.height and all(c in f.columns for c in cols)]
    if not parts or not cols:
        return None
    return pl.concat(parts, how="vertical_relaxed").unique()


def grid(
    tables: dict[str, pl.DataFrame], primary: pl.DataFrame, keys: list[str], per: str
) -> pl.DataFrame | None:
    """The rows a ``per`` result should have (None when the tables do not tell).

    Every step, agent, or agent and step of a run, as far as the steps, agents and actions
    tables (and ``primary``, the table the result counts) tell.
    """
    empty = pl.DataFrame()
    steps, actions = tables.get("steps", empty), tables.get("actions", empty)
    agents, moves = tables.get("agents", empty), tables.get("transitions", empty)
    step_rows = universe([steps, actions, moves], [*keys, "step"])
    agent_rows = universe([agents, actions, moves, primary], [*keys, "agent_id"])
    if per == "step":
        return step_rows
    if per == "agent":
        return agent_rows
    if per == "run":
        return universe([steps, actions, agents, moves], keys)
    if step_rows is None or agent_rows is None:
        return None
    step_rows = universe([step_rows, primary], [*keys, "step"])
    if not keys:
        return agent_rows.join(step_rows, how="cross")
    step_rows = step_rows.cast({k: agent_rows.schema[k] for k in keys}, strict=False)
    return join_keys(agent_rows, step_rows, keys, "inner")


def fill_missing(
    result: pl.DataFrame, expected: pl.DataFrame | None, cols: list[str], zeros: list[str]
) -> pl.DataFrame:
    """Add the rows of ``expected`` (see ``grid``) that ``result`` lacks, with 0 in ``zeros``."""
    if expected is None or not cols:
        return result
    if result.height:
        expected = expected.cast({c: result.schema[c] for c in cols}, strict=False)
    else:
        result = result.cast({c: expected.schema[c] for c in cols})
    merged = join_keys(expected, result, cols, "full")
    return merged.with_columns([pl.col(z).fill_null(0) for z in zeros])
