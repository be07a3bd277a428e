"""Pivots: a workflow agent going back to an earlier state, as events and as counts."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

import polars as pl

from vivarium.analysis.grouping import (
    PER_COLUMNS,
    Per,
    check_per,
    fill_missing,
    grid,
    group,
    group_keys,
    join_keys,
    over,
)
from vivarium.analysis.loading import (
    Frame,
    by_list,
    load_tables,
    require_columns,
    to_output,
    with_by_columns,
)

__all__ = ["pivot_event_frame", "pivot_events", "pivots"]

_TRUTHY = ["true", "1", "1.0", "yes"]


def _pairs(exclude: Iterable[Any]) -> set[tuple[str, str]]:
    pairs = set()
    for item in exclude:
        if isinstance(item, str):
            left, sep, right = item.partition("->")
            if not sep:
                raise ValueError(f"exclude: {item!r} is not 'from -> to'")
            pairs.add((left.strip(), right.strip()))
        else:
            frm, to = item
            pairs.add((str(frm), str(to)))
    return pairs


def _transition_pivots(
    t: pl.DataFrame,
    keys: list[str],
    state_order: Sequence[str] | None,
    exclude: set[tuple[str, str]],
    include_routine: bool = False,
) -> pl.DataFrame:
    agent = [*keys, "agent_id"]
    t = t.with_row_index("_row").sort([*agent, "step", "_row"], nulls_last=True)
    if state_order is not None:
        ranks = pl.DataFrame(
            {"_state": list(state_order), "_rank": list(range(len(state_order)))},
            schema={"_state": pl.String, "_rank": pl.Int64},
        ).unique("_state", keep="first")
        t = t.join(
            ranks.rename({"_state": "from_state", "_rank": "_from"}), on="from_state", how="left"
        ).join(ranks.rename({"_state": "to_state", "_rank": "_to"}), on="to_state", how="left")
    else:
        # The agent's visiting order: the position of each state's first visit (the from_state
        # of transition i is visit 2i, its to_state visit 2i + 1).
        t = t.with_columns(_i=pl.int_range(pl.len()).over(agent))
        visits = pl.concat(
            [
                t.select(
                    *agent, pl.col("from_state").alias("_state"), (2 * pl.col("_i")).alias("_pos")
                ),
                t.select(
                    *agent, pl.col("to_state").alias("_state"), (2 * pl.col("_i") + 1).alias("_pos")
                ),
            ]
        )
        first = visits.group_by([*agent, "_state"]).agg(pl.col("_pos").min().alias("_first"))
        t = join_keys(
            t,
            first.rename({"_state": "from_state", "_first": "_from"}),
            [*agent, "from_state"],
            "left",
        )
        t = join_keys(
            t, first.rename({"_state": "to_state", "_first": "_to"}), [*agent, "to_state"], "left"
        )
    back = (pl.col("_to") < pl.col("_from")).fill_null(False)
    if not include_routine and "routine" in t.columns:
        # The workflow declared these moves its ordinary loop (recorded with each transition).
        back = back & ~pl.col("routine").cast(pl.Boolean).fill_null(False)
    if exclude:
        ex = pl.DataFrame(
            {"from_state": [f for f, _ in exclude], "to_state": [x for _, x in exclude]},
            schema={"from_state": pl.String, "to_state": pl.String},
        ).with_columns(_ex=pl.lit(True))
        t = t.join(ex, on=["from_state", "to_state"], how="left")
        back = back & pl.col("_ex").is_null()
    return (
        t.filter(back)
        .sort("_row")
        .select(*agent, "step", "from_state", "to_state", pl.lit("transition").alias("source"))
    )


def _flag_pivots(a: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    meta = pl.col("metadata").cast(pl.String)
    flag = pl.coalesce(
        meta.str.json_path_match("$.should_pivot"),
        meta.str.json_path_match("$.variables.should_pivot"),
    )
    return a.filter(flag.str.to_lowercase().is_in(_TRUTHY).fill_null(False)).select(
        *keys,
        "agent_id",
        "step",
        meta.str.json_path_match("$.workflow_state").alias("from_state"),
        pl.lit(None, pl.String).alias("to_state"),
        pl.lit("should_pivot").alias("source"),
    )


def pivot_event_frame(
    data: Any,
    by: list[str],
    state_order: Sequence[str] | None,
    exclude: Iterable[Any],
    source: str,
    include_routine: bool = False,
) -> tuple[pl.DataFrame, dict[str, pl.DataFrame], list[str]]:
    """The pivot events of ``data`` (see ``pivot_events``), with what they were found in.

    Returns:
        The events (polars), the loaded tables (transitions, actions, steps, agents; the ``by``
        columns added) and the key columns of the events (``run_id`` and ``by``).

    Raises:
        ValueError: an unknown ``source``, or a table lacks the columns pivots read.
    """
    if source not in ("both", "transitions", "flags"):
        raise ValueError(f"source must be 'both', 'transitions' or 'flags', not {source!r}")
    tables = load_tables(data, ["transitions", "actions", "steps", "agents"], by, "transitions")
    t = with_by_columns(tables["transitions"], by)
    a = with_by_columns(tables["actions"], by)
    tables = {**tables, "transitions": t, "actions": a}
    src = t if t.height or not a.height else a
    keys = group_keys(src, by, "transitions" if src is t else "actions")
    parts = []
    if source in ("both", "transitions"):
        require_columns(t, ["agent_id", "step", "from_state", "to_state"], "transitions", "pivots")
        moves = _transition_pivots(
            t, group_keys(t, by, "transitions"), state_order, _pairs(exclude), include_routine
        )
        parts.append(moves)
    if source in ("both", "flags") and "metadata" in a.columns:
        require_columns(a, ["agent_id", "step"], "actions", "pivots")
        flags = _flag_pivots(a, group_keys(a, by, "actions"))
        if parts and flags.height and parts[0].height:
            # Routine moves are left out like ``exclude``d ones: declaring a move routine in the
            # workflow counts the same as excluding it here.
            on = [c for c in [*keys, "agent_id", "step"] if c in flags.columns]
            on = [c for c in on if c in parts[0].columns]
            flags = join_keys(flags, parts[0].select(on).unique(), on, "anti")
        parts.append(flags)
    parts = [p.cast({"step": pl.Int64}) for p in parts if p.height]
    columns = [*keys, "agent_id", "step", "from_state", "to_state", "source"]
    if parts:
        events = pl.concat(parts, how="diagonal_relaxed").select(columns)
    else:
        schema = {k: src.schema.get(k, pl.String) for k in keys}
        schema.update(agent_id=pl.String, step=pl.Int64, from_state=pl.String)
        schema.update(to_state=pl.String, source=pl.String)
        events = pl.DataFrame(schema=schema)
    order = [*keys, "step", "agent_id"]
    return events.sort(order, nulls_last=True, maintain_order=True), tables, keys


def pivot_events(
    data: Any,
    *,
    state_order: Sequence[str] | None = None,
    exclude: Iterable[Any] = (),
    source: Literal["both", "transitions", "flags"] = "both",
    include_routine: bool = False,
    by: str | Iterable[str] | None = None,
    as_: str = "pandas",
) -> Frame:
    """Every pivot, one row each: a workflow agent going back to an earlier state.

    A transition ``from_state -> to_state`` is a pivot when ``to_state`` comes before
    ``from_state``: in ``state_order`` when given (states not in it are never pivots), else in
    the agent's own visiting order (the order in which the agent first entered its states, per
    run). Self-transitions are not pivots. A cyclic workflow returns to an earlier state at
    every turn of its loop: the workflow declares such moves ``routine: true`` in its
    ``transitions`` (recorded in the trace's ``routine`` column), and they are not counted
    unless ``include_routine=True``. ``exclude`` names more moves not to count
    (``[("decide_action", "compute_metrics")]`` or ``["decide_action -> compute_metrics"]``).

    A decision whose action metadata JSON has a true ``should_pivot`` (at the top level or in
    ``variables``) is a pivot too (``source="should_pivot"``, ``from_state`` its
    ``workflow_state``), unless the same agent already has a transition pivot at that step.
    ``source`` picks ``"transitions"``, ``"flags"`` or ``"both"`` (default).

    Columns: ``run_id``, the ``by`` columns, ``agent_id``, ``step``, ``from_state``,
    ``to_state``, ``source`` (``"transition"`` or ``"should_pivot"``).
    """
    by = by_list(by)
    events, _, _ = pivot_event_frame(data, by, state_order, exclude, source, include_routine)
    return to_output(events, as_)


def pivots(
    data: Any,
    *,
    per: Per = "agent",
    state_order: Sequence[str] | None = None,
    exclude: Iterable[Any] = (),
    source: Literal["both", "transitions", "flags"] = "both",
    include_routine: bool = False,
    by: str | Iterable[str] | None = None,
    as_: str = "pandas",
) -> Frame:
    """Pivot counts (see ``pivot_events``) per agent (default), step, agent and step, or run.

    Columns: ``run_id``, the ``by`` columns, the ``per`` columns and ``pivots``; over time
    (``per="step"`` or ``"agent_step"``) also ``cumulative_pivots``. Agents and steps with no
    pivot get 0 when the actions (or steps) table tells which there are.
    """
    check_per(per, PER_COLUMNS)
    by = by_list(by)
    events, tables, keys = pivot_event_frame(
        data, by, state_order, exclude, source, include_routine
    )
    cols = keys + PER_COLUMNS[per]
    counts = group(events, cols, [pl.len().cast(pl.Int64).alias("pivots")])
    counts = fill_missing(counts, grid(tables, events, keys, per), cols, ["pivots"])
    counts = counts.sort(cols, nulls_last=True)
    if per in ("step", "agent_step"):
        inner = [c for c in cols if c != "step"]
        counts = counts.with_columns(
            over(pl.col("pivots").cum_sum(), inner).alias("cumulative_pivots")
        )
    return to_output(counts, as_)
