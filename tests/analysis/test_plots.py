"""vivarium.analysis.plots: what each figure draws, the style, and byte-stable saving."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PathCollection, PolyCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.image import AxesImage  # noqa: E402

from tests.support.hand_made_frames import actions_frame  # noqa: E402
from vivarium import Experiment, Run  # noqa: E402
from vivarium.analysis import plots, success_ci  # noqa: E402
from vivarium.analysis.style import (  # noqa: E402
    NEUTRAL,
    OKABE_ITO,
    SINGLE_COLUMN,
    paper_style,
    save_figure,
)

ROOT = Path(__file__).resolve().parents[2]


def transitions_frame() -> pl.DataFrame:
    rows = [
        ("r1", 0, "a", "A", "B"),
        ("r1", 1, "a", "B", "C"),
        ("r1", 1, "a", "C", "B"),
        ("r1", 2, "a", "B", "C"),
        ("r1", 2, "a", "C", "A"),
        ("r1", 0, "b", "A", "B"),
        ("r1", 1, "b", "B", "A"),
    ]
    return pl.DataFrame(
        rows, schema=["run_id", "step", "agent_id", "from_state", "to_state"], orient="row"
    )


def agents_frame() -> pl.DataFrame:
    return pl.DataFrame({"run_id": ["r1"] * 3, "agent_idx": [0, 1, 2], "agent_id": ["a", "b", "c"]})


def texts(legend) -> list[str]:
    return [t.get_text() for t in legend.get_texts()]


def ytick_labels(ax) -> list[str]:
    return [t.get_text() for t in ax.get_yticklabels()]


# -- behaviour timeline -----------------------------------------------------------------------


def test_behaviour_timeline_draws_each_decision() -> None:
    data = {"actions": actions_frame(), "agents": agents_frame()}
    fig = plots.behaviour_timeline(data)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    (image,) = [a for a in ax.get_children() if isinstance(a, AxesImage)]
    grid = image.get_array()
    # actions sorted: emit 0, noop 1, post 2; rows a, b, c (c never acted: masked)
    assert grid[:2].tolist() == [[1, 0, 1], [0, 0, 2]]
    assert grid.mask[2].all() and not grid.mask[:2].any()
    assert image.get_extent() == [-0.5, 2.5, 2.5, -0.5]
    cmap = image.get_cmap()
    assert matplotlib.colors.to_hex(cmap(1)) == NEUTRAL.lower()  # noop is grey
    assert matplotlib.colors.to_hex(cmap(0)) == OKABE_ITO["blue"].lower()
    (failed,) = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert failed.get_offsets().tolist() == [[1, 0], [2, 1]]
    assert texts(fig.legends[0]) == ["emit", "noop", "post", "failed"]
    assert ax.get_xlabel() == "step" and ax.get_ylabel() == "agent"
    assert ytick_labels(ax) == ["a", "b", "c"]
    # two runs: the first is drawn and the title says so
    # the title sits on top of the legend (a suptitle would overlap an outside legend)
    assert fig.legends[0].get_title().get_text() == "run r1 (first of 2)"

    assert fig.get_size_inches()[0] == pytest.approx(SINGLE_COLUMN)


def test_behaviour_timeline_picks_a_run_and_agents() -> None:
    fig = plots.behaviour_timeline(actions_frame(), run_id="r2", mark_failures=False)
    (image,) = fig.axes[0].images
    assert image.get_array().tolist() == [[0, 0]]  # only "post", agent a, steps 0-1
    assert texts(fig.legends[0]) == ["post"]
    assert not fig.axes[0].collections
    fig = plots.behaviour_timeline(actions_frame(), run_id="r1", agents=["b"], width="double")
    assert fig.axes[0].images[0].get_array().tolist() == [[0, 0, 1]]  # emit, emit, post
    assert texts(fig.legends[0]) == ["emit", "post", "failed"]
    assert fig.get_size_inches()[0] == pytest.approx(6.9)
    with pytest.raises(ValueError, match="run_id 'nope'"):
        plots.behaviour_timeline(actions_frame(), run_id="nope")


# -- action mix -------------------------------------------------------------------------------


def test_action_mix_bars_are_the_shares() -> None:
    fig = plots.action_mix(actions_frame(), run_id="r1", kind="bars")
    ax = fig.axes[0]
    bars = ax.patches
    assert len(bars) == 9  # 3 actions x 3 steps
    heights = [round(b.get_height(), 6) for b in bars]
    # steps 0-2 of emit, then noop, then post (r1: step 1 is emit twice)
    assert heights == [0.5, 1.0, 0.0, 0.5, 0.0, 0.5, 0.0, 0.0, 0.5]
    bottoms = [round(b.get_y(), 6) for b in bars[6:]]
    assert bottoms == [1.0, 1.0, 0.5]  # post sits on emit + noop
    assert texts(fig.legends[0]) == ["emit", "noop", "post"]
    assert ax.get_ylabel() == "share of decisions" and ax.get_xlabel() == "step"
    assert ax.get_ylim() == (0.0, 1.0)


def test_action_mix_areas_pool_runs_and_split_groups() -> None:
    fig = plots.action_mix(actions_frame())
    ax = fig.axes[0]
    polys = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(polys) == 3
    top = polys[-1].get_paths()[0].vertices
    assert top[:, 1].max() == pytest.approx(1.0)
    grouped = actions_frame().with_columns(
        temp=pl.when(pl.col("run_id") == "r1").then(0.5).otherwise(1.0)
    )
    fig = plots.action_mix(grouped, by="temp", normalize=False, window=2)
    assert len(fig.axes) == 2
    assert [a.get_title(loc="left") for a in fig.axes] == ["temp = 0.5", "temp = 1"]
    assert fig.axes[0].get_ylabel() == "decisions per step\n(2-step window)"
    assert fig.axes[1].get_xlabel() == "step"


# -- success curves ---------------------------------------------------------------------------


def two_runs() -> pl.DataFrame:
    r1 = actions_frame().filter(pl.col("run_id") == "r1")
    r3 = r1.with_columns(run_id=pl.lit("r3"), success=pl.lit(True))
    return pl.concat([r1, r3]).with_columns(
        temp=pl.when(pl.col("agent_id") == "a").then(0.1).otherwise(0.9)
    )


def band_reach(ax: Any) -> tuple[float, float]:
    """The lowest and highest point of the one interval band on ``ax``."""
    (band,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    ys = band.get_paths()[0].vertices[:, 1]
    return float(ys.min()), float(ys.max())


def test_success_curves_mean_and_band_across_runs() -> None:
    data = two_runs()
    fig = plots.success_curves(data)
    ax = fig.axes[0]
    (line,) = ax.get_lines()
    expected = success_ci(data, as_="polars")
    assert line.get_xdata().tolist() == [0, 1, 2]
    assert line.get_ydata().tolist() == pytest.approx(expected["success_rate"].to_list())
    assert band_reach(ax) == pytest.approx((expected["ci_low"].min(), expected["ci_high"].max()))
    assert texts(ax.get_legend()) == ["mean of 2 runs", "95% CI (t, across runs)"]
    assert ax.get_ylabel() == "success rate" and ax.get_xlabel() == "step"


def test_success_curves_per_group_and_one_run() -> None:
    fig = plots.success_curves(two_runs(), by="temp", window=2)
    ax = fig.axes[0]
    assert len(ax.get_lines()) == 2
    assert len([c for c in ax.collections if isinstance(c, PolyCollection)]) == 2
    legend = fig.legends[0]
    assert texts(legend) == ["0.1", "0.9"]
    assert legend.get_title().get_text() == "temp: mean of 2 runs ± 95% CI (t)"
    assert ax.get_ylabel() == "success rate\n(2-step window)"
    one = plots.success_curves(actions_frame().filter(pl.col("run_id") == "r1"), per_agent=True)
    ax = one.axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["a", "b"]
    assert ax.get_lines()[0].get_ydata().tolist() == [1.0, 0.0, 1.0]
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]  # no band of one run


# -- pivots -----------------------------------------------------------------------------------


def test_pivot_raster_marks_back_transitions() -> None:
    data = {
        "actions": actions_frame(),
        "transitions": transitions_frame(),
        "agents": agents_frame(),
    }
    fig = plots.pivot_raster(data, run_id="r1")
    ax = fig.axes[0]
    marks = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert [m.get_label() for m in marks] == ["back to A", "back to B"]
    assert marks[0].get_offsets().tolist() == [[1, 1], [2, 0]]  # b at step 1, a at step 2
    assert marks[1].get_offsets().tolist() == [[1, 0]]
    assert ytick_labels(ax) == ["a (2)", "b (1)", "c (0)"]
    assert texts(fig.legends[0]) == ["back to A", "back to B"]
    assert ax.get_xlabel() == "step" and ax.get_ylabel() == "agent (pivots)"
    assert ax.get_xlim() == (-0.5, 2.5)
    fig.canvas.draw()
    shown = [t for t in ax.get_xticks() if -0.5 <= t <= 2.5]
    assert shown and all(float(t).is_integer() for t in shown)  # steps are whole: no 0.5 ticks
    ordered = plots.pivot_raster(data, run_id="r1", state_order=["C", "B", "A"])
    assert texts(ordered.legends[0]) == ["back to C", "back to B"]
    none = plots.pivot_raster(data, run_id="r1", exclude=["C -> B", "C -> A", "B -> A"])
    assert not none.legends and "no pivots" in [t.get_text() for t in none.axes[0].texts]


# -- messages and tokens ----------------------------------------------------------------------


def messages_data() -> dict[str, pl.DataFrame]:
    return {
        "messages": pl.DataFrame(
            {
                "run_id": ["r1", "r1", "r1", "r2", "r2"],
                "step": [0, 0, 2, 0, 2],
                "author_id": ["a", "b", "a", "a", "a"],
                "content": ["x"] * 5,
            }
        ),
        "steps": pl.DataFrame({"run_id": ["r1"] * 3 + ["r2"] * 3, "step": [0, 1, 2] * 2}),
    }


def test_message_volume_lines() -> None:
    data = messages_data()
    one = plots.message_volume({k: v.filter(pl.col("run_id") == "r1") for k, v in data.items()})
    ax = one.axes[0]
    (line,) = ax.get_lines()
    assert line.get_ydata().tolist() == [2, 0, 1] and line.get_drawstyle() == "steps-mid"
    assert ax.get_ylabel() == "messages per step" and ax.get_xlabel() == "step"
    both = plots.message_volume(data)
    ax = both.axes[0]
    assert ax.get_lines()[0].get_ydata().tolist() == [1.5, 0.0, 1.0]
    assert ax.get_ylabel() == "messages per step\n(mean of 2 runs)"
    assert len([c for c in ax.collections if isinstance(c, PolyCollection)]) == 1
    cum = plots.message_volume(data, cumulative=True, per_agent=True)
    lines = cum.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["a", "b"]
    assert lines[0].get_ydata().tolist() == [1.0, 1.0, 2.0]  # mean of r1 (1,1,2) and r2 (1,1,2)


def test_token_use_panels() -> None:
    calls = pl.DataFrame(
        {
            "run_id": ["r1"] * 3,
            "step": [0, 0, 2],
            "agent_id": ["a", "b", "a"],
            "prompt_tokens": [100, 50, 10],
            "completion_tokens": [10, 5, 1],
            "cost": [0.5, 0.25, 0.125],
        }
    )
    data = {"llm_calls": calls, "steps": pl.DataFrame({"run_id": ["r1"] * 3, "step": [0, 1, 2]})}
    fig = plots.token_use(data)
    top, bottom = fig.axes
    assert [line.get_label() for line in top.get_lines()] == ["prompt", "completion"]
    assert top.get_lines()[0].get_ydata().tolist() == [150, 0, 10]
    assert top.get_lines()[1].get_ydata().tolist() == [15, 0, 1]
    (cost,) = bottom.get_lines()
    assert cost.get_ydata().tolist() == [0.75, 0.0, 0.125]
    assert top.get_ylabel() == "tokens per step"
    assert bottom.get_ylabel() == "cost per step (USD)" and bottom.get_xlabel() == "step"
    grouped = plots.token_use(
        {k: v.with_columns(model=pl.lit("m")) for k, v in data.items()}, by="model"
    )
    assert [line.get_label() for line in grouped.axes[0].get_lines()] == ["m"]


# -- on real runs, empty data, style ------------------------------------------------------------


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    folder = tmp_path_factory.mktemp("plots")
    exp = Experiment(
        world="ecology",
        agents=3,
        steps=6,
        action_space=["noop", "read_artifact", "write_artifact", "invoke_artifact"],
    )
    return exp.run(folder / "run.sqlite", progress=False)


FIGURES = ["behaviour_timeline", "action_mix", "success_curves", "pivot_raster"]
FIGURES += ["message_volume", "token_use"]


@pytest.mark.parametrize("name", FIGURES)
def test_every_figure_takes_a_run_and_labels_its_axes(name: str, run: Run) -> None:
    fig = getattr(plots, name)(run)
    assert isinstance(fig, Figure)
    assert fig.axes[-1].get_xlabel() == "step"
    assert all(ax.get_ylabel() for ax in fig.axes)


@pytest.mark.parametrize("name", FIGURES)
def test_every_figure_survives_empty_data(name: str) -> None:
    fig = getattr(plots, name)({})
    assert isinstance(fig, Figure) and fig.axes[-1].get_xlabel() == "step"


def test_figures_leave_rcparams_alone(run: Run) -> None:
    before = dict(matplotlib.rcParams)
    plots.behaviour_timeline(run)
    with paper_style():
        assert matplotlib.rcParams["font.size"] == 8
    assert dict(matplotlib.rcParams) == before


def test_style_is_kept_when_drawn_outside_the_context(run: Run, tmp_path: Path) -> None:
    fig = plots.success_curves(run)
    fig.canvas.draw()
    tick = fig.axes[0].xaxis.get_major_ticks()[0]
    assert tick.label1.get_fontsize() == 7.5


def test_save_figure_writes_pdf_and_png_byte_stable(run: Run, tmp_path: Path) -> None:
    fig = plots.behaviour_timeline(run)
    first = save_figure(fig, tmp_path / "one" / "timeline.pdf")
    second = save_figure(fig, tmp_path / "two" / "timeline")
    assert [p.name for p in first] == ["timeline.pdf", "timeline.png"]
    for a, b in zip(first, second, strict=True):
        assert a.exists() and a.read_bytes() == b.read_bytes()
    pdf = first[0].read_bytes()
    assert pdf.startswith(b"%PDF") and b"CreationDate" not in pdf
    png = matplotlib.image.imread(first[1])
    width, height = fig.get_size_inches()
    assert png.shape[:2] == (round(height * 300), round(width * 300))
    svg = save_figure(fig, tmp_path / "svg" / "t", formats=["svg"])
    again = save_figure(fig, tmp_path / "svg2" / "t", formats=["svg"])
    assert svg[0].read_bytes() == again[0].read_bytes()
    with pytest.raises(ValueError, match="formats"):
        save_figure(fig, tmp_path / "x", formats=["gif"])


def test_headless_process_gets_agg() -> None:
    code = (
        "import matplotlib, polars as pl;"
        "from vivarium.analysis import plots;"
        "plots.message_volume(pl.DataFrame({'step': [0], 'author_id': ['a']}));"
        "print(matplotlib.get_backend().lower())"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "DISPLAY")}
    env.pop("WAYLAND_DISPLAY", None)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True
    )
    assert done.stdout.strip() == "agg"
    assert np.isfinite(1.0)


# -- effect curves ------------------------------------------------------------------------------


def test_effect_curves_draw_each_arms_difference_and_interval() -> None:
    from vivarium.analysis import paired_difference

    rows = [
        (rep, step, arm, rep * 0.5 + step + (1.0 if arm == "b" else 0.0) + 0.1 * (rep % 2))
        for rep in range(4)
        for step in range(3)
        for arm in ("control", "b")
    ]
    frame = pl.DataFrame(rows, schema=["replication", "step", "prompt", "score"], orient="row")
    diff = paired_difference(frame, "score", "prompt", "control", per="step")
    fig = plots.effect_curves(diff)
    ax = fig.axes[0]
    line = next(ln for ln in ax.get_lines() if len(ln.get_xdata()) == 3)
    assert line.get_xdata().tolist() == [0, 1, 2]
    assert line.get_ydata().tolist() == pytest.approx(diff["mean_diff"].to_list())
    assert band_reach(ax) == pytest.approx((diff["ci_low"].min(), diff["ci_high"].max()))
    assert ax.get_legend().get_title().get_text() == "prompt"
    assert ax.get_ylabel() == "effect (arm - control)"
    with pytest.raises(ValueError, match="per='step'"):
        plots.effect_curves(frame)
    other = frame.with_columns(site=pl.col("replication") % 2)
    by_site = paired_difference(other, "score", "prompt", "control", per=["step", "site"])
    with pytest.raises(ValueError, match="per='step' alone"):  # lines of mixed sites: refused
        plots.effect_curves(by_site)
