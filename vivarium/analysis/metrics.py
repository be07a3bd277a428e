"""Metrics over run traces, computed with polars, returned as pandas (default) or polars.

Every function takes ``data`` as any of:

- a ``Run`` (or the path of a trace file, opened with ``Run.open``);
- a dict of frames by table name, as ``run.to_polars()`` gives (polars or pandas frames);
- one polars or pandas frame of the table the function reads (recognised by its columns);
- a list of any of these (their tables are concatenated, e.g. several seeds' runs);

and works on one run and on a sweep's merged frames alike: rows are grouped by ``run_id`` (when
the table has one) and by the extra columns named in ``by=`` (parameter columns such as
``temperature``, kept in the result). A ``by`` column that a table lacks is taken per agent from
the agents table when it has it (``by="policy"`` splits a mixed run by policy), else, for a
``Run``, from the run's recorded config or metadata (``by=["seed"]``). In the agents table the
agent's own seed is ``agent_seed`` (and a sweep's ``sweep.seed`` is ``seed``). A table that was
not given, or is empty, counts as empty: the result is then an empty frame with the usual
columns.

Results are sorted by their key columns; ``as_="polars"`` returns a polars frame.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from statistics import NormalDist
from typing import Any, Literal

import polars as pl

Per = Literal["step", "agent", "agent_step", "run"]
Frame = Any  # a pandas.DataFrame or polars.DataFrame, as the caller asked (as_=)

__all__ = [
    "TABLE_SCHEMAS",
    "action_counts",
    "llm_usage",
    "message_volume",
    "pivot_events",
    "pivots",
    "success_ci",
    "success_rate",
    "summary",
    "t_quantile",
    "wilson_interval",
]

# The columns of each trace table (as read by vivarium.trace.frames), categoricals as text.
TABLE_SCHEMAS: dict[str, dict[str, Any]] = {
    "actions": {
        "run_id": pl.String,
        "step": pl.Int64,
        "seq": pl.Int64,
        "agent_id": pl.String,
        "action": pl.String,
        "arguments": pl.String,
        "reasoning": pl.String,
        "metadata": pl.String,
        "success": pl.Boolean,
        "fallback": pl.Boolean,
        "result": pl.String,
        "error": pl.String,
    },
    "messages": {
        "run_id": pl.String,
        "step": pl.Int64,
        "seq": pl.Int64,
        "author_id": pl.String,
        "channel": pl.String,
        "content": pl.String,
    },
    "llm_calls": {
        "run_id": pl.String,
        "step": pl.Int64,
        "agent_id": pl.String,
        "attempt": pl.Int64,
        "model": pl.String,
        "request_hash": pl.String,
        "prompt_tokens": pl.Int64,
        "completion_tokens": pl.Int64,
        "cost": pl.Float64,
        "latency_ms": pl.Float64,
        "cache_hit": pl.Boolean,
        "finish_reason": pl.String,
        "error": pl.String,
    },
    "transitions": {
        "run_id": pl.String,
        "step": pl.Int64,
        "agent_id": pl.String,
        "from_state": pl.String,
        "to_state": pl.String,
        "trigger": pl.String,
        "routine": pl.Boolean,
    },
    "steps": {
        "run_id": pl.String,
        "step": pl.Int64,
        "n_actions": pl.Int64,
        "n_messages": pl.Int64,
        "world_digest": pl.String,
        "state_hash": pl.String,
        "wall_time": pl.String,
        "clock": pl.Float64,
    },
    "agents": {
        "run_id": pl.String,
        "agent_idx": pl.Int64,
        "agent_id": pl.String,
        "policy": pl.String,
        "agent_seed": pl.String,
    },
}

# How a lone frame is recognised: the first table whose marker columns it has.
_MARKERS: list[tuple[str, tuple[str, ...]]] = [
    ("transitions", ("from_state", "to_state")),
    ("llm_calls", ("prompt_tokens",)),
    ("llm_calls", ("request_hash",)),
    ("messages", ("author_id",)),
    ("steps", ("n_actions",)),
    ("steps", ("state_hash",)),
    ("agents", ("agent_idx",)),
    ("actions", ("action",)),
    ("actions", ("success",)),
]

_PER_COLS: dict[str, list[str]] = {
    "step": ["step"],
    "agent": ["agent_id"],
    "agent_step": ["agent_id", "step"],
    "run": [],
}

_TRUTHY = ["true", "1", "1.0", "yes"]


# -- inputs -----------------------------------------------------------------------------------
def _is_run(obj: Any) -> bool:
    return hasattr(obj, "frame") and hasattr(obj, "metadata") and hasattr(obj, "run_id")


def _to_polars(obj: Any) -> pl.DataFrame:
    if isinstance(obj, pl.LazyFrame):
        obj = obj.collect()
    if isinstance(obj, pl.DataFrame):
        return obj
    if type(obj).__module__.startswith("pandas") and hasattr(obj, "columns"):
        return pl.from_pandas(obj)
    if hasattr(obj, "schema") and hasattr(obj, "num_rows"):  # a pyarrow table
        return pl.from_arrow(obj)  # type: ignore[return-value]
    raise TypeError(f"expected a polars or pandas frame, got {type(obj).__name__}")


def _identify(df: pl.DataFrame) -> str | None:
    cols = set(df.columns)
    for name, markers in _MARKERS:
        if all(m in cols for m in markers):
            return name
    return None


def _normalise(df: pl.DataFrame, name: str) -> pl.DataFrame:
    """Categoricals to text; agents' own columns apart from run-level ones; empty frames typed.

    In the agents table ``seed`` is the agent's seed: it becomes ``agent_seed`` here, and a
    sweep's run-level ``sweep.<x>`` columns become ``<x>`` (their clash renamed ``agent_<x>``).
    """
    import polars.selectors as cs

    df = df.with_columns((cs.categorical() | cs.enum()).cast(pl.String))
    if name == "agents":
        renames = {}
        for col in df.columns:
            if col.startswith("sweep."):
                own = col.removeprefix("sweep.")
                if own in df.columns:
                    renames[own] = f"agent_{own}"
                renames[col] = own
        if "seed" in df.columns and "seed" not in renames and "agent_seed" not in df.columns:
            renames["seed"] = "agent_seed"
        df = df.rename(renames)
    if df.height == 0:
        schema = TABLE_SCHEMAS[name]
        missing = [pl.lit(None, t).alias(c) for c, t in schema.items() if c not in df.columns]
        if missing:
            df = df.with_columns(missing) if df.width else pl.DataFrame(schema=schema)
    return df


def _empty(name: str) -> pl.DataFrame:
    return pl.DataFrame(schema=TABLE_SCHEMAS[name])


def _run_value(run: Any, column: str) -> Any:
    meta = getattr(run, "metadata", None) or {}
    config = meta.get("config") or {}
    for source in (config, meta):
        value = source.get(column)
        if value is not None and not isinstance(value, dict | list):
            return value
    return None


def _resolve_by(
    tables: dict[str, pl.DataFrame], by: Sequence[str], run: Any
) -> dict[str, pl.DataFrame]:
    """Give every table the ``by`` columns it lacks: per agent from the agents table (e.g.
    ``policy``), else, for a ``Run``, from its metadata or recorded config (e.g. ``seed``)."""
    agents = tables.get("agents")
    out = {}
    for name, df in tables.items():
        missing = [b for b in by if b not in df.columns]
        agent_col = next((c for c in ("agent_id", "author_id") if c in df.columns), None)
        if missing and name != "agents" and agent_col and agents is not None and agents.height:
            take = [b for b in missing if b in agents.columns]
            if take and "agent_id" in agents.columns:
                on = ["run_id"] if "run_id" in df.columns and "run_id" in agents.columns else []
                right = agents.select(*on, pl.col("agent_id").alias(agent_col), *take)
                right = right.unique([*on, agent_col], keep="first")
                right = right.cast({c: df.schema[c] for c in [*on, agent_col]}, strict=False)
                df = (
                    df.with_row_index("_ord")
                    .join(right, on=[*on, agent_col], how="left")
                    .sort("_ord")
                    .drop("_ord")
                )
                missing = [b for b in missing if b not in take]
        if missing and run is not None:
            values = {b: _run_value(run, b) for b in missing}
            df = df.with_columns(
                pl.lit(
                    v, pl.Int64 if isinstance(v, int) and not isinstance(v, bool) else None
                ).alias(b)
                for b, v in values.items()
                if v is not None
            )
        out[name] = df
    return out


def _load(
    data: Any, names: Sequence[str], by: Sequence[str], primary: str
) -> dict[str, pl.DataFrame]:
    """The tables ``names`` from ``data`` (those not given are empty), with the ``by`` columns."""
    names = list(dict.fromkeys(names))
    wanted = [*names, "agents"] if by and "agents" not in names else names
    if isinstance(data, str | os.PathLike):
        from vivarium.experiment import Run

        data = Run.open(data)
    run = None
    if data is None:
        tables = {n: _empty(n) for n in wanted}
    elif _is_run(data):
        run = data
        tables = {n: _normalise(_to_polars(data.frame(n, "polars")), n) for n in wanted}
    elif isinstance(data, Mapping):
        tables = {
            n: _empty(n) if data.get(n) is None else _normalise(_to_polars(data[n]), n)
            for n in wanted
        }
    elif isinstance(data, list | tuple):
        parts = [_load(item, names, by, primary) for item in data]
        return {
            n: _normalise(pl.concat([p[n] for p in parts], how="diagonal_relaxed"), n)
            if parts
            else _empty(n)
            for n in names
        }
    else:
        df = _to_polars(data)
        kind = _identify(df)
        if kind is None and df.height == 0:
            kind = primary
        if kind not in names:
            shown = ", ".join(df.columns) or "none"
            raise ValueError(
                f"expected the {' or '.join(names)} table, got a frame with columns: {shown}"
            )
        tables = {n: _normalise(df, n) if n == kind else _empty(n) for n in wanted}
    if by:
        tables = _resolve_by(tables, by, run)
    return {n: tables[n] for n in names}


def _by_list(by: str | Iterable[str] | None) -> list[str]:
    if by is None:
        return []
    if isinstance(by, str):
        return [by]
    return [b for b in dict.fromkeys(by) if b != "run_id"]


def _keys(df: pl.DataFrame, by: Sequence[str], table: str) -> list[str]:
    """``run_id`` (if the table has it) and the ``by`` columns, which must exist."""
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


def _with_by(df: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    """Give an empty frame the ``by`` columns it lacks, so empty results keep their shape."""
    if df.height:
        return df
    return df.with_columns([pl.lit(None, pl.String).alias(b) for b in by if b not in df.columns])


def _require(df: pl.DataFrame, columns: Iterable[str], table: str, what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(
            f"{what} needs column(s) {', '.join(missing)} in the {table} table "
            f"(columns: {', '.join(df.columns)})"
        )


def _check_per(per: str, allowed: Iterable[str]) -> None:
    allowed = list(allowed)
    if per not in allowed:
        raise ValueError(f"per must be one of {', '.join(map(repr, allowed))}, not {per!r}")


def _out(df: pl.DataFrame, as_: str) -> Frame:
    if as_ == "polars":
        return df
    if as_ == "pandas":
        return df.to_pandas()
    raise ValueError(f"as_ must be 'pandas' or 'polars', not {as_!r}")


def _join(left: pl.DataFrame, right: pl.DataFrame, on: list[str], how: str) -> pl.DataFrame:
    """A join on ``on`` in which null keys match each other (by columns may hold nulls)."""
    try:
        return left.join(right, on=on, how=how, nulls_equal=True, coalesce=True)  # type: ignore[arg-type]
    except TypeError:  # polars < 1.24 calls it join_nulls
        return left.join(right, on=on, how=how, join_nulls=True, coalesce=True)  # type: ignore[arg-type,call-arg]


def _over(expr: pl.Expr, cols: list[str]) -> pl.Expr:
    return expr.over(cols) if cols else expr


def _group(df: pl.DataFrame, cols: list[str], aggs: list[pl.Expr]) -> pl.DataFrame:
    if cols:
        return df.group_by(cols).agg(aggs)
    if df.height == 0:
        return df.select(aggs).clear()
    return df.select(aggs)


def _universe(frames: Iterable[pl.DataFrame], cols: list[str]) -> pl.DataFrame | None:
    """The distinct ``cols`` rows over the frames that have all of them (None: none has)."""
    parts = [f.select(cols) for f in frames if f.height and all(c in f.columns for c in cols)]
    if not parts or not cols:
        return None
    return pl.concat(parts, how="vertical_relaxed").unique()


def _grid(
    tables: dict[str, pl.DataFrame], primary: pl.DataFrame, keys: list[str], per: str
) -> pl.DataFrame | None:
    """The rows a ``per`` result should have: every step, agent, or agent and step of a run,
    as far as the steps, agents and actions tables (and the table itself) tell."""
    empty = pl.DataFrame()
    steps, actions = tables.get("steps", empty), tables.get("actions", empty)
    agents, moves = tables.get("agents", empty), tables.get("transitions", empty)
    step_rows = _universe([steps, actions, moves], [*keys, "step"])
    agent_rows = _universe([agents, actions, moves, primary], [*keys, "agent_id"])
    if per == "step":
        return step_rows
    if per == "agent":
        return agent_rows
    if per == "run":
        return _universe([steps, actions, agents, moves], keys)
    if step_rows is None or agent_rows is None:
        return None
    step_rows = _universe([step_rows, primary], [*keys, "step"])
    if not keys:
        return agent_rows.join(step_rows, how="cross")
    step_rows = step_rows.cast({k: agent_rows.schema[k] for k in keys}, strict=False)
    return _join(agent_rows, step_rows, keys, "inner")


def _fill(
    result: pl.DataFrame, universe: pl.DataFrame | None, cols: list[str], zeros: list[str]
) -> pl.DataFrame:
    """Add the rows of ``universe`` that ``result`` lacks, with 0 in ``zeros``."""
    if universe is None or not cols:
        return result
    if result.height:
        universe = universe.cast({c: result.schema[c] for c in cols}, strict=False)
    else:
        result = result.cast({c: universe.schema[c] for c in cols})
    merged = _join(universe, result, cols, "full")
    return merged.with_columns([pl.col(z).fill_null(0) for z in zeros])


# -- statistics -------------------------------------------------------------------------------
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@lru_cache(maxsize=256)
def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t distribution with ``df`` degrees of freedom.

    Computed from the regularized incomplete beta function and bisection (no scipy), to about
    1e-12: ``t_quantile(0.975, 4) == 2.7764...``.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), not {p}")
    if df <= 0:
        raise ValueError(f"df must be positive, not {df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if _t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def wilson_interval(successes: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion (``(nan, nan)`` when n is 0)."""
    if n <= 0:
        return (math.nan, math.nan)
    z = NormalDist().inv_cdf(1.0 - (1.0 - level) / 2.0)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2.0 * n)) / denom
    half = z / denom * math.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n))
    return (max(0.0, centre - half), min(1.0, centre + half))


