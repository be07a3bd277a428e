"""The notebook control panel: ``Experiment(...).controls()``.

A form for the experiment (world, policy, agents, steps, seed, scheduling and, for LLM
policies, model / mock / api_base / API key / cache mode), a Run button, a progress bar the
engine drives, a figure that updates as steps complete, and a summary table at the end. The
logic lives in plain methods (``run()``, ``config()``), so tests drive the panel without a
browser: set widget values, ``click``, read the outputs.

The panel offers only what can run and never changes what the user typed:

- ``workflow`` agents come from agent folders, so the policy list never offers it; a config
  with agent folders (``data/experiments/ecology.yaml``) keeps them, listed above the form,
  with the world they were written for, and ``agents`` sets how many other agents join them;
- random agents in the ecology draw the ecology's actions (``build.random_action_space``);
- a bad value (negative steps, zero agents) is refused with one line, not clamped; 0 steps is
  a valid, empty run;
- a world with a grid (``world.grid`` or ``world.positions()``, see ``vivarium.worlds.grid``)
  is drawn while the run steps (``analysis.world_view``, every ``world_every`` steps),
  coloured by the agent reporter picked in ``color by``;
- a result whose settings were edited since is marked ``settings changed since this
  result``; a run that is not a clean result (``Run.health``) is shown in red;
- every Run keeps its own trace (``Experiment.run``'s default path never replaces another
  run) and the status line says where it went;
- the API key field is a password field whose value is taken out of the widget at once (so
  the notebook's saved widget state never holds it) and is never shown or recorded.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from vivarium.errors import OverrideWarning, VivariumError
from vivarium.experiment.config import ExperimentConfig, make_config
from vivarium.experiment.overrides import llm_switch, merge_overrides
from vivarium.experiment.runner import run_experiment
from vivarium.optional import require
from vivarium.settings import DEFAULT_MODEL, DEFAULT_RUNS_DIR
from vivarium.trace.run import TraceRun

LLM_POLICIES = {"cognitive", "workflow"}
# Policies whose agents need an agent folder: offered only through a config's agent groups.
FOLDER_POLICIES = {"workflow"}
STALE_NOTE = "settings changed since this result"


def _figure_output(fig: Any) -> dict[str, Any]:
    """A matplotlib figure as a display_data output (works with or without a kernel)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return {
        "output_type": "display_data",
        "data": {
            "image/png": base64.b64encode(buffer.getvalue()).decode(),
            "text/plain": f"<Figure {fig.get_figwidth():.1f}x{fig.get_figheight():.1f} in>",
        },
        "metadata": {},
    }


class ConfigSource(Protocol):
    """What the panel needs of an experiment: the config its form starts from."""

    @property
    def config(self) -> ExperimentConfig:
        """The experiment's config."""
        ...


