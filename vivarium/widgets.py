"""The notebook control panel: ``Experiment(...).controls()``.

A form for the experiment (world, policy, agents, steps, seed, scheduling and, for LLM
policies, model / mock / cache mode), a Run button, a progress bar the engine drives, a figure
that updates as steps complete, and a summary table at the end. Errors are shown in the panel
as one line, never as a traceback. The logic lives in plain methods (``run()``, ``config()``),
so tests drive the panel without a browser: set widget values, ``click``, read the outputs.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vivarium.errors import VivariumError

if TYPE_CHECKING:
    from vivarium.experiment import Experiment, Run

LLM_POLICIES = {"cognitive", "workflow"}


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


class ControlPanel:
    """An ipywidgets panel around an Experiment. ``panel.widget`` is what a notebook shows."""

    def __init__(
        self, experiment: Experiment | None = None, *, folder: str | Path = "runs"
    ) -> None:
        import ipywidgets as w

        from vivarium.build import known_names
        from vivarium.experiment import Experiment

        self.experiment = experiment or Experiment()
        self.folder = Path(folder)
        self.run_result: Run | None = None
        self.last_figure: Any = None
        c = self.experiment.config
        llm = c.llm
        style = {"description_width": "90px"}
        self.world = w.Dropdown(
            options=known_names("world"), value=c.world, description="world", style=style
        )
        self.policy = w.Dropdown(
            options=known_names("policy"), value=c.policy, description="policy", style=style
        )
        self.agents = w.BoundedIntText(
            value=c.agent_count, min=1, max=100_000, description="agents", style=style
        )
        self.steps = w.BoundedIntText(
            value=c.steps, min=1, max=1_000_000, description="steps", style=style
        )
        self.seed = w.BoundedIntText(
            value=c.seed, min=0, max=2**31 - 1, description="seed", style=style
        )
        self.scheduling = w.Dropdown(
            options=["sequential", "simultaneous"],
            value=c.scheduling,
            description="scheduling",
            style=style,
        )
        self.model = w.Text(value=llm.model if llm else "mock", description="model", style=style)
        self.mock = w.Checkbox(value=llm.uses_mock if llm else True, description="mock LLM")
        self.cache_mode = w.Dropdown(
            options=["off", "record", "replay", "auto"],
            value=(llm.cache_mode if llm and llm.cache else "off"),
            description="cache",
            style=style,
        )
        self.run_button = w.Button(description="Run", button_style="primary", icon="play")
        self.progress = w.IntProgress(value=0, min=0, max=c.steps, description="0 steps")
        self.status = w.HTML(value="")
        self.figure = w.Output(layout={"min_height": "60px"})
        self.summary = w.HTML(value="")
        self.llm_box = w.VBox([self.model, self.mock, self.cache_mode])
        self.run_button.on_click(lambda _button: self.run())
        self.policy.observe(lambda _change: self._show_llm_fields(), names="value")
        self._show_llm_fields()
        self.widget = w.VBox(
            [
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
                self.summary,
            ]
        )

    # -- what the form says -----------------------------------------------------------------
    def _show_llm_fields(self) -> None:
        self.llm_box.layout.display = "" if self.policy.value in LLM_POLICIES else "none"

    def config(self) -> Any:
        """The experiment config the form describes (raises ConfigError on a bad value)."""
        from vivarium.config import ExperimentConfig, make_config

        data = self.experiment.config.model_dump()
        data.update(
            world=self.world.value,
            policy=self.policy.value,
            steps=int(self.steps.value),
            seed=int(self.seed.value),
            scheduling=self.scheduling.value,
        )
        if (
            isinstance(data.get("agents"), int)
            or self.agents.value != self.experiment.config.agent_count
        ):
            data["agents"] = int(self.agents.value)
        if self.policy.value in LLM_POLICIES:
            llm = dict(data.get("llm") or {})
            llm.update(model=self.model.value or "mock", mock=bool(self.mock.value))
            if self.cache_mode.value == "off":
                llm["cache"] = None
            else:
                llm["cache_mode"] = self.cache_mode.value
                llm["cache"] = llm.get("cache") or str(self.folder / f"{data['name']}.cassette")
            data["llm"] = llm
        return make_config(ExperimentConfig, data, where="panel")

    # -- running ------------------------------------------------------------------------------
    def run(self) -> Run | None:
        """What the Run button does. Returns the Run, or None when the panel shows an error."""
        from vivarium.experiment import Experiment

        self.run_button.disabled = True
        self.status.value = "running..."
        self.summary.value = ""
        self.figure.outputs = ()
        try:
            config = self.config()
            self.progress.max = config.steps
            self.progress.value = 0
            self.progress.bar_style = ""
            counts: dict[int, dict[str, int]] = {}
            every = max(1, config.steps // 10)

            def on_step(step: int, record: Any) -> None:
                counts[step] = _action_counts(record)
                self.progress.value = step + 1
                self.progress.description = f"{step + 1} steps"
                if (step + 1) % every == 0 or step + 1 == config.steps:
                    self._show_live(counts)

            db = Path(config.db) if config.db else self.folder / f"{config.name}.sqlite"
            run = Experiment(config).run(db, progress=False, on_step=on_step)
            self.run_result = run
            self._show_final(run)
            self.progress.bar_style = "success"
            n = len(run.actions)
            self.status.value = f"<b>done</b>: {n} decisions in {run.path}"
            return run
        except VivariumError as exc:
            self._error(str(exc))
        except Exception as exc:  # the panel shows it; the notebook keeps running
            self._error(f"{type(exc).__name__}: {exc}")
        finally:
            self.run_button.disabled = False
        return None

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

    def _show_final(self, run: Run) -> None:
        from vivarium.analysis import summary
        from vivarium.analysis.plots import behaviour_timeline

        self._set_figure(behaviour_timeline(run))
        table = summary(run)
        self.summary.value = table.to_html(index=False, float_format=lambda v: f"{v:.3g}")

    def _set_figure(self, fig: Any) -> None:
        import matplotlib.pyplot as plt

        self.last_figure = fig
        self.figure.outputs = (_figure_output(fig),)
        plt.close(fig)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def _action_counts(record: Any) -> dict[str, int]:
    """Action counts of one step, from its rows (or their stored JSON on the batch path)."""
    names = record.action
    if not names and record.encoded and record.encoded[1]:
        names = json.loads(record.encoded[1])
    out: dict[str, int] = {}
    for name in names:
        out[name] = out.get(name, 0) + 1
    return out


def controls(experiment: Experiment | None = None, **kwargs: Any) -> ControlPanel:
    """A control panel for ``experiment`` (display it, or use ``.widget``)."""
    return ControlPanel(experiment, **kwargs)
