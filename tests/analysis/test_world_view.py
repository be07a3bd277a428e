"""The world view: dots where the agents are, coloured by what is asked, from worlds and frames."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import polars as pl  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from vivarium.analysis.plots import world_view  # noqa: E402
from vivarium.analysis.style import OKABE_ITO  # noqa: E402
from vivarium.errors import ConfigError  # noqa: E402
from vivarium.worlds.grid import Grid  # noqa: E402


class GridWorld:
    """A live world the way a user writes one: agent ids, a grid and agent reporters."""

    agent_reporters = {"wealth": lambda world: [world.wealth[a] for a in world.agent_ids]}

    def __init__(self) -> None:
        self.agent_ids = ["a", "b", "c", "d"]
        self.grid = Grid(6, 4)
        self.wealth = {"a": 0, "b": 3, "c": 1, "d": 5}
        # placed in another order than agent_ids, two agents sharing (2, 1)
        for agent, cell in [("c", (2, 1)), ("a", (0, 0)), ("d", (5, 3)), ("b", (2, 1))]:
            self.grid.place(agent, cell)


def _dots(fig):
    ax = fig.axes[0]  # the grid; a colourbar comes after it
    (dots,) = ax.collections
    return ax, dots


def _cells_of(offsets):
    return [(round(x), round(y)) for x, y in offsets]


def test_live_world_draws_every_agent_in_its_cell_coloured_by_a_reporter():
    world = GridWorld()
    fig = world_view(world, color_by="wealth")
    ax, dots = _dots(fig)
    assert ax.get_xlim() == (-0.5, 5.5) and ax.get_ylim() == (-0.5, 3.5)
    offsets = dots.get_offsets()
    # positions() order: c, a, d, b; c and b share (2, 1) side by side within the cell.
    assert _cells_of(offsets) == [(2, 1), (0, 0), (5, 3), (2, 1)]
    assert offsets[0][0] < 2 < offsets[3][0] and abs(offsets[0][0] - offsets[3][0]) < 1
    assert (offsets[1] == [0, 0]).all()  # alone: at the centre of its cell
    # the colour values follow the agents, not the list order: c=1, a=0, d=5, b=3
    assert dots.get_array().tolist() == [1, 0, 5, 3]
    (bar_ax,) = [a for a in fig.axes if a is not ax]
    assert bar_ax.get_ylabel() == "wealth"
    fig.savefig(io.BytesIO(), format="png")


def test_mapping_sequence_and_categories():
    world = GridWorld()
    # a sequence is aligned with agent_ids (a, b, c, d), drawn in positions order (c, a, d, b)
    fig = world_view(world, color_by=["x", "y", "x", "z"])
    ax, dots = _dots(fig)
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["x", "y", "z"]
    faces = [to_hex(c).upper() for c in dots.get_facecolors()]
    blue, orange, green = OKABE_ITO["blue"], OKABE_ITO["orange"], OKABE_ITO["bluish_green"]
    assert faces == [blue, blue, green, orange]  # c=x, a=x, d=z, b=y
    # integer types drawn as categories when asked (Schelling's two groups)
    fig = world_view(world.grid, color_by={"a": 1, "b": 0, "c": 1, "d": 0}, categorical=True)
    ax, _ = _dots(fig)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["0", "1"]
    # bools are categories without asking
    fig = world_view({"p": (0, 0), "q": (1, 1)}, color_by={"p": True, "q": False})
    ax, _ = _dots(fig)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["False", "True"]


def test_plain_positions_and_into_given_axes():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    out = world_view({"a": (3, 1), "b": (0, 2)}, ax=ax)
    plt.close(fig)
    assert out is fig
    (dots,) = ax.collections
    assert _cells_of(dots.get_offsets()) == [(3, 1), (0, 2)]
    assert ax.get_xlim() == (-0.5, 3.5) and ax.get_ylim() == (-0.5, 2.5)  # size from extent


class ArrayWorld:
    """A batch world: positions in numpy arrays, shown through its x and y agent reporters."""

    agent_reporters = {  # noqa: RUF012
        "x": lambda w: w.xs,
        "y": lambda w: w.ys,
        "kind": lambda w: {a: k for a, k in zip(w.agent_ids, w.kinds, strict=True)},
    }

    def __init__(self) -> None:
        self.agent_ids = ["p", "q", "r"]
        self.width, self.height = 8, 3
        self.xs, self.ys = np.array([7, 0, 3]), np.array([2, 0, 1])
        self.kinds = np.array([0, 1, 1])


def test_a_batch_world_with_x_and_y_reporters():
    fig = world_view(ArrayWorld(), color_by="kind", categorical=True)
    ax, dots = _dots(fig)
    assert _cells_of(dots.get_offsets()) == [(7, 2), (0, 0), (3, 1)]
    assert ax.get_xlim() == (-0.5, 7.5) and ax.get_ylim() == (-0.5, 2.5)  # the world's size
    faces = [to_hex(c).upper() for c in dots.get_facecolors()]
    assert faces == [OKABE_ITO["blue"], OKABE_ITO["orange"], OKABE_ITO["orange"]]


def _agent_vars() -> pd.DataFrame:
    """The shape helper W2's run.agent_vars has: step, agent_id, one column per reporter."""
    rows = []
    for step in range(3):
        for i, agent in enumerate(["a0", "a1", "a2"]):
            rows.append(
                {"step": step, "agent_id": agent, "x": (i + step) % 5, "y": i, "wealth": i * step}
            )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("kind", ["pandas", "polars", "run"])
