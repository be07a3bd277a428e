"""Paper figures of run traces, one matplotlib ``Figure`` per function.

Each function takes what the metrics take (a ``Run``, a dict of frames, one frame, a sweep's
merged frames, a list of runs) and returns a matplotlib ``Figure``.

- ``behaviour_timeline`` - agent x step raster, colour = action, failed decisions marked
- ``action_mix`` - stacked shares of the actions over steps (one panel per ``by`` group)
- ``success_curves`` - success rate over steps per group or agent, with CI bands across runs
- ``pivot_raster`` - agent x step marks where agents pivoted, coloured by the state returned to
- ``message_volume`` - messages per step (mean over runs, CI band)
- ``token_use`` - LLM tokens (top) and cost in USD (bottom) per step
- ``world_view`` - agents on their grid cells, coloured by a reporter (``world_view`` module)

Figures are drawn in the paper style (``vivarium.analysis.style``: 7.5-9 pt fonts, Okabe-Ito
colours, a single column 3.3 in wide by default, ``width="double"`` for 6.9 in); rcParams are only
changed inside the functions. Save them with ``save_figure(fig, "figures/name")`` (PDF + PNG).

matplotlib is imported inside the functions. In a headless process that has not chosen a
backend, the non-interactive Agg backend is selected. The figures are not kept open by pyplot:
in a notebook the returned figure is shown once, and loops that make many figures do not pile
them up.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import polars as pl

from vivarium.analysis import metrics
from vivarium.analysis.grouping import join_keys, over
from vivarium.analysis.loading import by_list, load_tables, with_fallback
from vivarium.analysis.pivoting import pivot_events
from vivarium.analysis.statistics import t_quantile
from vivarium.analysis.style import (
    category_colors,
    colors,
    figure_width,
    freeze_style,
    paper_style,
    save_figure,
)
from vivarium.analysis.world_view import world_view
from vivarium.optional import require

__all__ = [
    "action_mix",
    "behaviour_timeline",
    "effect_curves",
    "message_volume",
    "pivot_raster",
    "save_figure",
    "success_curves",
    "token_use",
    "world_view",
]

Width = Literal["single", "double"] | float
MAX_TICK_AGENTS = 25  # label every agent up to this many rows


# -- plumbing -----------------------------------------------------------------------------------
def _ensure_backend() -> None:
    """Select Agg in a headless process where no backend has been chosen."""
    matplotlib = require("matplotlib")

    if "matplotlib.pyplot" in sys.modules or os.environ.get("MPLBACKEND"):
        return
    chosen = getattr(matplotlib.rcParams, "_get_backend_or_none", lambda: None)()
    if chosen is not None:
        return
    headless = sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )
    if headless:
        matplotlib.use("Agg")


def _new_figure(
    width: Width, height: float, nrows: int = 1, ncols: int = 1, **kwargs: Any
) -> tuple[Any, Any]:
    _ensure_backend()
    plt = require("matplotlib.pyplot")

    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(figure_width(width), height),
        squeeze=False,
        layout="constrained",
        **kwargs,
    )
    plt.close(fig)  # the caller owns it; pyplot does not keep (or show) it a second time
    freeze_style(fig)
    return fig, axes


def _one_run(df: pl.DataFrame, run_id: str | None) -> tuple[pl.DataFrame, str | None]:
    """Rows of one run: ``run_id`` or, of several, the first (with a note for the title)."""
    if "run_id" not in df.columns:
        return df, None
    ids = sorted(str(i) for i in df["run_id"].drop_nulls().unique().to_list())
    if run_id is not None:
        if run_id not in ids and df.height:
            raise ValueError(f"run_id {run_id!r} is not in the data (runs: {', '.join(ids)})")
        return df.filter(pl.col("run_id") == run_id), None
    if len(ids) <= 1:
        return df, None
    return df.filter(pl.col("run_id") == ids[0]), f"run {ids[0]} (first of {len(ids)})"


def _agent_order(
    tables: dict[str, pl.DataFrame], run_id: str | None, *found: Iterable[Any]
) -> list[str]:
    """Agents in the run's own order (agents table), then any others seen, sorted."""
    agents = tables.get("agents")
    order: list[str] = []
    if agents is not None and agents.height:
        if run_id is not None and "run_id" in agents.columns:
            agents = agents.filter(pl.col("run_id") == run_id)
        sort = ["agent_idx"] if "agent_idx" in agents.columns else ["agent_id"]
        order = [str(a) for a in agents.sort(sort)["agent_id"].to_list()]
    seen = sorted({str(a) for values in found for a in values if a is not None} - set(order))
    return order + seen


