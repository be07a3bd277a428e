"""One run's decisions as the inspector walks them: their order, the filters and what goes with each.

A decision is a row of the ``actions`` frame; its order is the order the trace holds (step,
then seq). What belongs to a decision is read from the same trace by (agent, step): the LLM
call attempts with their text (``run.llm_exchanges``), the state transitions, and whether the
agent pivoted at that step. Pivots come from ``vivarium.analysis.pivoting.pivot_events`` with
its defaults, so the inspector marks exactly the pivots that ``summary`` and ``pivots`` count.

Everything here is plain data and numpy masks, so tests (and the widget) use it without a
browser; the frames are read once per run, the texts only for the decision shown.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from vivarium.analysis.pivoting import pivot_events
from vivarium.analysis.style import category_colors

if TYPE_CHECKING:
    import pandas as pd

    from vivarium.trace.run import TraceRun

FILTERS = ("fallbacks", "failures", "pivots")
"""The filter toggles: decisions that fell back, that did not succeed, where the agent pivoted."""

JSON_COLUMNS = ("arguments", "metadata", "result")


def plain(value: Any) -> Any:
    """A frame cell as a plain Python value: NaN and NA become None, numpy scalars Python's."""
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        return value.item()
    try:
        import pandas as pd

        if value is pd.NA or value is pd.NaT:
            return None
    except ImportError:  # pragma: no cover - pandas is a dependency
        pass
    return value


def decode(value: Any) -> Any:
    """A JSON column's cell decoded (objects in the trace are JSON text); other values as they are."""
    value = plain(value)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def pivot_label(event: dict[str, Any]) -> str:
    """How a pivot event reads: the move back, or the flag the decision raised."""
    if event.get("source") == "transition":
        return f"back from {event.get('from_state')} to {event.get('to_state')}"
    state = event.get("from_state")
    return "should_pivot flag" + (f" in state {state}" if state else "")


