"""The inspector's widgets: dropdowns, next / previous, filters, a clickable timeline, the detail.

The timeline is a grid of small ipywidgets buttons, one per (agent, step) cell, coloured by
action as ``analysis.plots.behaviour_timeline`` colours them: a button is clickable in any
browser and in tests (``button.click()``), where a matplotlib image with a click handler
works only with an interactive backend. A run of a thousand agents would need a million
buttons, so the grid shows a window (``max_agents`` x ``max_steps``) that follows the
selection, with buttons to move it.

All logic is in plain methods (``select``, ``next``, ``previous``, ``set_filters``), so tests
drive the inspector without a browser: set widget values or click, then read ``detail.value``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from html import escape
from typing import Any

from vivarium.errors import VivariumError
from vivarium.inspector.decisions import FILTERS, RunDecisions
from vivarium.inspector.render import decision_html
from vivarium.optional import require

EMPTY_CELL = "#f4f4f4"
CELL_PX = 18
MARKS = {"pivots": "\u21ba", "fallbacks": "F", "failures": "\u00d7"}
"""A cell's glyph, first match wins: pivot, fallback, failed (as the figure marks failures)."""


def _runs_of(source: Any) -> tuple[list[Any], list[str], bool]:
    """The runs to inspect, their labels, and whether ``source`` is a sweep."""
    if hasattr(source, "llm_exchanges") and hasattr(source, "actions"):
        return [source], [str(source.run_id)], False
    if hasattr(source, "runs") and hasattr(source, "index"):
        runs = list(source.runs)
        if not runs:
            raise VivariumError("inspect: this sweep has no complete run to inspect")
        labels = {}
        try:
            params = list(getattr(source, "params", []) or [])
            for row in source.index.to_dict("records"):
                named = ", ".join(f"{p}={row.get(p)}" for p in params)
                labels[str(row["run_id"])] = f"run {row['run']}: {named + ', ' if named else ''}"
                labels[str(row["run_id"])] += f"seed {row.get('seed')}"
        except Exception:  # a label is a nicety: the run id is enough
            labels = {}
        return runs, [labels.get(str(r.run_id), str(r.run_id)) for r in runs], True
    raise VivariumError(f"inspect: expected a Run or a Sweep, not {type(source).__name__}")


def _text_colour(background: str) -> str:
    """Black or white, whichever reads on ``background`` (a #rrggbb colour)."""
    r, g, b = (int(background[i : i + 2], 16) for i in (1, 3, 5))
    return "#000000" if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "#ffffff"


