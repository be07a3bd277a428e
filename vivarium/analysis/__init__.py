"""Analysis of run traces: metrics (polars, returned as pandas or polars) and paper figures.

``import vivarium.analysis`` stays light: the metrics (and polars) load on first use, and the
figures (``vivarium.analysis.plots``) import matplotlib only inside their functions.

Metrics take a ``Run``, a trace path, a dict of frames (``run.to_polars()``), one frame of the
right table, or a list of these (``loading``), and work on a sweep's merged frames (grouped by
``run_id`` and the columns named in ``by=``, see ``grouping``):

- ``action_counts`` - decisions per action, per step / agent / agent and step / run
- ``success_rate`` - per step / agent / run, optionally over a rolling window of steps
- ``success_ci`` - across runs (seeds) with a 95% t interval (or Wilson)
- ``pivot_events``, ``pivots`` - back-transitions in workflow state and should_pivot flags
- ``message_volume`` - messages and characters per step / author / run
- ``llm_usage`` - LLM calls, tokens, cost, latency, cache hits per step / agent / run
- ``summary`` - one row per run
- ``paired_difference``, ``independent_difference`` - a treatment's effect across a sweep's
  arms, within replications (a ``paired=True`` sweep) or between independent runs (``paired``)
- ``t_quantile``, ``wilson_interval`` - the intervals behind them (``statistics``)

``metrics`` holds the metrics, ``pivoting`` the pivot ones, ``plots`` the figures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vivarium.lazy import lazy_names

if TYPE_CHECKING:
    from vivarium.analysis.metrics import (
        action_counts,
        llm_usage,
        message_volume,
        success_ci,
        success_rate,
        summary,
    )
    from vivarium.analysis.paired import independent_difference, paired_difference
    from vivarium.analysis.pivoting import pivot_events, pivots
    from vivarium.analysis.statistics import t_quantile, wilson_interval

# Each public name and the module that defines it (imported on first use).
_LAZY = {
    "action_counts": "metrics",
    "llm_usage": "metrics",
    "message_volume": "metrics",
    "independent_difference": "paired",
    "paired_difference": "paired",
    "pivot_events": "pivoting",
    "pivots": "pivoting",
    "success_ci": "metrics",
    "success_rate": "metrics",
    "summary": "metrics",
    "t_quantile": "statistics",
    "wilson_interval": "statistics",
}
_MODULES = (
    "grouping",
    "loading",
    "metrics",
    "paired",
    "pivoting",
    "plots",
    "statistics",
    "style",
)

__all__ = [
    "action_counts",
    "independent_difference",
    "llm_usage",
    "message_volume",
    "paired_difference",
    "pivot_events",
    "pivots",
    "plots",
    "style",
    "success_ci",
    "success_rate",
    "summary",
    "t_quantile",
    "wilson_interval",
]


__getattr__, __dir__ = lazy_names(
    __name__, {name: f"{__name__}.{module}" for name, module in _LAZY.items()}, __all__, _MODULES
)