@dataclass
class RunDecisions:
    """A run's decisions in trace order, with the lookups and masks the inspector needs.

    Attributes:
        run: The run read.
        label: How the run is named in the run dropdown.
        actions: The ``actions`` frame sorted by step and seq, index 0..n-1 (the positions).
        agents: The agents in the run's order (rows of the timeline).
        colours: A colour per action, as the behaviour timeline figure colours them.
        pivots: (agent, step) -> how the agent pivoted there.
        masks: A boolean array over the positions per filter (``FILTERS``).
        stops: step -> the run's interruptions at that step (it stopped before committing
            it, and a resume redid it: ``vivarium.trace.interruptions``).
        history: The interruptions in one line (``resumed after 2 interruptions ...``), or None.
    """

    run: TraceRun
    label: str
    actions: pd.DataFrame
    agents: list[str]
    colours: dict[str, str]
    pivots: dict[tuple[str, int], str]
    masks: dict[str, np.ndarray]
    stops: dict[int, list[Any]] = field(default_factory=dict)
    history: str | None = None
    _first: dict[tuple[str, int], int] = field(default_factory=dict)
    _last: dict[tuple[str, int], int] = field(default_factory=dict)
    _transitions: dict[tuple[str, int], list[dict[str, Any]]] | None = None

    @classmethod
    def load(cls, run: TraceRun, label: str) -> RunDecisions:
        """Read a run's decisions, pivots and agents (the texts wait until a decision is shown)."""
        actions = run.actions.sort_values(["step", "seq"], kind="stable").reset_index(drop=True)
        agent_ids = actions["agent_id"].astype(str).tolist()
        steps = actions["step"].astype(int).tolist()
        first: dict[tuple[str, int], int] = {}
        last: dict[tuple[str, int], int] = {}
        for pos, key in enumerate(zip(agent_ids, steps, strict=True)):
            first.setdefault(key, pos)
            last[key] = pos
        listed = run.agents["agent_id"].astype(str).tolist() if len(run.agents) else []
        agents = listed + sorted(set(agent_ids) - set(listed))
        names = sorted({str(a) for a in actions["action"].dropna().tolist()})
        events = pivot_events(run)
        pivots = {
            (str(e["agent_id"]), int(e["step"])): pivot_label(e) for e in events.to_dict("records")
        }
        fallback = actions["fallback"].fillna(False).astype(bool).to_numpy()
        success = actions["success"].fillna(False).astype(bool).to_numpy()
        masks = {
            "fallbacks": fallback,
            "failures": ~success,
            "pivots": np.array([k in pivots for k in zip(agent_ids, steps, strict=True)], bool),
        }
        actions["agent_id"] = agent_ids
        from vivarium.trace.interruptions import describe, read_interruptions

        stops: dict[int, list[Any]] = {}
        interruptions = read_interruptions(run.path)
        for stop in interruptions:
            stops.setdefault(stop.step, []).append(stop)
        return cls(
            stops=stops,
            history=describe(interruptions, str(run.metadata.get("status"))),
            run=run,
            label=label,
            actions=actions,
            agents=agents,
            colours=category_colors(names),
            pivots=pivots,
            masks=masks,
            _first=first,
            _last=last,
        )

    def __len__(self) -> int:
        """The number of decisions."""
        return len(self.actions)

    # -- lookups ------------------------------------------------------------------------------
    def deciders(self) -> list[str]:
        """The agents that made at least one decision, in the run's order."""
        deciding = {agent for agent, _ in self._first}
        return [a for a in self.agents if a in deciding]

    def steps_of(self, agent: str) -> list[int]:
        """The steps at which ``agent`` decided, in order."""
        a = self.actions
        return sorted({int(s) for s in a.loc[a["agent_id"] == agent, "step"].tolist()})

    def at(self, agent: str, step: int) -> int | None:
        """The position of ``agent``'s first decision at ``step`` (None: it made none)."""
        return self._first.get((agent, int(step)))

    def shown_at(self, agent: str, step: int) -> int | None:
        """The decision a timeline cell shows: the last at that step, as the figure draws it."""
        return self._last.get((agent, int(step)))

    def key(self, pos: int) -> tuple[str, int]:
        """(agent, step) of the decision at ``pos``."""
        row = self.actions.iloc[pos]
        return str(row["agent_id"]), int(row["step"])

    def row(self, pos: int) -> dict[str, Any]:
        """The decision at ``pos`` as plain values, its JSON columns decoded."""
        row = {k: plain(v) for k, v in self.actions.iloc[pos].to_dict().items()}
        for name in JSON_COLUMNS:
            if name in row:
                row[name] = decode(row[name])
        return row

    # -- filters and order --------------------------------------------------------------------
    def mask(self, filters: set[str], agent: str | None = None) -> np.ndarray:
        """The decisions the filters keep: any of the checked kinds (all when none is checked).

        Args:
            filters: Names from ``FILTERS``; a decision is kept when it is any of them.
            agent: Keep only this agent's decisions too.
        """
        unknown = set(filters) - set(FILTERS)
        if unknown:
            raise ValueError(f"unknown filter {sorted(unknown)[0]!r}: use {', '.join(FILTERS)}")
        keep = np.zeros(len(self), bool) if filters else np.ones(len(self), bool)
        for name in filters:
            keep |= self.masks[name]
        if agent is not None:
            keep &= (self.actions["agent_id"] == agent).to_numpy()
        return keep

    def find(self, start: int | None, direction: int, keep: np.ndarray) -> int | None:
        """The next (``direction`` 1) or previous (-1) kept position after ``start``.

        ``start`` None starts from the edge: the first kept position going forward, the last
        going back.
        """
        kept = np.flatnonzero(keep)
        if not len(kept):
            return None
        if start is None:
            return int(kept[0] if direction > 0 else kept[-1])
        if direction > 0:
            i = int(np.searchsorted(kept, start, side="right"))
            return int(kept[i]) if i < len(kept) else None
        i = int(np.searchsorted(kept, start, side="left")) - 1
        return int(kept[i]) if i >= 0 else None

    # -- what goes with a decision ------------------------------------------------------------
    def calls(self, agent: str, step: int) -> list[dict[str, Any]]:
        """The LLM call attempts of ``agent`` at ``step``, in order, each with its text.

        Every key of the ``llm_exchanges`` frame as plain values, plus ``call_id``.
        """
        frame = self.run.llm_exchanges(agent_id=agent, step=step)
        out = []
        for call_id, row in zip(frame.index.tolist(), frame.to_dict("records"), strict=True):
            item = {k: plain(v) if k not in ("request", "reply") else v for k, v in row.items()}
            item["call_id"] = int(call_id)
            out.append(item)
        return out

    def transitions(self, agent: str, step: int) -> list[dict[str, Any]]:
        """The state transitions of ``agent`` at ``step``, in trace order."""
        if self._transitions is None:
            grouped: dict[tuple[str, int], list[dict[str, Any]]] = {}
            for row in self.run.transitions.to_dict("records"):
                clean = {k: plain(v) for k, v in row.items()}
                grouped.setdefault((str(clean["agent_id"]), int(clean["step"])), []).append(clean)
            self._transitions = grouped
        return self._transitions.get((agent, int(step)), [])