def test_agent_vars_frame_at_a_step(kind):
    frame = _agent_vars()
    data = frame
    if kind == "polars":
        data = pl.from_pandas(frame)
    elif kind == "run":

        class FakeRun:
            agent_vars = frame

        data = FakeRun()
    fig = world_view(data, step=1, color_by="wealth")
    ax, dots = _dots(fig)
    assert _cells_of(dots.get_offsets()) == [(1, 0), (2, 1), (3, 2)]
    assert dots.get_array().tolist() == [0, 1, 2]
    assert ax.get_title(loc="left") == "step 1"
    # the grid is the whole run's extent: x up to 4 (a2 at step 2), y up to 2
    assert ax.get_xlim() == (-0.5, 4.5) and ax.get_ylim() == (-0.5, 2.5)
    last = world_view(data, color_by="wealth")  # default: the last step
    assert _dots(last)[0].get_title(loc="left") == "step 2"
    assert _dots(last)[1].get_array().tolist() == [0, 2, 4]


def test_sweep_frames_draw_one_run():
    a, b = _agent_vars().assign(run_id="r1"), _agent_vars().assign(run_id="r2")
    b["x"] = 0
    fig = world_view(pd.concat([b, a]), step=0)
    ax, dots = _dots(fig)
    assert ax.get_title(loc="left") == "run r1 (first of 2), step 0"
    assert _cells_of(dots.get_offsets()) == [(0, 0), (1, 1), (2, 2)]
    fig = world_view(pd.concat([a, b]), step=0, run_id="r2", size=(8, 8))
    ax, dots = _dots(fig)
    assert _cells_of(dots.get_offsets()) == [(0, 0), (0, 1), (0, 2)]
    assert ax.get_xlim() == (-0.5, 7.5)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: world_view(object()), "has no grid, positions"),
        (lambda: world_view(GridWorld(), color_by="age"), "not an agent reporter.*wealth"),
        (lambda: world_view(GridWorld(), color_by=[1, 2]), "2 values for 4 agents"),
        (lambda: world_view(GridWorld(), color_by={"a": 1}), "no value for agent"),
        (lambda: world_view(_agent_vars(), step=9), "step 9 is not in agent_vars"),
        (lambda: world_view(_agent_vars(), color_by="age"), "not a column of agent_vars"),
        (lambda: world_view(_agent_vars().drop(columns="y")), "no y column"),
        (lambda: world_view({"a": "here"}), r"a position is \(x, y\)"),
    ],
)
def test_bad_input_is_one_line(call, message):
    with pytest.raises(ConfigError, match=message) as info:
        call()
    assert "\n" not in str(info.value)


def test_a_big_grid_draws_without_cell_borders():
    grid = Grid(100, 100)
    rng = np.random.default_rng(0)
    for i in range(2000):
        grid.place(f"a{i}", (int(rng.integers(100)), int(rng.integers(100))))
    fig = world_view(grid, color_by=dict.fromkeys(grid.positions(), 1.0))
    ax, dots = _dots(fig)
    assert len(dots.get_offsets()) == 2000
    assert not ax.get_xticks(minor=True).size