class ControlPanel:
    """An ipywidgets panel around an experiment config. ``panel.widget`` is what a notebook shows.

    Attributes:
        base_config: The config the form starts from; the form's values replace its fields.
        folder: Where the panel's runs write their traces (``<folder>/<name>.sqlite``, or the
            run's own file when that one holds another run).
        run_result: The last run made (None before the first).
        runs: Every run made from this panel, in order (each its own file).
        widget: What a notebook shows.
    """

    def __init__(
        self,
        experiment: ConfigSource | ExperimentConfig | None = None,
        *,
        folder: str | Path = DEFAULT_RUNS_DIR,
        open_run: Callable[[Path], TraceRun] = TraceRun.open,
        world_every: int | None = None,
    ) -> None:
        """Build the form from an experiment's config.

        Args:
            experiment: An ``Experiment`` (anything with a ``config``), a config, or None for
                the default config.
            folder: Where the panel's runs go.
            open_run: Reads each finished trace into the run the panel returns
                (``Experiment.controls`` passes ``Run.open``, so its runs are ``Run``s).
            world_every: Redraw the world view every this many steps (and after the last);
                None: as often as the live figure (a tenth of the steps). Only for worlds
                with a grid.
        """
        w = require("ipywidgets")

        from vivarium.experiment.build import known_names

        if experiment is None:
            experiment = make_config(ExperimentConfig, {})
        # An Experiment's own reporters (callables, outside its config) go with the panel's runs.
        self._reporters: Any = getattr(experiment, "_reporters", None)
        if not isinstance(experiment, ExperimentConfig):
            experiment = experiment.config
        self.base_config: ExperimentConfig = experiment
        self.folder = Path(folder)
        self._open_run = open_run
        self.run_result: TraceRun | None = None
        self.runs: list[TraceRun] = []
        self.last_figure: Any = None
        self.last_world_figure: Any = None
        self.world_steps: list[int] = []  # the steps the world view was drawn after, last run
        if world_every is not None and (
            not isinstance(world_every, int) or isinstance(world_every, bool) or world_every < 1
        ):
            from vivarium.errors import ConfigError

            raise ConfigError(
                f"panel: world_every must be a whole number >= 1, not {world_every!r}"
            )
        self.world_every = world_every
        self._summary_html = ""
        self._running = False
        c = self.base_config
        llm = c.llm_in_force  # no llm section: the mock's settings, as a run reads it
        groups = c.agents if isinstance(c.agents, list) else []
        self._folder_groups = [g for g in groups if g.agent]
        self._other_groups = [g for g in groups if not g.agent]
        # The agent key stays out of every widget; None: the config's, or the environment's.
        self._api_key: Any = llm.api_key
        style = {"description_width": "90px"}
        # Groups with agent folders or their own action spaces were written for one world.
        fixed_world = any(g.agent or g.action_space for g in groups)
        worlds = known_names("world")
        if c.world not in worlds:  # a world given as an object, shown by its class's name
            worlds.append(c.world)
        self.world = w.Dropdown(
            options=_choices(worlds),
            value=c.world,
            description="world",
            style=style,
            disabled=fixed_world,
            tooltip="the agent groups of this experiment are made for this world"
            if fixed_world
            else "",
        )
        policy = self._other_groups[-1].policy if self._other_groups else c.policy
        offered = [n for n in known_names("policy") if n not in FOLDER_POLICIES]
        if policy not in offered:  # shown as configured, so that running it says what is wrong
            offered.append(policy)
        self.policy = w.Dropdown(
            options=_choices(offered),
            value=policy,
            description="policy",
            style=style,
            disabled=bool(groups) and not self._other_groups,
        )
        # Plain int fields: a bad value is refused in one line when Run is clicked, never
        # silently clamped to a bound.
        self.agents = w.IntText(value=c.agent_count, description="agents", style=style)
        self.steps = w.IntText(value=c.steps, description="steps", style=style)
        self.seed = w.IntText(value=c.seed, description="seed", style=style)
        self.groups = w.HTML(value=self._describe_groups())
        self.groups.layout.display = "" if self._folder_groups else "none"
        self.scheduling = w.Dropdown(
            options=["sequential", "simultaneous"],
            value=c.scheduling,
            description="scheduling",
            style=style,
        )
        self.model = w.Text(value=llm.model, description="model", style=style)
        self.mock = w.Checkbox(value=llm.uses_mock, description="mock LLM")
        self.api_base = w.Text(
            value=", ".join(llm.api_bases),  # several servers: a comma list (server_urls reads it)
            placeholder="e.g. http://127.0.0.1:8080/v1",
            description="api_base",
            style=style,
        )
        self.api_key = w.Password(
            value="",
            placeholder=self._key_placeholder(),
            description="API key",
            style=style,
            continuous_update=False,  # the whole key at once, then taken out of the widget
        )
        self.cache_mode = w.Dropdown(
            options=["off", "record", "replay", "auto"],
            value=(llm.cache_mode if llm.cache else "off"),
            description="cache",
            style=style,
        )
        self.run_button = w.Button(description="Run", button_style="primary", icon="play")
        self.progress = w.IntProgress(value=0, min=0, max=c.steps, description="0 steps")
        self.status = w.HTML(value="")
        self.figure = w.Output(layout={"min_height": "60px"})
        # The world view: shown once a run's world turns out to have a grid.
        self.color_by = w.Dropdown(options=[""], value="", description="color by", style=style)
        self.world_figure = w.Output()
        self.world_box = w.VBox([self.color_by, self.world_figure])
        self.world_box.layout.display = "none"
        self._live_world: Any = None
        self.summary = w.HTML(value="")
        self.llm_box = w.VBox([self.model, self.mock, self.api_base, self.api_key, self.cache_mode])
        self.run_button.on_click(lambda _button: self.run())
        self.policy.observe(lambda _change: self._show_llm_fields(), names="value")
        self.color_by.observe(lambda _change: self._recolour(), names="value")
        self.api_key.observe(self._take_key, names="value")
        for field in (
            self.world,
            self.policy,
            self.agents,
            self.steps,
            self.seed,
            self.scheduling,
            self.model,
            self.mock,
            self.api_base,
            self.cache_mode,
        ):
            field.observe(lambda _change: self._mark_stale(), names="value")
        self._show_llm_fields()
        self.widget = w.VBox(
            [
                self.groups,
                w.HBox(
                    [
                        w.VBox([self.world, self.policy, self.scheduling]),
                        w.VBox([self.agents, self.steps, self.seed]),
                        self.llm_box,
                    ]
                ),
                w.HBox([self.run_button, self.progress]),
                self.status,
                self.figure,
                self.world_box,
                self.summary,
            ]
        )

    # -- what the form says -----------------------------------------------------------------
    def _uses_llm(self) -> bool:
        """Whether any agent of the form calls a model.

        The last group of other agents has the form's policy; every other group keeps its own.
        """
        fixed = self._folder_groups + self._other_groups[:-1]
        policies = {self.policy.value} | {g.policy for g in fixed}
        return bool(policies & LLM_POLICIES)

    def _show_llm_fields(self) -> None:
        self.llm_box.layout.display = "" if self._uses_llm() else "none"

    def _describe_groups(self) -> str:
        from html import escape

        if not self._folder_groups:
            return ""
        names = ", ".join(
            f"{escape(g.id or Path(g.agent or '').name)} ({escape(g.policy)})"
            + (f" x{g.count}" if g.count > 1 else "")
            for g in self._folder_groups
        )
        return f"<b>agent folders</b>: {names}; <i>agents</i> counts them and the agents added"

    def _key_placeholder(self) -> str:
        return "set (hidden); type to replace" if self._api_key else "none: from the environment"

    def _take_key(self, change: dict[str, Any]) -> None:
        """Keep a typed key out of the widget: the panel holds it as a secret.

        The field empties, so neither the page nor the notebook's saved widget state keeps it.
        """
        from pydantic import SecretStr

        value = change.get("new") or ""
        if not value:
            return
        self._api_key = SecretStr(value.strip())
        self.api_key.value = ""
        self.api_key.placeholder = self._key_placeholder()
        self._mark_stale()

    def _mark_stale(self) -> None:
        """An edit after a run: the result on screen no longer matches the form; say so."""
        if self._running or self.run_result is None or not self._summary_html:
            return
        self.summary.value = (
            f"<div style='color:#b60'><b>{STALE_NOTE}</b> (click Run to update it)</div>"
            + self._summary_html
        )

    def _agents(self, groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The config's agent groups (dumped), in their order, as the form sets them.

        The agent folders are kept, and the last group of other agents is made up to the total
        in the form and given the form's policy; refused in one line when the total cannot be
        made. Unchanged settings give the config's own groups, so the panel makes the same run
        as the config file.
        """
        from vivarium.errors import ConfigError

        want = self.agents.value
        folders = [g for g in groups if g.get("agent")]
        fixed = sum(g["count"] for g in folders)
        last = max((i for i, g in enumerate(groups) if not g.get("agent")), default=None)
        kept = sum(g["count"] for i, g in enumerate(groups) if not g.get("agent") and i != last)
        rest = want - fixed - kept if isinstance(want, int) else -1
        names = ", ".join(g.get("id") or Path(g["agent"]).name for g in folders)
        if last is None and rest != 0:
            raise ConfigError(
                f"panel: agents: {want!r} agents: this experiment has {fixed} "
                f"({names}, from agent folders)"
            )
        if rest < 0:
            raise ConfigError(
                f"panel: agents: {want!r} agents: at least {fixed + kept} "
                f"({names} come from agent folders)"
            )
        if last is None:
            return groups
        out = [dict(g) for g in groups]
        if (rest, self.policy.value) != (out[last]["count"], out[last]["policy"]):
            out[last].update(count=rest, policy=self.policy.value)
            if not rest:
                del out[last]
        return out

    def config(self) -> ExperimentConfig:
        """The experiment config the form describes.

        Returns:
            The base config with the form's values.

        Raises:
            ConfigError: A value of the form is bad (one line naming it).
        """
        data = self.base_config.model_dump()
        data.update(
            world=self.world.value,
            steps=self.steps.value,
            seed=self.seed.value,
            scheduling=self.scheduling.value,
        )
        if isinstance(data.get("agents"), list):  # each group names its own policy
            data["agents"] = self._agents(data["agents"])
        else:
            data.update(agents=self.agents.value, policy=self.policy.value)
        _check_action_space(data.get("action_space"), self.world.value)
        if self._uses_llm():
            llm: dict[str, Any] = {
                "model": self.model.value or DEFAULT_MODEL,
                "mock": bool(self.mock.value),
                "api_base": self.api_base.value.strip() or None,
                "api_key": self._api_key,
            }
            if self.cache_mode.value == "off":
                llm["cache"] = None
            else:
                base_llm = data.get("llm") or {}
                llm["cache_mode"] = self.cache_mode.value
                # A cassette keeps one provider's replies: the mock's go to their own file.
                own = (
                    f"{data['name']}-mock.cassette"
                    if llm["mock"] or llm["model"] == "mock"
                    else f"{data['name']}.cassette"
                )
                llm["cache"] = base_llm.get("cache") or str(self.folder / own)
            # Merged into the experiment's own LLM settings, as every entry point merges.
            data = merge_overrides(data, {"llm": llm})
        config = make_config(ExperimentConfig, data, where="panel")
        note = llm_switch(self.base_config.llm, config.llm)
        if note is not None:
            warnings.warn(note, OverrideWarning, stacklevel=2)
        return config

    # -- running ------------------------------------------------------------------------------
    def run(self) -> TraceRun | None:
        """What the Run button does: run the form's config into a new trace and show it.

        Returns:
            The run, or None when the panel shows an error instead.
        """
        self.run_button.disabled = True
        self._running = True
        self.status.value = "running..."
        self.summary.value = self._summary_html = ""
        self.figure.outputs = ()
        self.world_figure.outputs = ()
        self.world_steps = []
        self._live_world = None
        try:
            config = self.config()
            self.progress.max = config.steps
            self.progress.value = 0
            self.progress.description = "0 steps"
            self.progress.bar_style = ""
            counts: dict[int, dict[str, int]] = {}
            every = max(1, config.steps // 10)
            world_every = self.world_every or every
            live: dict[str, Any] = {}

            def on_start(engine: Any) -> None:
                live["world"] = engine.world

            def on_step(step: int, record: Any) -> None:
                counts[step] = _action_counts(record)
                self.progress.value = step + 1
                self.progress.description = f"{step + 1} steps"
                last = step + 1 == config.steps
                if (step + 1) % every == 0 or last:
                    self._show_live(counts)
                if (step + 1) % world_every == 0 or last:
                    self._show_world(live.get("world"), step)

            run, moved = self._run(config, on_step, on_start)
            self.run_result = run
            self.runs.append(run)
            self._show_final(run)
            self._show_done(run, moved)
            return run
        except VivariumError as exc:
            self._error(str(exc))
        except Exception as exc:  # the panel shows it; the notebook keeps running
            self._error(f"{type(exc).__name__}: {exc}")
        finally:
            self._running = False
            self.run_button.disabled = False
        return None

    def _run(
        self, config: ExperimentConfig, on_step: Any, on_start: Any = None
    ) -> tuple[TraceRun, str | None]:
        """Run ``config`` into its default trace path under the panel's folder.

        That path never replaces another run's trace. Returns the run and, when its default
        file held another run, the warning that says where this one went instead (shown in
        the panel).
        """
        import warnings

        from vivarium.errors import RunHealthWarning, TracePathWarning

        reporting = self._reporters() if self._reporters is not None else contextlib.nullcontext()
        with warnings.catch_warnings(record=True) as caught, reporting:
            warnings.simplefilter("always")
            run = run_experiment(
                config,
                folder=self.folder,
                progress=False,
                on_step=on_step,
                on_start=on_start,
                open_run=self._open_run,
            )
        moved = None
        for item in caught:
            if issubclass(item.category, TracePathWarning):
                moved = str(item.message)
            elif not issubclass(item.category, RunHealthWarning):  # the panel shows health
                warnings.warn_explicit(
                    item.message, item.category, item.filename, item.lineno, source=item.source
                )
        return run, moved

    def _show_done(self, run: TraceRun, moved: str | None) -> None:
        """One status line: decisions and where the trace is.

        In red, with the run's health problems, when it is not a clean result.
        """
        from html import escape

        where = escape(str(run.path))
        if moved:
            where += " (the default file holds an earlier run, kept)"
        n = len(run.actions)
        health = getattr(run, "health", None)
        if health is not None and not health.ok:
            self.progress.bar_style = "warning"
            problems = escape("; ".join(health.problems))
            self.status.value = (
                f"<span style='color:#b00'><b>not a clean result</b>: {problems}. "
                f"{n} decisions in {where}</span>"
            )
        else:
            self.progress.bar_style = "success"
            self.status.value = f"<b>done</b>: {n} decisions in {where}"

    def _error(self, message: str) -> None:
        from html import escape

        self.progress.bar_style = "danger"
        line = message.strip().splitlines()[0] if message.strip() else "error"
        self.status.value = f"<span style='color:#b00'><b>error</b>: {escape(line)}</span>"

    def _show_live(self, counts: dict[int, dict[str, int]]) -> None:
        import polars as pl

        from vivarium.analysis.plots import action_mix

        rows = [
            {"step": step, "action": action, "count": n}
            for step, per in sorted(counts.items())
            for action, n in sorted(per.items())
        ]
        frame = pl.DataFrame(
            rows, schema={"step": pl.Int64, "action": pl.String, "count": pl.Int64}
        )
        actions = frame.select(
            pl.col("step").repeat_by("count").explode(),
            pl.col("action").repeat_by("count").explode(),
        ).with_columns(pl.lit("live").alias("run_id"), pl.lit(True).alias("success"))
        self._set_figure(action_mix(actions))

    def _show_world(self, world: Any, step: int) -> None:
        """Draw ``world`` after ``step`` when it has a grid (else leave the view hidden)."""
        from vivarium.analysis.world_view import live_world, world_view

        live = None if world is None else live_world(world)
        if live is None or live.positions is None:
            return
        if world is not self._live_world:  # a new run: offer its agent reporters
            self._live_world = world
            names = list(live.agent_reporters)
            offered = ["", *(n for n in names if n not in ("x", "y"))]
            before = self.color_by.value
            self.color_by.options = offered
            # The reporter picked for the last run if this one has it, else its first one.
            self.color_by.value = (
                before if before in offered[1:] else offered[min(1, len(offered) - 1)]
            )
            self.world_box.layout.display = ""
        plt = require("matplotlib.pyplot")

        self.world_steps.append(step)
        try:
            fig = world_view(world, color_by=self.color_by.value or None, title=f"step {step}")
        except Exception as exc:  # a view that cannot be drawn says why; the run goes on
            line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            if not isinstance(exc, VivariumError):  # ours name the view already
                line = f"world view: {type(exc).__name__}: {line}"
            self.last_world_figure = None
            self.world_figure.outputs = (
                {"output_type": "stream", "name": "stderr", "text": f"{line}\n"},
            )
            return
        self.last_world_figure = fig
        self.world_figure.outputs = (_figure_output(fig),)
        plt.close(fig)

    def _recolour(self) -> None:
        """Another ``color by`` after a run: redraw the run's last world view in it."""
        if self._running or self._live_world is None or not self.world_steps:
            return
        step = self.world_steps[-1]
        self.world_steps.pop()
        self._show_world(self._live_world, step)

    def _show_final(self, run: TraceRun) -> None:
        from vivarium.analysis import summary
        from vivarium.analysis.plots import behaviour_timeline

        self._set_figure(behaviour_timeline(run))
        table = summary(run)
        self._summary_html = table.to_html(index=False, float_format=lambda v: f"{v:.3g}")
        self.summary.value = self._summary_html

    def _set_figure(self, fig: Any) -> None:
        plt = require("matplotlib.pyplot")

        self.last_figure = fig
        self.figure.outputs = (_figure_output(fig),)
        plt.close(fig)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def _choices(names: list[str]) -> list[str] | list[tuple[str, str]]:
    """A dropdown's options: the names, or (label, name) pairs once an object is among them.

    A world or policy given as a Python object is named by a reference
    (``module.Class@digest``, see ``vivarium.experiment.objects``); the panel shows its class's name.
    """
    from vivarium.experiment.objects import display_name, is_reference

    if not any(is_reference(n) for n in names):
        return names
    return [(display_name(n), n) for n in names]


def _world_actions(world: str) -> tuple[str, ...] | None:
    """The actions of a built-in world (None for a world the panel does not know)."""
    if world == "channel":
        from vivarium.worlds.channel import CHANNEL_ACTIONS

        return CHANNEL_ACTIONS.names()
    if world == "ecology":
        from vivarium.worlds.ecology import ECOLOGY_ACTIONS

        return ECOLOGY_ACTIONS.names()
    return None


def _check_action_space(space: list[str] | None, world: str) -> None:
    """Refuse, in one line, an action space with actions the world does not have.

    Run in another world, it would fail every draw of the missing actions (switching the world
    keeps the config's space).
    """
    from vivarium.errors import ConfigError

    known = _world_actions(world)
    missing = [a for a in space or () if known is not None and a not in known]
    if missing:
        raise ConfigError(
            f"panel: action_space: {missing[0]!r} is not an action of the {world} world "
            f"(its actions: {', '.join(known or ())})"
        )


def _action_counts(record: Any) -> dict[str, int]:
    """Action counts of one step, from its rows (or their stored JSON on the batch path)."""
    names = record.action
    if not names and record.encoded and record.encoded[1]:
        names = json.loads(record.encoded[1])
    out: dict[str, int] = {}
    for name in names:
        out[name] = out.get(name, 0) + 1
    return out


def controls(
    experiment: ConfigSource | ExperimentConfig | None = None, **kwargs: Any
) -> ControlPanel:
    """A control panel for ``experiment`` (display it, or use ``.widget``).

    Args:
        experiment: An ``Experiment``, a config, or None for the default config.
        **kwargs: Passed to ``ControlPanel``.

    Returns:
        The panel.
    """
    return ControlPanel(experiment, **kwargs)
