"""The world view: agents drawn on their grid cells, coloured by a reporter value.

``world_view`` draws from what a user has at hand:

- a live world with a grid (``world.grid.positions()``), with its own ``positions()`` or
  with ``x`` and ``y`` agent reporters (a batch world's arrays), a ``Grid``, or a plain
  mapping ``agent_id -> (x, y)``;
- a finished run (anything with ``agent_vars``) or an ``agent_vars`` frame (pandas or polars:
  ``step``, ``agent_id``, one column per agent reporter) whose reporters include ``x`` and
  ``y``, at one ``step`` (the last by default).

What a live world offers is read through the world protocols of ``vivarium.worlds.base``
(``GridWorld``, ``PositionedWorld``, ``SizedWorld``, ``AgentReportingWorld``,
``AgentListWorld``), checked once when the world is handed over (``live_world``).

``color_by`` is a reporter name (a column of the frame, or a key of the live world's
``agent_reporters``), a mapping ``agent_id -> value``, or a sequence aligned with the world's
agents. Numbers get a colour scale and a colourbar; categories (strings, bools, or numbers with
``categorical=True``) get the paper palette and a legend. Several agents on one cell are drawn
side by side inside it, in the order the grid lists them, so a crowded cell reads as crowded
instead of hiding agents behind each other.

The figure follows the house style (``vivarium.analysis.style``); matplotlib is imported
inside the function.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from vivarium.analysis.style import category_colors, figure_width, freeze_style, paper_style
from vivarium.errors import ConfigError
from vivarium.optional import require
from vivarium.protocols import implements

__all__ = ["LiveWorld", "live_world", "world_positions", "world_view"]

Cell = tuple[int, int]
MAX_GRIDLINES = 40  # draw cell borders up to this many cells a side


def world_view(
    world: Any,
    color_by: str | Mapping[str, Any] | Sequence[Any] | Any = None,
    ax: Any = None,
    *,
    step: int | None = None,
    run_id: str | None = None,
    size: tuple[int, int] | None = None,
    categorical: bool | None = None,
    cmap: str = "viridis",
    width: str | float = "single",
    title: str | None = None,
) -> Any:
    """Agents on the grid, one dot each, coloured by ``color_by``.

    Args:
        world: A live world (with ``grid``, ``positions()`` or ``x``/``y`` agent reporters), a
            ``Grid``, a mapping
            ``agent_id -> (x, y)``, a run with ``agent_vars``, or an ``agent_vars`` frame.
        color_by: None (one colour), a reporter name, a mapping ``agent_id -> value``, or a
            sequence aligned with the world's ``agent_ids`` (else with its positions' order).
        ax: Draw into these axes instead of a new figure.
        step: For a run or frame: the step to draw (default: the last).
        run_id: For a sweep's frames: the run to draw (default: the first, named in the title).
        size: ``(width, height)`` of the grid when the input does not say (a frame): default,
            the largest ``x`` and ``y`` of the run plus one.
        categorical: Colour by category (legend) instead of a scale (colourbar). None: numbers
            get a scale, anything else (bools too) categories.
        cmap: The matplotlib colour map of a scale.
        width: ``"single"``, ``"double"`` or inches (a new figure only).
        title: A title; default ``step N`` for a run or frame.

    Returns:
        The matplotlib Figure.

    Raises:
        ConfigError: The input has no positions, or ``color_by`` names nothing it has (one line).
    """
    positions, values, (w, h), note = _resolve(world, color_by, step, run_id, size)
    if values is not None and len(values) != len(positions):
        raise ConfigError(
            f"world_view: color_by has {len(values)} values for {len(positions)} agents"
        )
    return _draw(positions, values, w, h, ax, categorical, cmap, width, title or note, color_by)


@dataclass(frozen=True, slots=True)
class LiveWorld:
    """What the world view can draw of a live world, as it is now: checked once, when handed.

    Attributes:
        positions: Each agent's cell: its grid's ``positions()`` (``GridWorld``), its own
            (``PositionedWorld``), or its ``x`` and ``y`` agent reporters aligned with its
            ``agent_ids``; None when it has none of them.
        agent_reporters: Its agent reporters (``AgentReportingWorld``), its class's with its
            own on top.
        agent_ids: Its own list of its agents (``AgentListWorld``), or None.
        size: ``(width, height)`` of its grid, else of itself (``SizedWorld``), or None.
    """

    positions: dict[str, Any] | None
    agent_reporters: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    agent_ids: list[Any] | None = None
    size: tuple[int, int] | None = None


def live_world(world: Any) -> LiveWorld:
    """What ``world`` offers the world view, read through the world protocols once.

    A ``grid`` without ``positions()`` (an array of cells, say) or a ``width`` that is not an
    int is the world's own business: it is not drawn from.
    """
    from vivarium.worlds.base import (
        AgentListWorld,
        AgentReportingWorld,
        GridWorld,
        PositionedWorld,
        SizedWorld,
    )

    grid = world.grid if implements(world, GridWorld) else None
    own = (world.agent_reporters if implements(world, AgentReportingWorld) else None) or {}
    kind = type(world)
    of_class = (kind.agent_reporters if implements(kind, AgentReportingWorld) else None) or {}
    listed = world.agent_ids if implements(world, AgentListWorld) else None
    ids = list(listed) if listed is not None else None
    positions = None
    if grid is not None and implements(grid, PositionedWorld):
        positions = dict(grid.positions())
    elif implements(world, PositionedWorld):
        positions = dict(world.positions())
    elif ids is not None and "x" in own and "y" in own:
        xs, ys = _aligned(own["x"](world), ids), _aligned(own["y"](world), ids)
        positions = {str(a): (x, y) for a, x, y in zip(ids, xs, ys, strict=True)}
    size = None
    for holder in (grid, world):
        if holder is not None and implements(holder, SizedWorld):
            w, h = holder.width, holder.height
            if isinstance(w, int) and isinstance(h, int):
                size = (w, h)
                break
    return LiveWorld(positions, {**of_class, **own}, ids, size)


def world_positions(world: Any) -> dict[str, Cell] | None:
    """The live positions of ``world``, or None when it has none.

    Its grid's (``world.grid.positions()``), its own ``positions()``, or, for a world that keeps
    positions in arrays, its ``x`` and ``y`` agent reporters aligned with its ``agent_ids``
    (see ``live_world``).
    """
    return live_world(world).positions


def _aligned(values: Any, ids: Sequence[Any]) -> list[Any]:
    """A reporter's values in ``ids`` order (it gave a mapping or an aligned sequence)."""
    if isinstance(values, Mapping):
        return [values[a] for a in ids]
    values = list(values)
    if len(values) != len(ids):
        raise ConfigError(f"world_view: a reporter has {len(values)} values for {len(ids)} agents")
    return values