def _series(df: pl.DataFrame, cols: Sequence[str]) -> list[tuple[tuple[Any, ...], pl.DataFrame]]:
    if not cols:
        return [((), df)]
    df = df.sort(list(cols), nulls_last=True, maintain_order=True)
    parts = df.partition_by(list(cols), maintain_order=True, as_dict=True)
    return [(tuple(k), v) for k, v in parts.items()]


def _label(key: tuple[Any, ...]) -> str:
    return ", ".join(
        "n/a" if v is None else f"{v:g}" if isinstance(v, float) else str(v) for v in key
    )


def _across_runs(
    df: pl.DataFrame, groups: list[str], values: list[str], level: float
) -> pl.DataFrame:
    """Mean of each value over runs per group, with a t interval (``<v>_lo``, ``<v>_hi``)."""
    aggs: list[pl.Expr] = [pl.len().cast(pl.Int64).alias("n_runs")]
    for v in values:
        aggs += [pl.col(v).mean().alias(v), pl.col(v).std(ddof=1).alias(f"_{v}_sd")]
    out = df.group_by(groups).agg(aggs) if groups else df.select(aggs)
    ns = sorted({int(n) for n in out["n_runs"].to_list() if n and n >= 2})
    mult = pl.DataFrame(
        {"n_runs": ns, "_t": [t_quantile(1.0 - (1.0 - level) / 2.0, n - 1) for n in ns]},
        schema={"n_runs": pl.Int64, "_t": pl.Float64},
    )
    out = out.join(mult, on="n_runs", how="left")
    for v in values:
        half = pl.col("_t") * pl.col(f"_{v}_sd") / pl.col("n_runs").cast(pl.Float64).sqrt()
        out = out.with_columns(
            (pl.col(v) - half).alias(f"{v}_lo"), (pl.col(v) + half).alias(f"{v}_hi")
        )
    return out.sort(groups, nulls_last=True)


def _rolling_mean(
    df: pl.DataFrame, keys: list[str], value: str, window: int | None
) -> pl.DataFrame:
    """Replace ``value`` by its mean over the steps ``(t - window, t]``, per ``keys``."""
    if not window or df.height == 0:
        return df
    df = df.sort([*keys, "step"], nulls_last=True)
    rolled = df.rolling("step", period=f"{int(window)}i", group_by=keys or None).agg(
        pl.col(value).mean().alias("_rolled")
    )
    return (
        join_keys(df, rolled, [*keys, "step"], "left")
        .with_columns(pl.col("_rolled").alias(value))
        .drop("_rolled")
    )


def _no_data(ax: Any, text: str = "no data") -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.4")


def _agent_axis(
    ax: Any, agents: list[str], labels: list[str] | None = None, label: str = "agent"
) -> None:
    n = len(agents)
    if n <= MAX_TICK_AGENTS:
        ax.set_yticks(range(n), labels or agents)
        ax.set_ylabel(label)
    else:
        MaxNLocator = require("matplotlib.ticker").MaxNLocator

        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(f"{label} (index)")
    if n:
        ax.set_ylim(n - 0.5, -0.5)
    ax.tick_params(axis="y", length=0)


def _raster_height(n_agents: int, legend_rows: int = 0) -> float:
    """Room for the x axis, the legend above, and 0.17 in per row (0.9 to 4 in of rows)."""
    legend = 0.16 * legend_rows + (0.12 if legend_rows else 0.0)
    return 0.55 + legend + min(4.0, max(0.9, 0.17 * n_agents))


def _legend_top(fig: Any, handles: list[Any], ncols: int, title: str | None = None) -> Any:
    return fig.legend(
        handles=handles,
        loc="outside upper center",
        ncols=max(1, ncols),
        title=title,
        handlelength=1.2,
        columnspacing=1.0,
    )


