"""The effect of a treatment across a sweep's arms: paired and independent differences.

A sweep over one parameter (the treatment: a prompt, a policy, a temperature) with several
replications gives, per replication, one run of each arm. The effect of an arm against the
control arm is the mean difference of a measure (a reporter at the end, a success rate, per
step), with a Student's t interval:

- ``paired_difference``: the differences are taken within each replication (run of the arm
  minus run of the control with the same ``replication``), then averaged; the interval is
  ``mean +- t(1 - (1-level)/2, n-1) * sd / sqrt(n)`` over the ``n`` pairs. It is the design of
  ``sweep(..., paired=True)``, where the arms of a replication share every random stream the
  treatment leaves alone (common random numbers): what the shared randomness does to both arms
  cancels in the difference, so the interval is narrower whenever the two arms respond to it
  alike, at no cost in calls.
- ``independent_difference``: the arms as independent samples (Welch's interval, unequal
  variances): the right interval for an unpaired sweep, and the baseline a paired one is
  compared with.

When pairing is valid: the pairs must be independent of each other (each replication its own
seed, as a sweep gives them) and the two runs of a pair must differ only by the treatment.
Pairing never biases the mean difference; it only narrows the interval, and only as far as the
arms' outcomes are correlated. In an unpaired sweep, the runs of a replication share nothing,
and ``paired_difference`` gives an interval no narrower than the independent one on average.

Both take a pandas or polars frame with one row per run (and per ``per`` value, e.g. each
``step`` of ``model_vars``) and return the same kind, one row per arm other than the control
(and per ``per`` value): the arm's value, ``n``, ``mean_diff``, ``std``, ``ci_low``,
``ci_high``; ``paired_difference`` also ``correlation`` (of the arms' values over the pairs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from vivarium.analysis.loading import Frame, _to_polars, by_list, to_output
from vivarium.analysis.statistics import t_quantile

__all__ = ["independent_difference", "paired_difference"]


def paired_difference(
    data: Any,
    value: str,
    arm: str,
    control: Any,
    *,
    pair: str = "replication",
    per: str | Sequence[str] | None = None,
    level: float = 0.95,
) -> Frame:
    """The mean within-pair difference of ``value``, each arm against ``control``.

    Args:
        data: A pandas or polars frame: one row per run (and ``per`` value), with the ``pair``,
            ``arm`` and ``value`` columns (a sweep's merged ``model_vars`` or ``summary``).
        value: The measure.
        arm: The column that names each run's arm (a sweep parameter).
        control: The control arm's value in ``arm``.
        pair: The column that pairs runs across arms (a sweep's ``replication``).
        per: Columns to compare within (``"step"``: one difference per step).
        level: The interval's confidence level.

    Returns:
        One row per other arm (and ``per`` value), as the kind of frame given.

    Raises:
        ValueError: A column is missing, ``level`` is not in (0, 1), the control is not an
            arm, or some pair has more than one row of an arm (aggregate first, or name ``per``).
    """
    import polars as pl

    df, keys, kind = _prepared(data, value, arm, pair, per, level, control)
    control_rows = df.filter(pl.col(arm) == control).select(*keys, pair, pl.col(value).alias("_c"))
    treated = df.filter(pl.col(arm) != control)
    joined = treated.join(control_rows, on=[*keys, pair], how="inner").with_columns(
        (pl.col(value) - pl.col("_c")).alias("_d")
    )
    out = (
        joined.group_by([*keys, arm], maintain_order=True)
        .agg(
            pl.len().cast(pl.Int64).alias("n"),
            pl.col("_d").mean().alias("mean_diff"),
            pl.col("_d").std(ddof=1).alias("std"),
            pl.corr(value, "_c").alias("correlation"),
        )
        .sort([*keys, arm])
    )
    half = [
        _half(level, n - 1, s / math.sqrt(n)) if n >= 2 and s is not None else None
        for n, s in zip(out["n"].to_list(), out["std"].to_list(), strict=True)
    ]
    out = _with_interval(out, half)
    columns = (*keys, arm, "n", "mean_diff", "std", "ci_low", "ci_high", "correlation")
    return to_output(out.select(*columns), kind)


def independent_difference(
    data: Any,
    value: str,
    arm: str,
    control: Any,
    *,
    per: str | Sequence[str] | None = None,
    level: float = 0.95,
) -> Frame:
    """The difference of the means of ``value``, each arm against ``control``, unpaired.

    Welch's interval: ``mean_a - mean_c +- t(1 - (1-level)/2, df) * se`` with ``se**2 =
    var_a/n_a + var_c/n_c`` and Welch-Satterthwaite's ``df``. ``n`` is the arm's runs, ``std``
    the standard error of the difference.

    Args:
        data: A pandas or polars frame: one row per run (and ``per`` value).
        value: The measure.
        arm: The column that names each run's arm.
        control: The control arm's value in ``arm``.
        per: Columns to compare within.
        level: The interval's confidence level.

    Returns:
        One row per other arm (and ``per`` value), as the kind of frame given.

    Raises:
        ValueError: A column is missing, ``level`` is not in (0, 1), or the control is not an arm.
    """
    import polars as pl

    df, keys, kind = _prepared(data, value, arm, None, per, level, control)
    stats = df.group_by([*keys, arm]).agg(
        pl.len().cast(pl.Int64).alias("n"),
        pl.col(value).mean().alias("_m"),
        pl.col(value).var(ddof=1).alias("_v"),
    )
    control_stats = stats.filter(pl.col(arm) == control).select(
        *keys, pl.col("n").alias("_nc"), pl.col("_m").alias("_mc"), pl.col("_v").alias("_vc")
    )
    joined = stats.filter(pl.col(arm) != control)
    joined = (
        joined.join(control_stats, on=keys, how="inner")
        if keys
        else joined.join(control_stats, how="cross")
    ).sort([*keys, arm])
    se, half = [], []
    for n, v, nc, vc in zip(
        joined["n"].to_list(),
        joined["_v"].to_list(),
        joined["_nc"].to_list(),
        joined["_vc"].to_list(),
        strict=True,
    ):
        if n < 2 or nc < 2 or v is None or vc is None:
            se.append(None)
            half.append(None)
            continue
        a, c = v / n, vc / nc
        error = math.sqrt(a + c)
        df_w = (
            (a + c) ** 2 / (a * a / (n - 1) + c * c / (nc - 1)) if a + c > 0 else float(n + nc - 2)
        )
        se.append(error)
        half.append(_half(level, df_w, error))
    out = joined.with_columns(
        (pl.col("_m") - pl.col("_mc")).alias("mean_diff"),
        pl.Series("std", se, dtype=pl.Float64),
    )
    out = _with_interval(out, half)
    return to_output(out.select(*keys, arm, "n", "mean_diff", "std", "ci_low", "ci_high"), kind)


# -- shared --------------------------------------------------------------------------------------
def _prepared(
    data: Any,
    value: str,
    arm: str,
    pair: str | None,
    per: str | Sequence[str] | None,
    level: float,
    control: Any,
) -> tuple[Any, list[str], str]:
    """The frame as polars, the ``per`` columns, and the kind it came as; checked."""
    import polars as pl

    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), not {level}")
    kind = "polars" if isinstance(data, pl.DataFrame | pl.LazyFrame) else "pandas"
    df = _to_polars(data)
    keys = by_list(per)
    wanted = [*keys, arm, value, *([pair] if pair else [])]
    missing = [c for c in wanted if c not in df.columns]
    if missing:
        raise ValueError(
            f"no column {', '.join(map(repr, missing))} (the frame has {', '.join(df.columns)})"
        )
    if df.filter(pl.col(arm) == control).height == 0:
        arms = sorted(map(str, df[arm].unique().to_list()))
        raise ValueError(f"the control {control!r} is not an arm of {arm!r} ({', '.join(arms)})")
    if pair is not None:
        twice = df.group_by([*keys, arm, pair]).len().filter(pl.col("len") > 1)
        if twice.height:
            row = twice.row(0, named=True)
            where = ", ".join(f"{k}={row[k]!r}" for k in [*keys, arm, pair])
            raise ValueError(
                f"several rows for {where}: one row per run is compared (aggregate first, or "
                "name the column that tells them apart in per=, e.g. per='step')"
            )
    return df.with_columns(pl.col(value).cast(pl.Float64)), keys, kind


def _half(level: float, df: float, error: float) -> float:
    return t_quantile(1.0 - (1.0 - level) / 2.0, df) * error


def _with_interval(out: Any, half: list[float | None]) -> Any:
    import polars as pl

    h = pl.Series("_h", half, dtype=pl.Float64)
    return out.with_columns(h).with_columns(
        (pl.col("mean_diff") - pl.col("_h")).alias("ci_low"),
        (pl.col("mean_diff") + pl.col("_h")).alias("ci_high"),
    )