class Inspector:
    """A notebook view of one run's (or a sweep's) decisions, one at a time.

    Attributes:
        run: The run dropdown (shown for a sweep only).
        agent: The agent dropdown.
        step: The step dropdown (the steps the agent decided at).
        previous_button, next_button: Walk the decisions in trace order (run, step, seq),
            keeping only those the filters keep.
        fallbacks, failures, pivots: Filter toggles; with several on, a decision is kept when
            it is any of them (none on: every decision).
        this_agent: Walk only the selected agent's decisions.
        timeline: The clickable agent x step grid (a window of it).
        detail: The selected decision as HTML (``detail.value``).
        question, ask_button, answers: Interview the selected agent at the selected step
            (``ask``): the question, the button, and this decision's interviews so far.
        status: One line: where the selection is, and what the last move found.
        widget: What a notebook shows.
        run_index: The selected run (its position in the sweep's ``runs``; 0 for a run).
        position: The selected decision (its row in ``decisions.actions``), None if none.
    """

    def __init__(self, source: Any, *, max_agents: int = 16, max_steps: int = 30) -> None:
        """Build the inspector on a ``Run`` or a ``Sweep`` and select the first decision.

        Args:
            source: A run (``Run``, ``TraceRun``) or a sweep (anything with ``runs``).
            max_agents: Rows of the timeline window.
            max_steps: Columns of the timeline window.

        Raises:
            VivariumError: ``source`` is neither, or a sweep with no complete run.
        """
        w = require("ipywidgets")
        for name, value in (("max_agents", max_agents), ("max_steps", max_steps)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise VivariumError(f"inspect: {name} must be a whole number >= 1, not {value!r}")
        self._w = w
        self._runs, self._labels, self.is_sweep = _runs_of(source)
        self._loaded: dict[int, RunDecisions] = {}
        self._max_agents, self._max_steps = max_agents, max_steps
        self._quiet_depth = 0
        self.run_index = 0
        self.position: int | None = None
        self._agent0 = self._step0 = 0
        self._steps: list[int] = []
        self.cells: list[list[Any]] = []

        self.run = w.Dropdown(
            options=[(label, i) for i, label in enumerate(self._labels)],
            value=0,
            description="run",
            layout=w.Layout(width="420px", display="" if self.is_sweep else "none"),
        )
        self.agent = w.Dropdown(options=[], description="agent", layout=w.Layout(width="260px"))
        self.step = w.Dropdown(options=[], description="step", layout=w.Layout(width="200px"))
        self.previous_button = w.Button(description="\u25c0 previous", tooltip="previous decision")
        self.next_button = w.Button(description="next \u25b6", tooltip="next decision")
        self.fallbacks = w.ToggleButton(description="fallbacks", tooltip="keep fallbacks")
        self.failures = w.ToggleButton(description="failures", tooltip="keep failed decisions")
        self.pivots = w.ToggleButton(description="pivots", tooltip="keep steps with a pivot")
        self.this_agent = w.ToggleButton(description="this agent only")
        self.status = w.HTML()
        self.legend = w.HTML()
        self.timeline = w.GridBox(layout=w.Layout(grid_gap="1px", overflow="auto"))
        self.earlier = w.Button(description="\u25c0 steps", layout=w.Layout(width="80px"))
        self.later = w.Button(description="steps \u25b6", layout=w.Layout(width="80px"))
        self.up = w.Button(description="\u25b2 agents", layout=w.Layout(width="90px"))
        self.down = w.Button(description="\u25bc agents", layout=w.Layout(width="90px"))
        self.detail = w.HTML()
        self.question = w.Text(
            placeholder="ask this agent about this step (its prompt then, its answer, your question)",
            layout=w.Layout(width="560px"),
        )
        self.ask_button = w.Button(description="ask", tooltip="interview the agent")
        self.answers = w.HTML()

        self.run.observe(self._on_run, names="value")
        self.agent.observe(self._on_agent, names="value")
        self.step.observe(self._on_step, names="value")
        self.previous_button.on_click(lambda _: self.previous())
        self.next_button.on_click(lambda _: self.next())
        for toggle in (self.fallbacks, self.failures, self.pivots, self.this_agent):
            toggle.observe(self._on_filter, names="value")
        self.earlier.on_click(lambda _: self._scroll(0, -1))
        self.later.on_click(lambda _: self._scroll(0, 1))
        self.up.on_click(lambda _: self._scroll(-1, 0))
        self.down.on_click(lambda _: self._scroll(1, 0))
        self.ask_button.on_click(lambda _: self._on_ask())

        pick = w.HBox([self.run, self.agent, self.step])
        walk = w.HBox(
            [self.previous_button, self.next_button, self.fallbacks, self.failures]
            + [self.pivots, self.this_agent]
        )
        moves = w.HBox([self.earlier, self.later, self.up, self.down])
        interview = w.HBox([self.question, self.ask_button])
        self.widget = w.VBox(
            [pick, walk, self.status, self.legend, self.timeline, moves, self.detail]
            + [interview, self.answers]
        )
        self.widget.add_class("vvm-inspector")
        self._show_run(0, None)

    # -- state --------------------------------------------------------------------------------
    @property
    def decisions(self) -> RunDecisions:
        """The selected run's decisions (read on first use)."""
        return self._decisions(self.run_index)

    def _decisions(self, index: int) -> RunDecisions:
        if index not in self._loaded:
            self._loaded[index] = RunDecisions.load(self._runs[index], self._labels[index])
        return self._loaded[index]

    @property
    def current(self) -> dict[str, Any] | None:
        """The selected decision (an ``actions`` row, JSON columns decoded), None if none."""
        return None if self.position is None else self.decisions.row(self.position)

    @property
    def filters(self) -> set[str]:
        """The filter toggles that are on."""
        toggles = {"fallbacks": self.fallbacks, "failures": self.failures, "pivots": self.pivots}
        return {name for name in FILTERS if toggles[name].value}

    def set_filters(self, *names: str, this_agent: bool = False) -> None:
        """Turn on exactly these filters (``FILTERS``), as clicking their toggles would."""
        unknown = set(names) - set(FILTERS)
        if unknown:
            raise VivariumError(
                f"inspect: unknown filter {sorted(unknown)[0]!r}; use {', '.join(FILTERS)}"
            )
        with self._quiet():
            self.fallbacks.value = "fallbacks" in names
            self.failures.value = "failures" in names
            self.pivots.value = "pivots" in names
            self.this_agent.value = this_agent
        self._on_filter(None)

    @contextlib.contextmanager
    def _quiet(self) -> Iterator[None]:
        """Set widget values without their observers selecting again."""
        self._quiet_depth += 1
        try:
            yield
        finally:
            self._quiet_depth -= 1

    def _keep(self, index: int) -> Any:
        agent = self.agent.value if self.this_agent.value else None
        return self._decisions(index).mask(self.filters, agent)

    # -- selecting ----------------------------------------------------------------------------
    def select(self, agent: str, step: int, run: int | str | None = None) -> dict[str, Any]:
        """Show ``agent``'s decision at ``step`` (in ``run``: its index or run id, for a sweep).

        Returns:
            The decision shown.

        Raises:
            VivariumError: no such run, agent, or decision at that step.
        """
        index = self.run_index if run is None else self._run_number(run)
        d = self._decisions(index)
        if str(agent) not in d.agents:
            raise VivariumError(f"inspect: no agent {agent!r} in run {d.run.run_id}")
        pos = d.at(str(agent), int(step))
        if pos is None:
            raise VivariumError(f"inspect: {agent} made no decision at step {step}")
        self._show_run(index, pos)
        return self.current or {}

    def _run_number(self, run: int | str) -> int:
        if isinstance(run, int) and not isinstance(run, bool) and 0 <= run < len(self._runs):
            return run
        for i, r in enumerate(self._runs):
            if str(r.run_id) == str(run):
                return i
        raise VivariumError(f"inspect: no run {run!r} here (runs 0..{len(self._runs) - 1})")

    def next(self) -> bool:
        """Go to the next decision the filters keep (in a sweep, on into the next runs).

        Returns:
            Whether there was one (if not, the selection stays and the status says so).
        """
        return self._walk(1)

    def previous(self) -> bool:
        """Go to the previous decision the filters keep; see ``next``."""
        return self._walk(-1)

    def _walk(self, direction: int) -> bool:
        index, start = self.run_index, self.position
        while 0 <= index < len(self._runs):
            found = self._decisions(index).find(start, direction, self._keep(index))
            if found is not None:
                self._show_run(index, found)
                return True
            index += direction
            start = None
        word = "later" if direction > 0 else "earlier"
        self._refresh_status(f"no {word} decision matches")
        return False

    def _show_run(self, index: int, pos: int | None) -> None:
        """Select decision ``pos`` of run ``index`` (None: the first) and redraw what changed."""
        new_run = index != self.run_index or not self.cells
        self.run_index = index
        d = self.decisions
        if pos is None and len(d):
            pos = 0
        self.position = pos
        with self._quiet():
            self.run.value = index
            agents = d.deciders()
            if new_run or list(self.agent.options) != agents:
                self.agent.options = agents
            if pos is not None:
                agent, step = d.key(pos)
                self.agent.value = agent
                self._steps = d.steps_of(agent)
                self.step.options = [(str(s), s) for s in self._steps]
                self.step.value = step
        if new_run:
            self._build_timeline()
        self._follow()
        self._paint()
        self._refresh_detail()
        self._refresh_status()

    # -- observers ----------------------------------------------------------------------------
    def _on_run(self, change: dict[str, Any]) -> None:
        if self._quiet_depth:
            return
        index = int(change["new"])
        d = self._decisions(index)
        # The same agent and step in the other run, to compare runs; else its first decision.
        pos = (
            d.at(str(self.agent.value), int(self.step.value))
            if self.step.value is not None
            else None
        )
        self._show_run(index, pos)

    def _on_agent(self, change: dict[str, Any]) -> None:
        if self._quiet_depth or change["new"] is None:
            return
        d = self.decisions
        steps = d.steps_of(str(change["new"]))
        if not steps:
            return
        here = int(self.step.value) if self.step.value is not None else steps[0]
        nearest = min(steps, key=lambda s: (abs(s - here), s))
        self._show_run(self.run_index, d.at(str(change["new"]), nearest))

    def _on_step(self, change: dict[str, Any]) -> None:
        if self._quiet_depth or change["new"] is None:
            return
        self._show_run(self.run_index, self.decisions.at(str(self.agent.value), int(change["new"])))

    def _on_filter(self, change: dict[str, Any] | None) -> None:
        """A filter changed: stay if the decision shown is kept, else go to the nearest kept."""
        if self._quiet_depth:
            return
        keep = self._keep(self.run_index)
        stays = self.position is None or keep[self.position]
        if not stays and not self._walk(1) and not self._walk(-1):
            self._refresh_status("no decision matches the filters")
            self._paint()
            return
        self._paint()
        self._refresh_status()

    # -- the timeline -------------------------------------------------------------------------
    def _build_timeline(self) -> None:
        """Make the window's buttons for the selected run (its size depends on the run)."""
        w, d = self._w, self.decisions
        steps = d.actions["step"]
        self._first_step = int(steps.min()) if len(d) else 0
        self._last_step = int(steps.max()) if len(d) else -1
        n_rows = min(self._max_agents, len(d.agents))
        n_cols = min(self._max_steps, self._last_step - self._first_step + 1)
        self._agent0, self._step0 = 0, self._first_step
        self.cells = []

        def label() -> Any:
            return w.HTML(value="", layout=w.Layout(height=f"{CELL_PX}px", margin="0"))

        children: list[Any] = [label()]
        self._step_labels = [label() for _ in range(n_cols)]
        children += self._step_labels
        self._agent_labels = []
        for r in range(n_rows):
            name = label()
            self._agent_labels.append(name)
            children.append(name)
            row = []
            for c in range(n_cols):
                cell = w.Button(
                    description="",
                    layout=w.Layout(
                        width=f"{CELL_PX}px", height=f"{CELL_PX}px", padding="0", margin="0"
                    ),
                )
                cell.add_class("vvm-cell")
                cell.on_click(lambda _, r=r, c=c: self._on_cell(r, c))
                row.append(cell)
                children.append(cell)
            self.cells.append(row)
        self.timeline.layout.grid_template_columns = f"110px repeat({n_cols}, {CELL_PX}px)"
        self.timeline.layout.grid_auto_rows = f"{CELL_PX}px"
        self.timeline.children = tuple(children)
        palette = "".join(
            f"<span style='display:inline-block;width:10px;height:10px;background:{c};"
            f"margin:0 3px 0 8px'></span>{escape(a)}"
            for a, c in d.colours.items()
        )
        marks = f"{MARKS['pivots']} pivot · {MARKS['fallbacks']} fallback · "
        marks += f"{MARKS['failures']} failed"
        self.legend.value = f"<div style='font-size:11px'>{palette} &nbsp; {escape(marks)}</div>"
        for button in (self.earlier, self.later):
            button.layout.display = (
                "" if n_cols < self._last_step - self._first_step + 1 else "none"
            )
        for button in (self.up, self.down):
            button.layout.display = "" if n_rows < len(d.agents) else "none"

    def _follow(self) -> None:
        """Move the window so that the selected cell is in it."""
        if self.position is None or not self.cells:
            return
        d = self.decisions
        agent, step = d.key(self.position)
        n_rows, n_cols = len(self.cells), len(self.cells[0])
        r = d.agents.index(agent)
        if not self._agent0 <= r < self._agent0 + n_rows:
            self._agent0 = max(0, min(r - n_rows // 2, len(d.agents) - n_rows))
        if not self._step0 <= step < self._step0 + n_cols:
            last0 = self._last_step - n_cols + 1
            self._step0 = max(self._first_step, min(step - n_cols // 2, last0))

    def _scroll(self, rows: int, cols: int) -> None:
        """Move the window by half its size, without changing the selection."""
        if not self.cells:
            return
        d = self.decisions
        n_rows, n_cols = len(self.cells), len(self.cells[0])
        self._agent0 = max(
            0, min(self._agent0 + rows * max(1, n_rows // 2), len(d.agents) - n_rows)
        )
        last0 = self._last_step - n_cols + 1
        self._step0 = max(self._first_step, min(self._step0 + cols * max(1, n_cols // 2), last0))
        self._paint()

    def cell(self, agent: str, step: int) -> Any:
        """The timeline button of (agent, step), None when it is outside the window."""
        if not self.cells:
            return None
        agents = self.decisions.agents
        if agent not in agents:
            return None
        r, c = agents.index(agent) - self._agent0, int(step) - self._step0
        if 0 <= r < len(self.cells) and 0 <= c < len(self.cells[0]):
            return self.cells[r][c]
        return None

    def _on_cell(self, r: int, c: int) -> None:
        d = self.decisions
        agent, step = d.agents[self._agent0 + r], self._step0 + c
        pos = d.at(agent, step)
        if pos is None:
            self._refresh_status(f"{agent} made no decision at step {step}")
            return
        self._show_run(self.run_index, pos)

    def _paint(self) -> None:
        """Colour the window's cells (unchanged values are not sent again)."""
        if not self.cells:
            return
        d = self.decisions
        keep = self._keep(self.run_index) if self.filters or self.this_agent.value else None
        selected = d.key(self.position) if self.position is not None else None
        for c, label in enumerate(self._step_labels):
            step = self._step0 + c
            text = str(step) if step % 5 == 0 or c == 0 else ""
            label.value = f"<span style='font-size:9px'>{text}</span>"
        for r, row in enumerate(self.cells):
            agent = d.agents[self._agent0 + r]
            self._agent_labels[
                r
            ].value = f"<span style='font-size:10px;white-space:nowrap'>{escape(agent)}</span>"
            for c, cell in enumerate(row):
                step = self._step0 + c
                pos = d.shown_at(agent, step)
                if pos is None:
                    colour, mark, tip = EMPTY_CELL, "", f"{agent} \u00b7 step {step}: no decision"
                else:
                    action = str(d.actions.at[pos, "action"])
                    colour = d.colours.get(action, EMPTY_CELL)
                    flags = [n for n in ("pivots", "fallbacks", "failures") if d.masks[n][pos]]
                    mark = MARKS[flags[0]] if flags else ""
                    tip = f"{agent} \u00b7 step {step}: {action}"
                    if flags:
                        tip += " (" + ", ".join(f[:-1] for f in flags) + ")"
                    if keep is not None and not keep[pos]:
                        colour = EMPTY_CELL  # left out by the filters: greyed
                cell.style.button_color = colour
                cell.style.text_color = _text_colour(colour)
                cell.description = mark
                cell.tooltip = tip
                cell.layout.border = (
                    "2px solid #000" if selected == (agent, step) else "1px solid transparent"
                )

    # -- interviews ---------------------------------------------------------------------------
    def ask(self, question: str | None = None) -> Any:
        """Interview the selected agent at the selected step (``Run.interview``).

        Args:
            question: What to ask (None: the text in ``question``).

        Returns:
            The ``Interview``; ``answers`` then shows it with the earlier ones.

        Raises:
            VivariumError: Nothing is selected, or the agent cannot be asked (see
                ``vivarium.experiment.interview``).
        """
        from vivarium.experiment.interview import interview

        if self.position is None:
            raise VivariumError("inspect: no decision is selected to ask about")
        agent, step = self.decisions.key(self.position)
        asked = interview(
            self.decisions.run, agent, step, self.question.value if question is None else question
        )
        self.question.value = ""
        self._refresh_answers()
        return asked

    def _on_ask(self) -> None:
        try:
            self.ask()
        except VivariumError as exc:
            self._refresh_status(str(exc))

    def _refresh_answers(self) -> None:
        from vivarium.experiment.interview import interviews

        if self.position is None:
            self.answers.value = ""
            return
        d = self.decisions
        agent, step = d.key(self.position)
        log = interviews(d.run.path, d.run.run_id)
        here = log[(log["agent_id"] == agent) & (log["step"] == step)]
        self.answers.value = "".join(
            "<div style='margin:4px 0'><b>Q:</b> "
            + escape(str(row["question"]))
            + "<br><b>A:</b> "
            + escape(str(row["answer"]) if row["answer"] is not None else "(no text)")
            + f" <span style='color:#888;font-size:11px'>({escape(str(row['model']))})</span></div>"
            for row in here.to_dict("records")
        )

    # -- the text -----------------------------------------------------------------------------
    def _refresh_detail(self) -> None:
        d = self.decisions
        self._refresh_answers()
        if self.position is None:
            self.detail.value = "<i>no decisions in this run</i>"
            return
        row = d.row(self.position)
        agent, step = d.key(self.position)
        self.detail.value = decision_html(
            row,
            d.calls(agent, step),
            d.transitions(agent, step),
            pivot=d.pivots.get((agent, step)),
            run_label=d.label if self.is_sweep else None,
            stops=d.stops.get(step),
        )

    def _refresh_status(self, note: str | None = None) -> None:
        d = self.decisions
        kept = int(self._keep(self.run_index).sum())
        where = f"decision {self.position + 1} of {len(d)}" if self.position is not None else "none"
        counts = ", ".join(f"{int(d.masks[n].sum())} {n}" for n in FILTERS)
        text = f"{where} · {kept} kept by the filters · {counts}"
        if d.history:  # interruptions: history of the run, not a problem
            text += f" · {escape(d.history)}"
        if note:
            text += f" · <b>{escape(note)}</b>"
        self.status.value = f"<span style='font-size:12px'>{text}</span>"

    # -- display ------------------------------------------------------------------------------
    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