def _legend_cols(labels: Sequence[str], width_in: float) -> int:
    longest = max((len(s) for s in labels), default=1)
    per = 0.35 + 0.06 * longest  # inches per legend column at 7.5 pt
    return max(1, min(len(labels), int(width_in // per)))


def _legend_rows(labels: Sequence[str], width_in: float) -> int:
    return -(-len(labels) // _legend_cols(labels, width_in)) if labels else 0


def _finish(fig: Any, title: str | None) -> Any:
    if not title:
        return fig
    if fig.legends:
        # An outside legend and a suptitle both claim the top edge and overlap under
        # constrained layout: the title goes on top of the legend instead.
        legend = fig.legends[0]
        current = legend.get_title().get_text()
        legend.set_title(f"{title}\n{current}" if current else title)
        legend.get_title().set_fontweight("bold")
    else:
        fig.suptitle(title)
    return fig


# -- figures ----------------------------------------------------------------------------------
def behaviour_timeline(
    data: Any,
    *,
    run_id: str | None = None,
    agents: Sequence[str] | int | None = None,
    mark_failures: bool = True,
    width: Width = "single",
    height: float | None = None,
    title: str | None = None,
) -> Any:
    """Agent x step raster of one run: each cell coloured by the action the agent took.

    Rows are agents (in the run's order; ``agents`` picks some, or an int the first n), columns
    steps. A cell with no decision stays white; with several decisions in a step the last
    counts. Failed decisions are marked with a small black x (``mark_failures``), and the
    legend names every action (``noop`` in grey). Of several runs the first is drawn unless
    ``run_id`` names one.
    """
    import numpy as np

    mcolors = require("matplotlib.colors")
    BoundaryNorm, ListedColormap = mcolors.BoundaryNorm, mcolors.ListedColormap
    Line2D = require("matplotlib.lines").Line2D
    Patch = require("matplotlib.patches").Patch

    tables = load_tables(data, ["actions", "agents"], [], "actions")
    a, note = _one_run(tables["actions"], run_id)
    if "success" in a.columns:
        a = with_fallback(a)  # a fallback is marked too, in older frames as well
    rid = run_id or (str(a["run_id"][0]) if "run_id" in a.columns and a.height else None)
    order = _agent_order(tables, rid, a["agent_id"].unique().to_list() if a.height else [])
    if isinstance(agents, int):
        order = order[:agents]
    elif agents is not None:
        order = [str(x) for x in agents]
    a = a.filter(pl.col("agent_id").is_in(order)) if a.height else a
    sort = ["step", "seq"] if "seq" in a.columns else ["step"]
    last = a.sort(sort).group_by(["agent_id", "step"], maintain_order=True).last()
    actions = sorted(str(x) for x in last["action"].drop_nulls().unique().to_list())
    palette = category_colors(actions)
    has_failed = (
        mark_failures
        and "success" in last.columns
        and last["success"].cast(pl.Boolean).not_().any()
    )
    rows_ = _legend_rows(actions + (["failed"] if has_failed else []), figure_width(width))
    with paper_style():
        fig, axes = _new_figure(width, height or _raster_height(len(order), rows_))
        ax = axes[0, 0]
        ax.set_xlabel("step")
        if last.height == 0 or not order:
            _agent_axis(ax, order)
            _no_data(ax, "no decisions")
            return _finish(fig, title or note)
        s0, s1 = int(last["step"].min()), int(last["step"].max())
        row = {agent: i for i, agent in enumerate(order)}
        code = {action: i for i, action in enumerate(actions)}
        grid = np.full((len(order), s1 - s0 + 1), np.nan)
        rows = np.array([row[x] for x in last["agent_id"].to_list()])
        cols = last["step"].to_numpy() - s0
        codes = np.array(
            [code.get(x, np.nan) if x is not None else np.nan for x in last["action"].to_list()]
        )
        grid[rows, cols] = codes
        cmap = ListedColormap([palette[x] for x in actions], name="actions")
        cmap = cmap.with_extremes(bad=(1.0, 1.0, 1.0, 0.0))
        norm = BoundaryNorm(np.arange(len(actions) + 1) - 0.5, len(actions))
        ax.imshow(
            np.ma.masked_invalid(grid),
            cmap=cmap,
            norm=norm,
            aspect="auto",
            interpolation="nearest",
            extent=(s0 - 0.5, s1 + 0.5, len(order) - 0.5, -0.5),
        )
        handles: list[Any] = [
            Patch(facecolor=palette[x], edgecolor="none", label=x) for x in actions
        ]
        if has_failed:
            withStroke = require("matplotlib.patheffects").withStroke

            failed = last.filter(pl.col("success").cast(pl.Boolean).not_().fill_null(False))
            if failed.height:
                ax.scatter(
                    failed["step"].to_numpy(),
                    [row[x] for x in failed["agent_id"].to_list()],
                    marker="x",
                    s=9,
                    linewidths=0.7,
                    color="black",
                    zorder=3,
                    label="failed",
                    path_effects=[withStroke(linewidth=1.9, foreground="white")],
                )
                handles.append(
                    Line2D(
                        [],
                        [],
                        marker="x",
                        linestyle="none",
                        color="black",
                        markersize=4,
                        label="failed",
                    )
                )
        _agent_axis(ax, order)
        ax.set_xlim(s0 - 0.5, s1 + 0.5)
        ax.spines["left"].set_visible(False)
        labels = [h.get_label() for h in handles]
        _legend_top(fig, handles, _legend_cols(labels, figure_width(width)))
        return _finish(fig, title or note)


def action_mix(
    data: Any,
    *,
    by: str | Iterable[str] | None = None,
    run_id: str | None = None,
    window: int | None = None,
    kind: Literal["area", "bars"] = "area",
    normalize: bool = True,
    width: Width = "single",
    height: float | None = None,
    title: str | None = None,
) -> Any:
    """Stacked shares of the actions over steps (pooled over runs), one panel per ``by`` group.

    With ``window=w`` each step shows the decisions of the steps ``(t - w, t]``. ``kind`` is
    ``"area"`` (stacked areas) or ``"bars"``; ``normalize=False`` stacks counts per step
    (summed over runs) instead of shares.
    """
    Patch = require("matplotlib.patches").Patch

    by = by_list(by)
    counts = metrics.action_counts(data, per="step", by=by, as_="polars")
    if run_id is not None:
        counts = counts.filter(pl.col("run_id") == run_id)
    counts = counts.group_by([*by, "step", "action"]).agg(pl.col("count").sum())
    if window:
        counts = counts.sort([*by, "action", "step"])
        rolled = counts.rolling("step", period=f"{int(window)}i", group_by=[*by, "action"]).agg(
            pl.col("count").sum().alias("_w")
        )
        counts = (
            join_keys(counts, rolled, [*by, "action", "step"], "left")
            .with_columns(pl.col("_w").alias("count"))
            .drop("_w")
        )
    total = pl.col("count").sum().over([*by, "step"])
    counts = counts.with_columns((pl.col("count") / total).fill_nan(0.0).alias("share"))
    value = "share" if normalize else "count"
    actions = sorted(str(x) for x in counts["action"].drop_nulls().unique().to_list())
    palette = category_colors(actions)
    groups = _series(counts, by)
    with paper_style():
        n = max(1, len(groups))
        fig, axes = _new_figure(width, height or (1.1 + 1.0 * n), nrows=n, sharex=True, sharey=True)
        ylabel = "share of decisions" if normalize else "decisions per step"
        if window:
            ylabel += f"\n({window}-step window)"
        for i, (key, sub) in enumerate(groups):
            ax = axes[i, 0]
            if sub.height == 0:
                _no_data(ax, "no decisions")
                continue
            wide = sub.pivot(on="action", index="step", values=value).sort("step").fill_null(0)
            steps = wide["step"].to_numpy()
            ys = [wide[x].to_numpy() if x in wide.columns else steps * 0.0 for x in actions]
            if kind == "bars":
                bottom = steps * 0.0
                for x, y in zip(actions, ys, strict=True):
                    ax.bar(
                        steps, y, bottom=bottom, width=1.0, color=palette[x], linewidth=0, label=x
                    )
                    bottom = bottom + y
            elif kind == "area":
                ax.stackplot(
                    steps, ys, colors=[palette[x] for x in actions], labels=actions, linewidth=0
                )
            else:
                raise ValueError(f"kind must be 'area' or 'bars', not {kind!r}")
            pad = 0.5 if kind == "bars" or steps.min() == steps.max() else 0
            ax.set_xlim(steps.min() - pad, steps.max() + pad)

            if normalize:
                ax.set_ylim(0, 1)
            if by:
                ax.set_title(f"{', '.join(by)} = {_label(key)}", fontsize=8)
            ax.set_ylabel(ylabel)
        axes[-1, 0].set_xlabel("step")
        handles = [Patch(facecolor=palette[x], edgecolor="none", label=x) for x in actions]
        if handles:
            _legend_top(fig, handles, _legend_cols(actions, figure_width(width)))
        return _finish(fig, title)


def success_curves(
    data: Any,
    *,
    by: str | Iterable[str] | None = None,
    per_agent: bool = False,
    window: int | None = None,
    method: Literal["t", "wilson"] = "t",
    level: float = 0.95,
    ci: bool = True,
    width: Width = "single",
    height: float | None = None,
    title: str | None = None,
) -> Any:
    """Success rate over steps: one line per ``by`` group (or per agent), CI bands across runs.

    The values come from ``success_ci`` (same ``window``, ``method`` and ``level``): the line is
    the mean of the runs' rates and the band the t interval across runs (drawn with two runs or
    more), or with ``method="wilson"`` the pooled rate and its Wilson interval. A ``window``
    smooths each run's rate over the steps ``(t - w, t]``.
    """
    Line2D = require("matplotlib.lines").Line2D
    Patch = require("matplotlib.patches").Patch

    by = by_list(by)
    per = "agent_step" if per_agent else "step"
    sc = metrics.success_ci(
        data, per=per, window=window, by=by, method=method, level=level, as_="polars"
    )
    series_cols = [*by, *(["agent_id"] if per_agent else [])]
    groups = _series(sc, series_cols)
    n_runs = int(sc["n_runs"].max() or 0) if sc.height else 0
    band = ci and (method == "wilson" or n_runs >= 2)
    what = f"{round(level * 100):d}% CI " + ("(t, across runs)" if method == "t" else "(Wilson)")
    with paper_style():
        fig, axes = _new_figure(width, height or 2.3)
        ax = axes[0, 0]
        palette = colors(len(groups))
        for i, (key, sub) in enumerate(groups):
            if sub.height == 0:
                continue
            color = palette[i]
            steps = sub["step"].to_numpy()
            ax.plot(
                steps,
                sub["success_rate"].to_numpy(),
                color=color,
                label=_label(key) or "success rate",
            )
            if band and sub["ci_low"].null_count() < sub.height:
                ax.fill_between(
                    steps,
                    sub["ci_low"].fill_null(float("nan")).to_numpy(),
                    sub["ci_high"].fill_null(float("nan")).to_numpy(),
                    color=color,
                    alpha=0.22,
                    linewidth=0,
                )
        if sc.height == 0:
            _no_data(ax, "no decisions")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("step")
        ylabel = "success rate"
        if window:
            ylabel += f"\n({window}-step window)"
        ax.set_ylabel(ylabel)
        ax.margins(x=0)
        n_min = int(sc["n_runs"].min() or 0) if sc.height else 0
        runs_text = f"{n_min}-{n_runs}" if n_min != n_runs else f"{n_runs}"
        mean_of = f"mean of {runs_text} runs" if n_runs >= 2 and method == "t" else None
        short = f"{round(level * 100):d}% CI ({'t' if method == 't' else 'Wilson'})"
        if len(groups) > 1:
            handles = [
                Line2D([], [], color=palette[i], label=_label(key))
                for i, (key, _) in enumerate(groups)
            ]
            legend_title = ", ".join(series_cols)
            if band:
                legend_title += f": {mean_of + ' ± ' if mean_of else ''}{short}"
            labels = [_label(k) for k, _ in groups]
            _legend_top(fig, handles, _legend_cols(labels, figure_width(width)), legend_title)
        elif band and groups:
            handles = [
                Line2D([], [], color=palette[0], label=mean_of or "success rate"),
                Patch(facecolor=palette[0], alpha=0.22, label=what),
            ]
            ax.legend(handles=handles, loc="best")
        return _finish(fig, title)


def pivot_raster(
    data: Any,
    *,
    run_id: str | None = None,
    state_order: Sequence[str] | None = None,
    exclude: Iterable[Any] = (),
    source: Literal["both", "transitions", "flags"] = "both",
    include_routine: bool = False,
    width: Width = "single",
    height: float | None = None,
    title: str | None = None,
) -> Any:
    """Agent x step marks where agents pivoted (see ``vivarium.analysis.pivot_events``), one run.

    Routine moves of a workflow's loop are not pivots unless ``include_routine=True``.

    A back-transition is a left-pointing triangle coloured by the state the agent went back to;
    a ``should_pivot`` flag is an open circle. Every agent of the run has a row (labelled with
    its number of pivots), so agents that never pivot are visible too.
    """
    Line2D = require("matplotlib.lines").Line2D

    exclude = list(exclude)
    events = pivot_events(
        data,
        state_order=state_order,
        exclude=exclude,
        source=source,
        include_routine=include_routine,
        as_="polars",
    )
    tables = load_tables(data, ["actions", "agents", "transitions", "steps"], [], "transitions")
    base = tables["actions"] if tables["actions"].height else tables["transitions"]
    base, note = _one_run(base, run_id)
    rid = run_id or (str(base["run_id"][0]) if "run_id" in base.columns and base.height else None)
    if rid is not None and "run_id" in events.columns:
        events = events.filter(pl.col("run_id") == rid)
    order = _agent_order(
        tables,
        rid,
        base["agent_id"].unique().to_list() if base.height else [],
        events["agent_id"].to_list(),
    )
    row = {agent: i for i, agent in enumerate(order)}
    counts = {a: 0 for a in order}
    for agent in events["agent_id"].to_list():
        counts[agent] = counts.get(agent, 0) + 1
    moves = events.filter(pl.col("source") == "transition")
    flags = events.filter(pl.col("source") != "transition")
    states = sorted(str(s) for s in moves["to_state"].drop_nulls().unique().to_list())
    if state_order:
        states = [s for s in state_order if s in states] + [
            s for s in states if s not in state_order
        ]
    palette = category_colors(states, quiet=())
    entries = [f"back to {x}" for x in states] + (["should_pivot flag"] if flags.height else [])
    rows_ = _legend_rows(entries, figure_width(width))
    with paper_style():
        fig, axes = _new_figure(width, height or _raster_height(len(order), rows_))
        ax = axes[0, 0]
        for i in range(len(order)):
            ax.axhline(i, color="0.9", linewidth=0.5, zorder=0)
        handles: list[Any] = []
        for state in states:
            sub = moves.filter(pl.col("to_state") == state)
            ax.scatter(
                sub["step"].to_numpy(),
                [row[a] for a in sub["agent_id"].to_list()],
                marker="<",
                s=22,
                color=palette[state],
                edgecolors="none",
                zorder=3,
                label=f"back to {state}",
            )
            handles.append(
                Line2D(
                    [],
                    [],
                    marker="<",
                    linestyle="none",
                    color=palette[state],
                    markersize=5,
                    label=f"back to {state}",
                )
            )
        if flags.height:
            ax.scatter(
                flags["step"].to_numpy(),
                [row[a] for a in flags["agent_id"].to_list()],
                marker="o",
                s=18,
                facecolors="none",
                edgecolors="black",
                linewidths=0.7,
                zorder=4,
                label="should_pivot flag",
            )
            handles.append(
                Line2D(
                    [],
                    [],
                    marker="o",
                    linestyle="none",
                    markerfacecolor="none",
                    color="black",
                    markersize=4,
                    label="should_pivot flag",
                )
            )
        steps = [
            s for df in (base, events) if df.height for s in (df["step"].min(), df["step"].max())
        ]
        if steps:
            ax.set_xlim(min(steps) - 0.5, max(steps) + 0.5)
        # Steps are whole numbers: no tick at 2.5 on a short run.
        ax.xaxis.set_major_locator(require("matplotlib.ticker").MaxNLocator(integer=True))
        _agent_axis(ax, order, [f"{a} ({counts.get(a, 0)})" for a in order], "agent (pivots)")
        ax.set_xlabel("step")
        ax.spines["left"].set_visible(False)
        if events.height == 0:
            _no_data(ax, "no pivots")
        if handles:
            labels = [h.get_label() for h in handles]
            _legend_top(fig, handles, _legend_cols(labels, figure_width(width)))
        return _finish(fig, title or note)


def message_volume(
    data: Any,
    *,
    by: str | Iterable[str] | None = None,
    per_agent: bool = False,
    window: int | None = None,
    cumulative: bool = False,
    level: float = 0.95,
    width: Width = "single",
    height: float | None = None,
    title: str | None = None,
) -> Any:
    """Messages per step (or cumulative), one line per ``by`` group or per author.

    Several runs: the line is the mean over runs and the band its t interval (``level``). A
    ``window`` averages each run over the steps ``(t - w, t]`` first.
    """
    by = by_list(by)
    per = "agent_step" if per_agent else "step"
    mv = metrics.message_volume(data, per=per, by=by, as_="polars")
    series_cols = [*by, *(["agent_id"] if per_agent else [])]
    run_keys = (["run_id"] if "run_id" in mv.columns else []) + series_cols
    mv = mv.with_columns(pl.col("messages").cast(pl.Float64))
    if cumulative:
        mv = mv.sort([*run_keys, "step"], nulls_last=True).with_columns(
            over(pl.col("messages").cum_sum(), run_keys)
        )
    mv = _rolling_mean(mv, run_keys, "messages", window)
    agg = _across_runs(mv, [*series_cols, "step"], ["messages"], level) if mv.height else mv
    groups = _series(agg, series_cols)
    with paper_style():
        fig, axes = _new_figure(width, height or 2.0)
        ax = axes[0, 0]
        palette = colors(len(groups))
        steps_style = {} if window or cumulative else {"drawstyle": "steps-mid"}
        for i, (key, sub) in enumerate(groups):
            _line_band(ax, sub, "messages", palette[i], _label(key) or "messages", **steps_style)
        if mv.height == 0:
            _no_data(ax, "no steps")
        ylabel = "cumulative messages" if cumulative else "messages per step"
        if window:
            ylabel += f"\n({window}-step mean)"
        n_runs = int(agg["n_runs"].max() or 0) if agg.height else 0
        if n_runs >= 2:
            ylabel += f"\n(mean of {n_runs} runs)"
        ax.set_ylabel(ylabel)
        ax.set_xlabel("step")
        ax.set_ylim(bottom=0)
        ax.margins(x=0)
        if n_runs < 2 and not window:
            MaxNLocator = require("matplotlib.ticker").MaxNLocator

            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        if len(groups) > 1:
            labels = [_label(k) for k, _ in groups]
            handles = ax.get_legend_handles_labels()[0]
            title_ = ", ".join(series_cols)
            _legend_top(fig, handles, _legend_cols(labels, figure_width(width)), title_)
        return _finish(fig, title)


def effect_curves(
    differences: Any,
    *,
    width: Width = "single",
    height: float | None = None,
    title: str | None = None,
) -> Any:
    """A treatment's effect over steps, with its interval, against the zero line of no effect.

    One line per arm: its mean difference from the control. ``differences`` is what ``paired_difference`` or ``independent_difference`` gives with
    ``per="step"`` (pandas or polars): its column after ``step`` names the arms; one line per
    arm, the band its interval (where it has one: two pairs or more).
    """
    Line2D = require("matplotlib.lines").Line2D
    Patch = require("matplotlib.patches").Patch

    from vivarium.analysis.loading import _to_polars

    d = _to_polars(differences)
    if not {"step", "n", "mean_diff"} <= set(d.columns):
        raise ValueError(
            "effect_curves takes paired_difference's or independent_difference's frame with "
            "per='step'"
        )
    arm = d.columns[d.columns.index("n") - 1]  # the columns are (*per, arm, n, mean_diff, ...)
    if d.columns[: d.columns.index(arm)] != ["step"]:
        raise ValueError(
            "effect_curves draws a difference computed with per='step' alone, not per="
            f"{d.columns[: d.columns.index(arm)]!r}"
        )
    groups = _series(d.sort("step"), [arm])
    with paper_style():
        fig, axes = _new_figure(width, height or 2.3)
        ax = axes[0, 0]
        palette = colors(len(groups))
        ax.axhline(0.0, color="#888888", linewidth=0.8, linestyle="--", zorder=0)
        for i, (key, sub) in enumerate(groups):
            steps = sub["step"].to_numpy()
            ax.plot(steps, sub["mean_diff"].to_numpy(), color=palette[i], label=_label(key))
            if sub["ci_low"].null_count() < sub.height:
                ax.fill_between(
                    steps,
                    sub["ci_low"].fill_null(float("nan")).to_numpy(),
                    sub["ci_high"].fill_null(float("nan")).to_numpy(),
                    color=palette[i],
                    alpha=0.22,
                    linewidth=0,
                )
        if d.height == 0:
            _no_data(ax, "no pairs")
        ax.set_xlabel("step")
        ax.set_ylabel("effect (arm - control)")
        ax.xaxis.set_major_locator(require("matplotlib.ticker").MaxNLocator(integer=True))
        ax.margins(x=0)
        handles = [
            Line2D([], [], color=palette[i], label=_label(k)) for i, (k, _) in enumerate(groups)
        ]
        handles.append(Patch(facecolor="#888888", alpha=0.22, label="confidence interval"))
        ax.legend(handles=handles, title=arm, loc="best")
        return _finish(fig, title)


def _line_band(ax: Any, sub: pl.DataFrame, value: str, color: str, label: str, **kw: Any) -> None:
    if sub.height == 0:
        return
    steps = sub["step"].to_numpy()
    ax.plot(steps, sub[value].to_numpy(), color=color, label=label, **kw)
    lo, hi = f"{value}_lo", f"{value}_hi"
    if lo in sub.columns and sub[lo].null_count() < sub.height:
        ax.fill_between(
            steps,
            sub[lo].fill_null(float("nan")).clip(lower_bound=0).to_numpy(),
            sub[hi].fill_null(float("nan")).to_numpy(),
            color=color,
            alpha=0.22,
            linewidth=0,
            step="mid" if kw.get("drawstyle") == "steps-mid" else None,
        )


def token_use(
    data: Any,
    *,
    by: str | Iterable[str] | None = None,
    window: int | None = None,
    level: float = 0.95,
    width: Width = "single",
    height: float | None = None,
    title: str | None = None,
) -> Any:
    """LLM tokens per step (top panel) and cost per step in USD (bottom panel).

    Without ``by`` the top panel has prompt and completion tokens; with ``by`` one line of total
    tokens per group. Several runs: means over runs with t-interval bands. A ``window``
    averages each run over the steps ``(t - w, t]`` first.
    """
    by = by_list(by)
    u = metrics.llm_usage(data, per="step", by=by, as_="polars")
    run_keys = (["run_id"] if "run_id" in u.columns else []) + by
    values = ["prompt_tokens", "completion_tokens", "tokens", "cost"]
    u = u.with_columns(pl.col(v).cast(pl.Float64).fill_null(0.0) for v in values)
    for v in values:
        u = _rolling_mean(u, run_keys, v, window)
    agg = _across_runs(u, [*by, "step"], values, level) if u.height else u
    groups = _series(agg, by)
    with paper_style():
        fig, axes = _new_figure(width, height or 3.0, nrows=2, sharex=True)
        top, bottom = axes[0, 0], axes[1, 0]
        if by:
            palette = colors(len(groups))
            for i, (key, sub) in enumerate(groups):
                _line_band(top, sub, "tokens", palette[i], _label(key))
                _line_band(bottom, sub, "cost", palette[i], _label(key))
            if groups:
                top.legend(title=", ".join(by), loc="best")
        elif groups:
            sub = groups[0][1]
            _line_band(top, sub, "prompt_tokens", colors(2)[0], "prompt")
            _line_band(top, sub, "completion_tokens", colors(2)[1], "completion", linestyle="--")
            _line_band(bottom, sub, "cost", "black", "cost")
            if sub.height:
                top.legend(loc="best")
        suffix = f"\n({window}-step mean)" if window else ""
        top.set_ylabel("tokens per step" + suffix)
        bottom.set_ylabel("cost per step (USD)" + suffix)
        bottom.set_xlabel("step")
        for ax in (top, bottom):
            ax.set_ylim(bottom=0)
            ax.margins(x=0)
        if u.height == 0 or u["tokens"].sum() == 0:
            _no_data(top, "no LLM calls")
        if u.height and float(u["cost"].abs().sum()) == 0.0:
            _no_data(bottom, "no cost recorded")
            bottom.set_yticks([])
        return _finish(fig, title)