# -- inputs -------------------------------------------------------------------------------------
@runtime_checkable
class RunWithAgentVars(Protocol):
    """A finished run (``vivarium.Run``, a sweep's runs): its ``agent_vars`` frame is drawn."""

    agent_vars: Any


def _is_frame(obj: Any) -> bool:
    """A pandas or polars frame (not a user's world: a table handed to the view)."""
    return hasattr(obj, "columns") and (hasattr(obj, "iloc") or hasattr(obj, "filter"))


def _resolve(
    world: Any,
    color_by: Any,
    step: int | None,
    run_id: str | None,
    size: tuple[int, int] | None,
) -> tuple[dict[str, Cell], list[Any] | None, tuple[int, int], str | None]:
    """Positions, colour values aligned with them, the grid size and a title note."""
    if _is_frame(world):
        return _from_frame(world, color_by, step, run_id, size)
    if implements(world, RunWithAgentVars):
        return _from_frame(world.agent_vars, color_by, step, run_id, size)
    if isinstance(world, Mapping):
        positions = {str(a): _cell(c) for a, c in world.items()}
        values = _live_values(world, LiveWorld(None), color_by, positions, list(positions))
        return positions, values, size or _extent(positions.values()), None
    live = live_world(world)
    if live.positions is None:
        raise ConfigError(
            f"world_view: {type(world).__name__} has no grid, positions() or x and y agent "
            "reporters; pass a world with one, a mapping agent_id -> (x, y), a run or its "
            "agent_vars frame"
        )
    positions = {str(a): _cell(c) for a, c in live.positions.items()}
    order = [str(a) for a in live.agent_ids] if live.agent_ids is not None else list(positions)
    values = _live_values(world, live, color_by, positions, order)
    return positions, values, size or live.size or _extent(positions.values()), None


def _cell(value: Any) -> Cell:
    try:
        x, y = value
        return int(x), int(y)
    except (TypeError, ValueError):
        raise ConfigError(f"world_view: a position is (x, y), not {value!r}") from None