# -- metrics ----------------------------------------------------------------------------------
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
    _check_per(per, _PER_COLS)
    by = _by_list(by)
    a = _load(data, ["actions"], by, "actions")["actions"]
    a = _with_by(a, by)
    _require(a, ["action", *_PER_COLS[per]], "actions", "action_counts")
    cols = _keys(a, by, "actions") + _PER_COLS[per]
    counts = a.group_by([*cols, "action"]).agg(pl.len().cast(pl.Int64).alias("count"))
    if counts.height:
        grid = a.select(cols).unique().join(a.select("action").unique(), how="cross")
        counts = _join(grid, counts, [*cols, "action"], "left").with_columns(
            pl.col("count").fill_null(0)
        )
    counts = counts.with_columns(
        (pl.col("count") / _over(pl.col("count").sum(), cols)).alias("share")
    )
    return _out(counts.sort([*cols, "action"], nulls_last=True), as_)


_FALLBACK_METADATA = '"parse_path":"fallback"'


def _with_fallback(a: pl.DataFrame) -> pl.DataFrame:
    """The actions with a boolean ``fallback`` column, and ``success`` false where it is set.

    A fallback (no usable action: an unusable reply, a policy error, an outage recorded under
    ``on_llm_error="fallback"``) is never a success. Frames from before the ``fallback`` column
    recorded an unusable reply as a successful ``noop`` with ``parse_path: fallback`` in its
    metadata: that is read here as the fallback it was.
    """
    if "fallback" in a.columns:
        flag = pl.col("fallback").cast(pl.Boolean).fill_null(False)
    elif "metadata" in a.columns:
        text = pl.col("metadata").cast(pl.String)
        flag = text.str.contains(_FALLBACK_METADATA, literal=True).fill_null(False)
    else:
        flag = pl.lit(False)
    a = a.with_columns(flag.alias("fallback"))
    if "success" in a.columns:
        ok = pl.col("success").cast(pl.Boolean)
        a = a.with_columns(pl.when(pl.col("fallback")).then(False).otherwise(ok).alias("success"))
    return a


