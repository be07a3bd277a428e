"""Metrics over run traces, computed with polars, returned as pandas (default) or polars.

Every function takes ``data`` as a run, a trace path, a dict of frames, one frame or a list
of these (see ``vivarium.analysis.loading``), and works on one run and on a sweep's merged
frames alike: rows are grouped by ``run_id`` (when the table has one) and by the extra columns
named in ``by=`` (parameter columns such as ``temperature``, kept in the result). A table that
was not given, or is empty, counts as empty: the result is then an empty frame with the usual
columns.

Results are sorted by their key columns; ``as_="polars"`` returns a polars frame. The pivot
metrics are in ``vivarium.analysis.pivoting``, the t and Wilson intervals in
``vivarium.analysis.statistics``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from statistics import NormalDist
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
    universe,
)
from vivarium.analysis.loading import (
    Frame,
    by_list,
    load_tables,
    require_columns,
    to_output,
    with_by_columns,
    with_fallback,
)
from vivarium.analysis.pivoting import pivot_event_frame
from vivarium.analysis.statistics import t_quantile

__all__ = [
    "action_counts",
    "llm_usage",
    "message_volume",
    "success_ci",
    "success_rate",
    "summary",
]


def action_counts(
    data: Any,
    *,
    per: Per = "step",
    by: str | Iterable[str] | None = None,
    as_: str = "pandas",
) -> Frame:
    """How often each action was chosen, per step (default), agent, agent and step, or run.

    Columns: ``run_id``, the ``by`` columns, the ``per`` columns (``step`` and/or ``agent_id``),
    ``action``, ``count`` (decisions) and ``share`` (of the decisions in that group). Every
    action seen in the input gets a row in every group (``count`` 0 when not chosen there), so
    the shares of a group add up to 1.
    """
    check_per(per, PER_COLUMNS)
    by = by_list(by)
    a = load_tables(data, ["actions"], by, "actions")["actions"]
    a = with_by_columns(a, by)
    require_columns(a, ["action", *PER_COLUMNS[per]], "actions", "action_counts")
    cols = group_keys(a, by, "actions") + PER_COLUMNS[per]
    counts = a.group_by([*cols, "action"]).agg(pl.len().cast(pl.Int64).alias("count"))
    if counts.height:
        grid = a.select(cols).unique().join(a.select("action").unique(), how="cross")
        counts = join_keys(grid, counts, [*cols, "action"], "left").with_columns(
            pl.col("count").fill_null(0)
        )
    counts = counts.with_columns(
        (pl.col("count") / over(pl.col("count").sum(), cols)).alias("share")
    )
    return to_output(counts.sort([*cols, "action"], nulls_last=True), as_)


def _success_frame(
    data: Any, per: str, window: int | None, by: list[str]
) -> tuple[pl.DataFrame, list[str]]:
    """Per-run success counts (and rolling window sums); returns the frame and its keys."""
    check_per(per, PER_COLUMNS)
    if window is not None:
        if per not in ("step", "agent_step"):
            raise ValueError("window needs per='step' or per='agent_step' (it runs over steps)")
        if int(window) != window or window < 1:
            raise ValueError(f"window must be a positive number of steps, not {window!r}")
    a = load_tables(data, ["actions"], by, "actions")["actions"]
    a = with_by_columns(a, by)
    require_columns(a, ["success", *PER_COLUMNS[per]], "actions", "success_rate")
    a = with_fallback(a)
    keys = group_keys(a, by, "actions")
    cols = keys + PER_COLUMNS[per]
    ok = pl.col("success").cast(pl.Boolean).fill_null(False).cast(pl.Int64)
    g = group(
        a,
        cols,
        [
            pl.len().cast(pl.Int64).alias("decisions"),
            ok.sum().cast(pl.Int64).alias("successes"),
            pl.col("fallback").cast(pl.Int64).sum().cast(pl.Int64).alias("fallbacks"),
        ],
    )
    g = g.with_columns(
        (pl.col("successes") / pl.col("decisions")).alias("success_rate"),
        (pl.col("fallbacks") / pl.col("decisions")).alias("fallback_rate"),
    )
    if window is not None:
        inner = [c for c in cols if c != "step"]
        g = g.sort([*inner, "step"], nulls_last=True)
        if g.height:
            rolled = g.rolling("step", period=f"{int(window)}i", group_by=inner or None).agg(
                pl.col("decisions").sum().alias("window_decisions"),
                pl.col("successes").sum().alias("window_successes"),
            )
            g = join_keys(g, rolled, [*inner, "step"], "left")
        else:
            g = g.with_columns(
                pl.lit(0, pl.Int64).alias("window_decisions"),
                pl.lit(0, pl.Int64).alias("window_successes"),
            )
        g = g.with_columns(
            (pl.col("window_successes") / pl.col("window_decisions")).alias("rolling_success_rate")
        )
    return g.sort(cols, nulls_last=True), keys


def success_rate(
    data: Any,
    *,
    per: Per = "step",
    window: int | None = None,
    by: str | Iterable[str] | None = None,
    as_: str = "pandas",
) -> Frame:
    """Share of successful decisions per step (default), agent, agent and step, or run.

    Columns: ``run_id``, the ``by`` columns, the ``per`` columns, ``decisions``, ``successes``,
    ``fallbacks``, ``success_rate``, ``fallback_rate``. A fallback (a decision that produced
    no usable action: an unusable reply, a policy error) is never a success, so an all-fallback
    run has a success rate of 0 and a fallback rate of 1. With ``window=w`` (per ``step`` or ``agent_step``) also
    ``window_decisions``, ``window_successes`` and ``rolling_success_rate``: successes over
    decisions in the steps ``(t - w, t]`` (a ratio of sums, so busy steps weigh more; steps with
    no row do not shift the window). A decision without a recorded outcome counts as failed.
    """
    by = by_list(by)
    g, _ = _success_frame(data, per, window, by)
    return to_output(g, as_)


def success_ci(
    data: Any,
    *,
    per: Per = "step",
    window: int | None = None,
    by: str | Iterable[str] | None = None,
    method: Literal["t", "wilson"] = "t",
    level: float = 0.95,
    as_: str = "pandas",
) -> Frame:
    """Success rate across runs (seeds) with a confidence interval, per step, agent or group.

    Each run's rate is computed first (per ``per``; with ``window``, the rolling rate, see
    ``success_rate``), then the runs are pooled per ``by`` group and ``per`` columns:

    - ``method="t"`` (default): runs are the units. ``success_rate`` is the mean of the run
      rates and the interval is Student's t interval ``mean +- t(1 - (1-level)/2, n-1) * sd /
      sqrt(n)`` over the ``n`` runs (sd with ddof=1), clipped to [0, 1]; null with fewer than two
      runs.
    - ``method="wilson"``: decisions are the units. ``success_rate`` is the pooled rate
      (all successes over all decisions of the group's runs) and the interval is the Wilson score
      interval with ``z`` the normal quantile. It ignores differences between runs, so it is
      narrower; use it for one run or when decisions are independent.

    Columns: the ``by`` columns, the ``per`` columns, ``n_runs``, ``decisions``, ``successes``,
    ``success_rate``, ``std`` (of the run rates), ``ci_low``, ``ci_high``. A frame without
    ``run_id`` is one run.
    """
    if method not in ("t", "wilson"):
        raise ValueError(f"method must be 't' or 'wilson', not {method!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), not {level}")
    by = by_list(by)
    g, _ = _success_frame(data, per, window, by)
    rate = "rolling_success_rate" if window is not None else "success_rate"
    dec = "window_decisions" if window is not None else "decisions"
    suc = "window_successes" if window is not None else "successes"
    groups = [*by, *PER_COLUMNS[per]]
    out = group(
        g,
        groups,
        [
            pl.col(rate).count().cast(pl.Int64).alias("n_runs"),
            pl.col(dec).sum().cast(pl.Int64).alias("decisions"),
            pl.col(suc).sum().cast(pl.Int64).alias("successes"),
            pl.col(rate).mean().alias("_mean"),
            pl.col(rate).std(ddof=1).alias("std"),
        ],
    )
    if method == "t":
        ns = sorted({int(n) for n in out["n_runs"].to_list() if n is not None and n >= 2})
        mult = pl.DataFrame(
            {"n_runs": ns, "_t": [t_quantile(1.0 - (1.0 - level) / 2.0, n - 1) for n in ns]},
            schema={"n_runs": pl.Int64, "_t": pl.Float64},
        )
        out = out.join(mult, on="n_runs", how="left")
        half = pl.col("_t") * pl.col("std") / pl.col("n_runs").cast(pl.Float64).sqrt()
        out = out.with_columns(
            pl.col("_mean").alias("success_rate"),
            (pl.col("_mean") - half).clip(0.0, 1.0).alias("ci_low"),
            (pl.col("_mean") + half).clip(0.0, 1.0).alias("ci_high"),
        )
    else:
        z = NormalDist().inv_cdf(1.0 - (1.0 - level) / 2.0)
        n = pl.col("decisions").cast(pl.Float64)
        p = pl.col("successes") / n
        denom = 1.0 + z * z / n
        centre = (p + z * z / (2.0 * n)) / denom
        half = z / denom * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt()
        valid = pl.col("decisions") > 0
        out = out.with_columns(
            pl.when(valid).then(p).alias("success_rate"),
            pl.when(valid).then((centre - half).clip(0.0, 1.0)).alias("ci_low"),
            pl.when(valid).then((centre + half).clip(0.0, 1.0)).alias("ci_high"),
        )
    out = out.select(
        *groups, "n_runs", "decisions", "successes", "success_rate", "std", "ci_low", "ci_high"
    )
    return to_output(out.sort(groups, nulls_last=True), as_)


def message_volume(
    data: Any,
    *,
    per: Per = "step",
    by: str | Iterable[str] | None = None,
    as_: str = "pandas",
) -> Frame:
    """Messages posted per step (default), author, author and step, or run.

    Columns: ``run_id``, the ``by`` columns (``by="channel"`` splits by channel), the ``per``
    columns (the author is ``agent_id``), ``messages`` and ``characters`` (total length of the
    contents). Steps and agents without a message get 0 when the steps, agents or actions
    tables tell which there are.
    """
    check_per(per, PER_COLUMNS)
    by = by_list(by)
    tables = load_tables(data, ["messages", "steps", "actions", "agents"], by, "messages")
    m = with_by_columns(tables["messages"], by)
    if "author_id" in m.columns and "agent_id" not in m.columns:
        m = m.rename({"author_id": "agent_id"})
    require_columns(m, PER_COLUMNS[per], "messages", "message_volume")
    keys = group_keys(m, by, "messages")
    cols = keys + PER_COLUMNS[per]
    chars = (
        pl.col("content").cast(pl.String).str.len_chars().sum()
        if "content" in m.columns
        else pl.lit(None, pl.Int64)
    )
    out = group(
        m,
        cols,
        [pl.len().cast(pl.Int64).alias("messages"), chars.cast(pl.Int64).alias("characters")],
    )
    out = fill_missing(
        out,
        grid(tables, m, keys, per),
        cols,
        ["messages", "characters"],
    )
    return to_output(out.sort(cols, nulls_last=True), as_)


def llm_usage(
    data: Any,
    *,
    per: Per = "step",
    by: str | Iterable[str] | None = None,
    as_: str = "pandas",
) -> Frame:
    """LLM calls, tokens, cost, latency and cache hits per step (default), agent, both, or run.

    Columns: ``run_id``, the ``by`` columns, the ``per`` columns, ``calls`` (attempts),
    ``prompt_tokens``, ``completion_tokens``, ``tokens`` (their sum), ``cost`` (as recorded, USD),
    ``mean_latency_ms``, ``cache_hits``, ``cache_hit_rate`` and ``errors`` (attempts that
    failed). Steps and agents without a call get zero counts (and null means) when the steps,
    agents or actions tables tell which there are.
    """
    check_per(per, PER_COLUMNS)
    by = by_list(by)
    tables = load_tables(data, ["llm_calls", "steps", "actions", "agents"], by, "llm_calls")
    c = with_by_columns(tables["llm_calls"], by)
    require_columns(c, PER_COLUMNS[per], "llm_calls", "llm_usage")
    keys = group_keys(c, by, "llm_calls")
    cols = keys + PER_COLUMNS[per]

    def num(name: str, dtype: Any) -> pl.Expr:
        return pl.col(name).cast(dtype) if name in c.columns else pl.lit(None, dtype)

    prompt, completion = num("prompt_tokens", pl.Int64), num("completion_tokens", pl.Int64)
    hit = num("cache_hit", pl.Boolean).cast(pl.Int64)
    aggs = [
        pl.len().cast(pl.Int64).alias("calls"),
        prompt.sum().cast(pl.Int64).alias("prompt_tokens"),
        completion.sum().cast(pl.Int64).alias("completion_tokens"),
        (prompt.fill_null(0) + completion.fill_null(0)).sum().cast(pl.Int64).alias("tokens"),
        num("cost", pl.Float64).sum().alias("cost"),
        num("latency_ms", pl.Float64).mean().alias("mean_latency_ms"),
        hit.sum().cast(pl.Int64).alias("cache_hits"),
        hit.mean().alias("cache_hit_rate"),
        num("error", pl.String).is_not_null().sum().cast(pl.Int64).alias("errors"),
    ]
    out = group(c, cols, aggs)
    zeros = [
        "calls",
        "prompt_tokens",
        "completion_tokens",
        "tokens",
        "cost",
        "cache_hits",
        "errors",
    ]
    out = fill_missing(out, grid(tables, c, keys, per), cols, zeros)
    return to_output(out.sort(cols, nulls_last=True), as_)


_SUMMARY_COLUMNS = {
    "agents": pl.Int64,
    "steps": pl.Int64,
    "decisions": pl.Int64,
    "success_rate": pl.Float64,
    "fallbacks": pl.Int64,
    "fallback_rate": pl.Float64,
    "messages": pl.Int64,
    "llm_calls": pl.Int64,
    "tokens": pl.Int64,
    "cost": pl.Float64,
    "mean_latency_ms": pl.Float64,
    "cache_hit_rate": pl.Float64,
    "pivots": pl.Int64,
}


def summary(
    run_or_frames: Any,
    *,
    by: str | Iterable[str] | None = None,
    state_order: Sequence[str] | None = None,
    exclude: Iterable[Any] = (),
    include_routine: bool = False,
    as_: str = "pandas",
) -> Frame:
    """One row per run: the headline numbers of each run in one table.

    Columns: ``run_id``, the ``by`` columns, ``agents`` (from the agents table, else distinct
    acting agents), ``steps`` (from the steps table, else distinct steps with decisions),
    ``decisions``, ``success_rate`` (fallbacks are not successes), ``fallbacks`` and
    ``fallback_rate`` (decisions without a usable action), ``messages``, ``llm_calls``,
    ``tokens`` (prompt +
    completion), ``cost``, ``mean_latency_ms``, ``cache_hit_rate`` and ``pivots`` (see
    ``pivot_events``: routine moves of a workflow's loop are not pivots unless
    ``include_routine=True``; ``state_order`` and ``exclude`` are passed on). Tables not given
    count as empty (0).
    """
    by = by_list(by)
    names = ["actions", "steps", "agents", "messages", "llm_calls", "transitions"]
    tables = load_tables(run_or_frames, names, by, "actions")
    tables = {n: with_by_columns(df, by) for n, df in tables.items()}
    keyed = [df for df in tables.values() if df.height]
    has_run = not keyed or any("run_id" in df.columns for df in keyed)
    keys = (["run_id"] if has_run else []) + by
    for b in by:
        if keyed and not any(b in df.columns for df in keyed):
            raise ValueError(f"by: column {b!r} is in none of the tables")
    if keys:
        base = universe(keyed, keys)
        if base is None:
            base = pl.DataFrame(schema={k: pl.String for k in keys})
    else:  # one run without a run_id column
        base = pl.DataFrame({"_one": [1]})

    def attach(frame: pl.DataFrame, df: pl.DataFrame, aggs: list[pl.Expr]) -> pl.DataFrame:
        on = [k for k in keys if k in df.columns]
        part = group(df, on, aggs)
        if not on:  # a table without run_id: one row of totals, for every run
            return frame.with_columns(
                pl.lit(part[c][0] if part.height else None, part.schema[c]).alias(c)
                for c in part.columns
            )
        part = part.cast({k: frame.schema[k] for k in on}, strict=False)
        return join_keys(frame, part, on, "left")

    a, s, ag = with_fallback(tables["actions"]), tables["steps"], tables["agents"]
    m, c = tables["messages"], tables["llm_calls"]
    # Measured columns are built as _m_<name> so that no by column is overwritten.
    ok = pl.col("success").cast(pl.Boolean).cast(pl.Float64)
    tok = pl.col("prompt_tokens").fill_null(0) + pl.col("completion_tokens").fill_null(0)
    events, _, _ = pivot_event_frame(
        {"transitions": tables["transitions"], "actions": a},
        by,
        state_order,
        exclude,
        "both",
        include_routine,
    )
    out = attach(base, ag, [pl.len().cast(pl.Int64).alias("_agents_table")])
    out = attach(out, s, [pl.len().cast(pl.Int64).alias("_steps_table")])
    out = attach(
        out,
        a,
        [
            pl.len().cast(pl.Int64).alias("_m_decisions"),
            pl.col("agent_id").n_unique().cast(pl.Int64).alias("_agents_acting"),
            pl.col("step").n_unique().cast(pl.Int64).alias("_steps_acting"),
            ok.mean().alias("_m_success_rate"),
            pl.col("fallback").cast(pl.Int64).sum().cast(pl.Int64).alias("_m_fallbacks"),
            pl.col("fallback").cast(pl.Float64).mean().alias("_m_fallback_rate"),
        ],
    )
    out = attach(out, m, [pl.len().cast(pl.Int64).alias("_m_messages")])
    out = attach(
        out,
        c,
        [
            pl.len().cast(pl.Int64).alias("_m_llm_calls"),
            tok.sum().cast(pl.Int64).alias("_m_tokens"),
            pl.col("cost").cast(pl.Float64).sum().alias("_m_cost"),
            pl.col("latency_ms").cast(pl.Float64).mean().alias("_m_mean_latency_ms"),
            pl.col("cache_hit").cast(pl.Boolean).cast(pl.Float64).mean().alias("_m_cache_hit_rate"),
        ],
    )
    out = attach(out, events, [pl.len().cast(pl.Int64).alias("_m_pivots")])
    out = out.with_columns(
        pl.coalesce("_agents_table", "_agents_acting", pl.lit(0)).alias("_m_agents"),
        pl.coalesce("_steps_table", "_steps_acting", pl.lit(0)).alias("_m_steps"),
        *[
            pl.col(f"_m_{col}").fill_null(0)
            for col in (
                "decisions",
                "fallbacks",
                "messages",
                "llm_calls",
                "tokens",
                "cost",
                "pivots",
            )
        ],
    )
    # A by column named like a summary column (a sweep over ``agents``) keeps its name; the
    # measured value is then ``<name>_observed``.
    out = out.select(
        *keys,
        *[
            pl.col(f"_m_{k}").cast(t).alias(f"{k}_observed" if k in keys else k)
            for k, t in _SUMMARY_COLUMNS.items()
        ],
    )
    return to_output(out.sort(keys, nulls_last=True) if keys else out, as_)