def _extent(cells: Any) -> tuple[int, int]:
    """The smallest grid that holds ``cells``."""
    cells = list(cells)
    return (
        max((x for x, _ in cells), default=0) + 1,
        max((y for _, y in cells), default=0) + 1,
    )


def _live_values(
    world: Any, live: LiveWorld, color_by: Any, positions: dict[str, Cell], order: Sequence[str]
) -> list[Any] | None:
    """``color_by`` on a live world, as one value per agent of ``positions``."""
    if color_by is None:
        return None
    if isinstance(color_by, str):
        reporters = live.agent_reporters
        reporter = reporters.get(color_by)
        if reporter is None:
            known = ", ".join(sorted(reporters)) or "none"
            raise ConfigError(
                f"world_view: color_by {color_by!r} is not an agent reporter of the world "
                f"(its agent reporters: {known})"
            )
        color_by = reporter(world)
    if isinstance(color_by, Mapping):
        missing = [a for a in positions if a not in color_by]
        if missing:
            raise ConfigError(f"world_view: color_by has no value for agent {missing[0]!r}")
        return [color_by[a] for a in positions]
    values = list(color_by)
    if len(values) != len(order):
        raise ConfigError(f"world_view: color_by has {len(values)} values for {len(order)} agents")
    by_agent = dict(zip(order, values, strict=True))
    return [by_agent.get(a) for a in positions]


def _from_frame(
    frame: Any, color_by: Any, step: int | None, run_id: str | None, size: tuple[int, int] | None
) -> tuple[dict[str, Cell], list[Any] | None, tuple[int, int], str | None]:
    """Positions and values of one step of an ``agent_vars`` frame (pandas or polars)."""
    import polars as pl

    df = frame if isinstance(frame, pl.DataFrame) else pl.from_pandas(frame)
    missing = [c for c in ("step", "agent_id", "x", "y") if c not in df.columns]
    if missing:
        raise ConfigError(
            f"world_view: agent_vars has no {', '.join(missing)} column (it has "
            f"{', '.join(df.columns) or 'none'}); the world needs x and y agent reporters"
        )
    note = None
    if "run_id" in df.columns:
        ids = sorted(str(i) for i in df["run_id"].drop_nulls().unique().to_list())
        if run_id is None and len(ids) > 1:
            run_id, note = ids[0], f"run {ids[0]} (first of {len(ids)})"
        if run_id is not None:
            if run_id not in ids:
                raise ConfigError(f"world_view: run_id {run_id!r} is not in the data")
            df = df.filter(pl.col("run_id") == run_id)
    if df.height == 0:
        raise ConfigError("world_view: agent_vars has no rows")
    steps = df["step"]
    at = int(steps.max()) if step is None else int(step)
    rows = df.filter(pl.col("step") == at)
    if rows.height == 0:
        raise ConfigError(
            f"world_view: step {at} is not in agent_vars (steps {steps.min()}..{steps.max()})"
        )
    rows = rows.filter(pl.col("x").is_not_null() & pl.col("y").is_not_null())
    ids = [str(a) for a in rows["agent_id"].to_list()]
    cells = zip(rows["x"].cast(pl.Int64).to_list(), rows["y"].cast(pl.Int64).to_list(), strict=True)
    positions = dict(zip(ids, cells, strict=True))
    values: list[Any] | None = None
    if isinstance(color_by, str):
        if color_by not in rows.columns:
            raise ConfigError(
                f"world_view: color_by {color_by!r} is not a column of agent_vars (it has "
                f"{', '.join(rows.columns)})"
            )
        values = rows[color_by].to_list()
    elif isinstance(color_by, Mapping):
        values = [color_by.get(a) for a in ids]
    elif color_by is not None:
        values = list(color_by)
    if size is None:  # the whole run's extent, so frames of one run share one grid
        size = (int(df["x"].max()) + 1, int(df["y"].max()) + 1)
    label = f"step {at}"
    return positions, values, size, f"{note}, {label}" if note else label