def _success_frame(
    data: Any, per: str, window: int | None, by: list[str]
) -> tuple[pl.DataFrame, list[str]]:
    """Per-run success counts (and rolling window sums); returns the frame and its keys."""
    _check_per(per, _PER_COLS)
    if window is not None:
        if per not in ("step", "agent_step"):
            raise ValueError("window needs per='step' or per='agent_step' (it runs over steps)")
        if int(window) != window or window < 1:
            raise ValueError(f"window must be a positive number of steps, not {window!r}")
    a = _load(data, ["actions"], by, "actions")["actions"]
    a = _with_by(a, by)
    _require(a, ["success", *_PER_COLS[per]], "actions", "success_rate")
    a = _with_fallback(a)
    keys = _keys(a, by, "actions")
    cols = keys + _PER_COLS[per]
    ok = pl.col("success").cast(pl.Boolean).fill_null(False).cast(pl.Int64)
    g = _group(
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
            g = _join(g, rolled, [*inner, "step"], "left")
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
    by = _by_list(by)
    g, _ = _success_frame(data, per, window, by)
    return _out(g, as_)


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
    by = _by_list(by)
    g, _ = _success_frame(data, per, window, by)
    rate = "rolling_success_rate" if window is not None else "success_rate"
    dec = "window_decisions" if window is not None else "decisions"
    suc = "window_successes" if window is not None else "successes"
    groups = [*by, *_PER_COLS[per]]
    out = _group(
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
    return _out(out.sort(groups, nulls_last=True), as_)


# -- pivots -----------------------------------------------------------------------------------
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
        t = _join(
            t,
            first.rename({"_state": "from_state", "_first": "_from"}),
            [*agent, "from_state"],
            "left",
        )
        t = _join(
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


def _pivot_events(
    data: Any,
    by: list[str],
    state_order: Sequence[str] | None,
    exclude: Iterable[Any],
    source: str,
    include_routine: bool = False,
) -> tuple[pl.DataFrame, dict[str, pl.DataFrame], list[str]]:
    if source not in ("both", "transitions", "flags"):
        raise ValueError(f"source must be 'both', 'transitions' or 'flags', not {source!r}")
    tables = _load(data, ["transitions", "actions", "steps", "agents"], by, "transitions")
    t = _with_by(tables["transitions"], by)
    a = _with_by(tables["actions"], by)
    tables = {**tables, "transitions": t, "actions": a}
    src = t if t.height or not a.height else a
    keys = _keys(src, by, "transitions" if src is t else "actions")
    parts = []
    if source in ("both", "transitions"):
        _require(t, ["agent_id", "step", "from_state", "to_state"], "transitions", "pivots")
        moves = _transition_pivots(
            t, _keys(t, by, "transitions"), state_order, _pairs(exclude), include_routine
        )
        parts.append(moves)
    if source in ("both", "flags") and "metadata" in a.columns:
        _require(a, ["agent_id", "step"], "actions", "pivots")
        flags = _flag_pivots(a, _keys(a, by, "actions"))
        if parts and flags.height and parts[0].height:
            # Routine moves are left out like ``exclude``d ones: declaring a move routine in the
            # workflow counts the same as excluding it here.
            on = [c for c in [*keys, "agent_id", "step"] if c in flags.columns]
            on = [c for c in on if c in parts[0].columns]
            flags = _join(flags, parts[0].select(on).unique(), on, "anti")
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
    by = _by_list(by)
    events, _, _ = _pivot_events(data, by, state_order, exclude, source, include_routine)
    return _out(events, as_)


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
    _check_per(per, _PER_COLS)
    by = _by_list(by)
    events, tables, keys = _pivot_events(data, by, state_order, exclude, source, include_routine)
    cols = keys + _PER_COLS[per]
    counts = _group(events, cols, [pl.len().cast(pl.Int64).alias("pivots")])
    counts = _fill(counts, _grid(tables, events, keys, per), cols, ["pivots"])
    counts = counts.sort(cols, nulls_last=True)
    if per in ("step", "agent_step"):
        inner = [c for c in cols if c != "step"]
        counts = counts.with_columns(
            _over(pl.col("pivots").cum_sum(), inner).alias("cumulative_pivots")
        )
    return _out(counts, as_)


# -- messages and LLM calls ---------------------------------------------------------------------
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
    _check_per(per, _PER_COLS)
    by = _by_list(by)
    tables = _load(data, ["messages", "steps", "actions", "agents"], by, "messages")
    m = _with_by(tables["messages"], by)
    if "author_id" in m.columns and "agent_id" not in m.columns:
        m = m.rename({"author_id": "agent_id"})
    _require(m, _PER_COLS[per], "messages", "message_volume")
    keys = _keys(m, by, "messages")
    cols = keys + _PER_COLS[per]
    chars = (
        pl.col("content").cast(pl.String).str.len_chars().sum()
        if "content" in m.columns
        else pl.lit(None, pl.Int64)
    )
    out = _group(
        m,
        cols,
        [pl.len().cast(pl.Int64).alias("messages"), chars.cast(pl.Int64).alias("characters")],
    )
    out = _fill(
        out,
        _grid(tables, m, keys, per),
        cols,
        ["messages", "characters"],
    )
    return _out(out.sort(cols, nulls_last=True), as_)


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
    _check_per(per, _PER_COLS)
    by = _by_list(by)
    tables = _load(data, ["llm_calls", "steps", "actions", "agents"], by, "llm_calls")
    c = _with_by(tables["llm_calls"], by)
    _require(c, _PER_COLS[per], "llm_calls", "llm_usage")
    keys = _keys(c, by, "llm_calls")
    cols = keys + _PER_COLS[per]

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
    out = _group(c, cols, aggs)
    zeros = [
        "calls",
        "prompt_tokens",
        "completion_tokens",
        "tokens",
        "cost",
        "cache_hits",
        "errors",
    ]
    out = _fill(out, _grid(tables, c, keys, per), cols, zeros)
    return _out(out.sort(cols, nulls_last=True), as_)


# -- summary ------------------------------------------------------------------------------------
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
    by = _by_list(by)
    names = ["actions", "steps", "agents", "messages", "llm_calls", "transitions"]
    tables = _load(run_or_frames, names, by, "actions")
    tables = {n: _with_by(df, by) for n, df in tables.items()}
    keyed = [df for df in tables.values() if df.height]
    has_run = not keyed or any("run_id" in df.columns for df in keyed)
    keys = (["run_id"] if has_run else []) + by
    for b in by:
        if keyed and not any(b in df.columns for df in keyed):
            raise ValueError(f"by: column {b!r} is in none of the tables")
    if keys:
        base = _universe(keyed, keys)
        if base is None:
            base = pl.DataFrame(schema={k: pl.String for k in keys})
    else:  # one run without a run_id column
        base = pl.DataFrame({"_one": [1]})

    def attach(frame: pl.DataFrame, df: pl.DataFrame, aggs: list[pl.Expr]) -> pl.DataFrame:
        on = [k for k in keys if k in df.columns]
        part = _group(df, on, aggs)
        if not on:  # a table without run_id: one row of totals, for every run
            return frame.with_columns(
                pl.lit(part[c][0] if part.height else None, part.schema[c]).alias(c)
                for c in part.columns
            )
        part = part.cast({k: frame.schema[k] for k in on}, strict=False)
        return _join(frame, part, on, "left")

    a, s, ag = _with_fallback(tables["actions"]), tables["steps"], tables["agents"]
    m, c = tables["messages"], tables["llm_calls"]
    # Measured columns are built as _m_<name> so that no by column is overwritten.
    ok = pl.col("success").cast(pl.Boolean).cast(pl.Float64)
    tok = pl.col("prompt_tokens").fill_null(0) + pl.col("completion_tokens").fill_null(0)
    events, _, _ = _pivot_events(
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
    return _out(out.sort(keys, nulls_last=True) if keys else out, as_)
