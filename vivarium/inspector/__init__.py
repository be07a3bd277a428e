"""The decision inspector: ``run.inspect()`` / ``sweep.inspect()`` in a notebook.

Pick an agent and a step (or click a cell of the behaviour timeline) and see what the agent
was sent, what the model answered, how the reply was parsed, the action and its outcome, the
state transition, and the tokens, latency and cost of every call attempt. Next / previous walk
the decisions in order; toggles keep only fallbacks, failures or pivots.

The parts, one concept each: ``decisions`` (a run's decisions, their order and filters, read
from the trace), ``render`` (one decision as escaped HTML) and ``widget`` (the ipywidgets).
"""

from __future__ import annotations

from vivarium.inspector.widget import Inspector

__all__ = ["Inspector"]