# -- drawing ------------------------------------------------------------------------------------
def _slots(n: int) -> list[tuple[float, float]]:
    """Where ``n`` agents sit inside one cell: a centred k x k lattice filled row by row."""
    k = math.ceil(math.sqrt(n))
    step = 1.0 / k
    return [((i % k + 0.5) * step - 0.5, 0.5 - (i // k + 0.5) * step) for i in range(n)]


def _draw(
    positions: dict[str, Cell],
    values: list[Any] | None,
    w: int,
    h: int,
    ax: Any,
    categorical: bool | None,
    cmap: str,
    width: str | float,
    title: str | None,
    color_by: Any,
) -> Any:
    import numpy as np

    if w < 1 or h < 1:
        raise ConfigError(f"world_view: a grid is at least 1x1, not {w}x{h}")
    per_cell: dict[Cell, list[int]] = {}
    for i, cell in enumerate(positions.values()):
        per_cell.setdefault(cell, []).append(i)
    crowd = max((len(v) for v in per_cell.values()), default=1)
    xs = np.zeros(len(positions))
    ys = np.zeros(len(positions))
    for (x, y), members in per_cell.items():
        for i, (dx, dy) in zip(members, _slots(len(members)), strict=True):
            xs[i], ys[i] = x + dx, y + dy
    label = color_by if isinstance(color_by, str) else None
    with paper_style():
        if ax is None:
            # A Figure without pyplot: no backend to pick, nothing kept open, and a notebook
            # shows the returned figure once, as it shows the other figures of ``plots``.
            Figure = require("matplotlib.figure").Figure
            fw = figure_width(width)
            legend_room = 0.8 if values is not None else 0.0
            fh = min(8.0, max(1.6, (fw - legend_room) * h / w + 0.35))
            fig = Figure(figsize=(fw, fh), layout="constrained")
            ax = fig.add_subplot()
            freeze_style(fig)
        fig = ax.figure
        ax.set_xlim(-0.5, w - 0.5)
        ax.set_ylim(-0.5, h - 0.5)
        ax.set_aspect("equal")
        for side in ("top", "right"):
            ax.spines[side].set_visible(True)
        if max(w, h) <= MAX_GRIDLINES:
            ax.set_xticks(np.arange(-0.5, w, 1.0), minor=True)
            ax.set_yticks(np.arange(-0.5, h, 1.0), minor=True)
            ax.grid(which="minor", color="0.9", linewidth=0.4)
            ax.tick_params(which="minor", length=0)
        MaxNLocator = require("matplotlib.ticker").MaxNLocator
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
        ax.set_xlabel("x")
        ax.set_ylabel("y")
        # A dot fills most of its slot: the axes' width in points over the cells per side.
        box = ax.get_position()
        pts = fig.get_figwidth() * box.width * 72.0 / max(w, h * box.width / max(box.height, 1e-9))
        diameter = max(1.0, 0.8 * pts / math.ceil(math.sqrt(crowd)))
        s = diameter**2
        if not positions:
            ax.text(0.5, 0.5, "no agents", transform=ax.transAxes, ha="center", color="0.4")
        elif values is None:
            ax.scatter(xs, ys, s=s, color="#0072B2", linewidths=0)
        elif _is_categorical(values, categorical):
            names = [_category(v) for v in values]
            palette = category_colors(sorted(set(names), key=_sort_key), quiet=())
            ax.scatter(xs, ys, s=s, c=[palette[n] for n in names], linewidths=0)
            Patch = require("matplotlib.patches").Patch
            handles = [Patch(facecolor=c, edgecolor="none", label=n) for n, c in palette.items()]
            ax.legend(handles=handles, title=label, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        else:
            numbers = np.array([np.nan if v is None else float(v) for v in values])
            dots = ax.scatter(xs, ys, s=s, c=numbers, cmap=cmap, linewidths=0)
            bar = fig.colorbar(dots, ax=ax, shrink=0.85, pad=0.02)
            if label:
                bar.set_label(label)
            bar.ax.tick_params(labelsize=7.5)
            finite = numbers[np.isfinite(numbers)]
            if finite.size and np.all(finite == np.round(finite)):  # whole numbers: whole ticks
                bar.ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        if title:
            ax.set_title(title)
        return fig


def _is_categorical(values: list[Any], categorical: bool | None) -> bool:
    if categorical is not None:
        return categorical
    for v in values:
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) and not _numpy_number(v):
            return True
    return False


def _numpy_number(v: Any) -> bool:
    kind = getattr(getattr(v, "dtype", None), "kind", None)
    return kind in ("i", "u", "f")


def _category(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _sort_key(name: str) -> tuple[int, float, str]:
    """Numbers in numeric order first, then words in alphabetical order."""
    try:
        return (0, float(name), name)
    except ValueError:
        return (1, 0.0, name)
