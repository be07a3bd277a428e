"""A small 2-D grid for worlds whose agents live on cells: Mesa's MultiGrid, kept deterministic.

A cell is ``(x, y)`` with ``0 <= x < width`` and ``0 <= y < height``. Several agents may share a
cell (as in Mesa's ``MultiGrid``); ``agents_at`` lists them in the order they arrived. On a torus
(the default) the edges wrap, so a cell given out of range is wrapped onto the grid; on a
bounded grid (``torus=False``) it is refused with one line, and neighbourhoods stop at the
edges.

Neighbourhoods are Moore (Chebyshev distance, 8 cells at radius 1) or von Neumann (Manhattan
distance, 4 cells), of any radius, with or without the centre. They are computed once per cell
and kept, so a per-agent step pays a dictionary look-up and a list copy. On a small torus a
wrapped offset can land on a cell twice or on the centre: each cell is listed once, and the
centre only with ``include_center=True`` (Mesa 3's ``OrthogonalMooreGrid`` and
``OrthogonalVonNeumannGrid`` give the same sets).

Everything is ordered, never hashed into an order: neighbourhoods in offset order (``dx`` from
``-r`` to ``r``, then ``dy``, as Mesa's classic grids), ``empty_cells()`` row by row (``y``, then
``x``), ``positions()`` in placement order, and ``random_empty_cell(rng)`` draws from a list
whose order depends only on the moves made, so the same seed gives the same run.

``snapshot()`` / ``Grid.from_snapshot`` save and restore the whole state (JSON-able) for a
world's checkpoint, draws included.

For worlds that keep their state in numpy arrays (the batch protocol), ``neighbour_offsets``
gives the offsets as an array and ``Grid.wrap`` / ``Grid.inside`` move whole columns of
coordinates onto the grid::

    offsets = neighbour_offsets(moore=True)              # (8, 2)
    pick = rng.integers(len(offsets), size=n)
    xs, ys = grid.wrap(xs + offsets[pick, 0], ys + offsets[pick, 1])
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from vivarium.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

Cell = tuple[int, int]

__all__ = ["Cell", "Grid", "neighbour_offsets"]


def _offsets(moore: bool, radius: int, include_center: bool) -> list[Cell]:
    """The ``(dx, dy)`` within ``radius`` (Chebyshev if ``moore``, else Manhattan), dx-major."""
    if not isinstance(radius, int) or isinstance(radius, bool) or radius < 0:
        raise ConfigError(f"grid: radius must be a whole number >= 0, not {radius!r}")
    span = range(-radius, radius + 1)
    return [
        (dx, dy)
        for dx in span
        for dy in span
        if (moore or abs(dx) + abs(dy) <= radius) and (include_center or dx or dy)
    ]


def neighbour_offsets(
    moore: bool = True, radius: int = 1, include_center: bool = False
) -> np.ndarray:
    """The neighbourhood's offsets as an ``(k, 2)`` int array of ``(dx, dy)`` rows.

    In the order ``Grid.neighbourhood`` lists cells (``dx`` from ``-radius`` up, then ``dy``),
    so a batch world that draws an index into it moves agents as a per-agent world drawing
    from the neighbourhood list would (on a grid large enough that no offset wraps twice).

    Args:
        moore: Moore (Chebyshev distance) if True, von Neumann (Manhattan distance) if False.
        radius: How far the neighbourhood reaches (0 or more).
        include_center: Include ``(0, 0)``.

    Returns:
        The offsets, dtype int64.
    """
    import numpy as np

    return np.array(_offsets(moore, radius, include_center), dtype=np.int64).reshape(-1, 2)


class Grid:
    """Cells ``(x, y)`` holding agent ids, with cached neighbourhoods; a torus by default.

    Attributes:
        width: Cells along x.
        height: Cells along y.
        torus: Whether the edges wrap.
    """

    __slots__ = (
        "_agents",
        "_cells",
        "_empty",
        "_empty_at",
        "_hoods",
        "_where",
        "height",
        "torus",
        "width",
    )

    def __init__(self, width: int, height: int, torus: bool = True) -> None:
        """An empty ``width`` x ``height`` grid.

        Args:
            width: Cells along x (a whole number >= 1).
            height: Cells along y (a whole number >= 1).
            torus: Wrap the edges (True) or stop at them (False).

        Raises:
            ConfigError: A size is not a whole number >= 1, or ``torus`` is not a bool.
        """
        for name, value in (("width", width), ("height", height)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"grid: {name} must be a whole number >= 1, not {value!r}")
        if not isinstance(torus, bool):
            raise ConfigError(f"grid: torus must be True or False, not {torus!r}")
        self.width = width
        self.height = height
        self.torus = torus
        n = width * height
        # Cell index i = y * width + x: row-major, so index order is empty_cells() order.
        self._cells: list[Cell] = [(i % width, i // width) for i in range(n)]
        self._agents: list[list[str]] = [[] for _ in range(n)]
        self._where: dict[str, int] = {}  # agent id -> cell index, in placement order
        # The empty cells as a list (O(1) add, remove and draw) and each cell's slot in it.
        self._empty: list[int] = list(range(n))
        self._empty_at: list[int] = list(range(n))
        self._hoods: dict[tuple[bool, int, bool], list[tuple[Cell, ...] | None]] = {}

    def __repr__(self) -> str:
        kind = "torus" if self.torus else "bounded"
        return f"Grid({self.width}x{self.height} {kind}, {len(self._where)} agents)"

    def __len__(self) -> int:
        """The number of agents on the grid."""
        return len(self._where)

    def __contains__(self, agent_id: object) -> bool:
        """Whether ``agent_id`` is on the grid."""
        return agent_id in self._where

    # -- cells ------------------------------------------------------------------------------
    def _index(self, cell: Any) -> int:
        """The index of ``cell``, wrapped on a torus; one line when it is not a cell here."""
        try:
            x, y = cell
        except (TypeError, ValueError):
            raise ConfigError(f"grid: a cell is (x, y), not {cell!r}") from None
        if type(x) is not int or type(y) is not int:  # numpy ints are fine, bools are not
            try:
                x, y = _whole(x), _whole(y)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"grid: a cell is (x, y) of whole numbers, not {cell!r}"
                ) from None
        w, h = self.width, self.height
        if 0 <= x < w and 0 <= y < h:
            return y * w + x
        if self.torus:
            return (y % h) * w + x % w
        raise ConfigError(
            f"grid: cell {cell!r} is off the {w}x{h} grid (x in 0..{w - 1}, y in 0..{h - 1})"
        )

    def cells(self) -> list[Cell]:
        """Every cell, row by row (``y``, then ``x``)."""
        return list(self._cells)

    def contains_cell(self, cell: Cell) -> bool:
        """Whether ``cell`` lies on the grid as given (no wrapping)."""
        x, y = cell
        return 0 <= x < self.width and 0 <= y < self.height

    def neighbourhood(
        self, cell: Cell, moore: bool = True, radius: int = 1, include_center: bool = False
    ) -> list[Cell]:
        """The cells around ``cell``, each once, in offset order (computed once, then kept).

        Args:
            cell: The centre (wrapped on a torus).
            moore: Moore (Chebyshev distance <= radius) if True, von Neumann (Manhattan) if
                False.
            radius: How far it reaches (0 or more).
            include_center: List ``cell`` itself (first in offset order is ``(-r, -r)``; the
                centre comes at its place ``(0, 0)``).

        Returns:
            A new list of cells (the caller may change it).
        """
        i = self._index(cell)
        key = (bool(moore), radius, bool(include_center))
        table = self._hoods.get(key)
        if table is None:
            _offsets(moore, radius, include_center)  # refuses a bad radius before caching
            table = self._hoods[key] = [None] * len(self._cells)
        hood = table[i]
        if hood is None:
            hood = table[i] = self._compute(i, key)
        return list(hood)

    # The British and American spellings, as users of Mesa type the latter.
    neighborhood = neighbourhood

    def _compute(self, i: int, key: tuple[bool, int, bool]) -> tuple[Cell, ...]:
        moore, radius, include_center = key
        w, h, torus = self.width, self.height, self.torus
        x0, y0 = self._cells[i]
        seen: dict[int, None] = {}
        for dx, dy in _offsets(moore, radius, True):
            x, y = x0 + dx, y0 + dy
            if torus:
                x, y = x % w, y % h
            elif not (0 <= x < w and 0 <= y < h):
                continue
            seen[y * w + x] = None
        if not include_center:
            seen.pop(i, None)
        return tuple(self._cells[j] for j in seen)

    # -- agents -----------------------------------------------------------------------------
    def _fill(self, j: int) -> None:
        """Cell ``j`` got its first agent: take it out of the empty list (swap with the last)."""
        slot = self._empty_at[j]
        last = self._empty.pop()
        if last != j:
            self._empty[slot] = last
            self._empty_at[last] = slot
        self._empty_at[j] = -1

    def _vacate(self, j: int) -> None:
        self._empty_at[j] = len(self._empty)
        self._empty.append(j)

    def place(self, agent_id: str, cell: Cell) -> None:
        """Put ``agent_id`` on ``cell`` (after any agents already there).

        Raises:
            ConfigError: The agent is already on the grid (use ``move``), or the cell is off a
                bounded grid.
        """
        if agent_id in self._where:
            raise ConfigError(
                f"grid: agent {agent_id!r} is already at {self._cells[self._where[agent_id]]}; "
                "use move"
            )
        j = self._index(cell)
        here = self._agents[j]
        if not here:
            self._fill(j)
        here.append(agent_id)
        self._where[agent_id] = j

    def move(self, agent_id: str, cell: Cell) -> None:
        """Move ``agent_id`` to ``cell`` (it joins the end of the cell's list, even if it was there).

        Raises:
            ConfigError: The agent is not on the grid, or the cell is off a bounded grid.
        """
        old = self._where.get(agent_id)
        if old is None:
            raise ConfigError(f"grid: agent {agent_id!r} is not on the grid; place it first")
        j = self._index(cell)
        there = self._agents[old]
        there.remove(agent_id)
        if not there:
            self._vacate(old)
        here = self._agents[j]
        if not here:
            self._fill(j)
        here.append(agent_id)
        self._where[agent_id] = j

    def remove(self, agent_id: str) -> Cell:
        """Take ``agent_id`` off the grid; returns the cell it was on.

        Raises:
            ConfigError: The agent is not on the grid.
        """
        old = self._where.pop(agent_id, None)
        if old is None:
            raise ConfigError(f"grid: agent {agent_id!r} is not on the grid")
        there = self._agents[old]
        there.remove(agent_id)
        if not there:
            self._vacate(old)
        return self._cells[old]

    def cell_of(self, agent_id: str) -> Cell:
        """The cell ``agent_id`` is on.

        Raises:
            ConfigError: The agent is not on the grid.
        """
        j = self._where.get(agent_id)
        if j is None:
            raise ConfigError(f"grid: agent {agent_id!r} is not on the grid")
        return self._cells[j]

    def agents_at(self, cell: Cell) -> list[str]:
        """The agents on ``cell``, in the order they arrived (a new list)."""
        return list(self._agents[self._index(cell)])

    def agents_around(
        self, cell: Cell, moore: bool = True, radius: int = 1, include_center: bool = False
    ) -> list[str]:
        """The agents on the cells of ``cell``'s neighbourhood, cell by cell in offset order."""
        agents = self._agents
        w = self.width
        hood = self.neighbourhood(cell, moore, radius, include_center)
        return [a for x, y in hood for a in agents[y * w + x]]

    def is_empty(self, cell: Cell) -> bool:
        """Whether no agent is on ``cell``."""
        return not self._agents[self._index(cell)]

    def empty_cells(self) -> list[Cell]:
        """The cells with no agent, row by row (``y``, then ``x``)."""
        cells = self._cells
        return [cells[j] for j in sorted(self._empty)]

    def random_empty_cell(self, rng: Any) -> Cell:
        """A uniformly drawn empty cell.

        Args:
            rng: A ``random.Random`` (one ``randrange`` call) or a numpy ``Generator`` (one
                ``integers`` call). The draw depends only on the generator and on the moves made
                so far, so a seeded run repeats.

        Raises:
            ConfigError: Every cell is taken.
        """
        n = len(self._empty)
        if n == 0:
            raise ConfigError(f"grid: no empty cell left on the {self.width}x{self.height} grid")
        k = int(rng.integers(n)) if hasattr(rng, "integers") else rng.randrange(n)
        return self._cells[self._empty[k]]

    def positions(self) -> dict[str, Cell]:
        """Each agent's cell, in placement order (a new dict)."""
        cells = self._cells
        return {a: cells[j] for a, j in self._where.items()}

    def place_all(self, placements: Iterable[tuple[str, Cell]]) -> None:
        """``place`` each ``(agent_id, cell)`` in order."""
        for agent_id, cell in placements:
            self.place(agent_id, cell)

    # -- checkpoints -------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The grid's whole state as JSON-able data, for a world's checkpoint.

        It keeps what later draws depend on: each cell's arrival order, the placement order
        and the order of the empty-cell list, so a run resumed from it draws the same cells.
        """
        cells = self._cells
        return {
            "size": [self.width, self.height, self.torus],
            "agents": [[a, *cells[j]] for a, j in self._where.items()],
            "cells": [[j, list(ids)] for j, ids in enumerate(self._agents) if ids],
            "empty": list(self._empty),
        }

    @classmethod
    def from_snapshot(cls, state: dict[str, Any]) -> Grid:
        """The grid ``snapshot`` saved.

        Raises:
            ConfigError: The state is not a grid snapshot (one line).
        """
        try:
            width, height, torus = state["size"]
            grid = cls(int(width), int(height), bool(torus))
            for agent, x, y in state["agents"]:
                grid._where[str(agent)] = grid._index((x, y))
            for j, ids in state["cells"]:
                grid._agents[j] = [str(a) for a in ids]
            grid._empty = [int(j) for j in state["empty"]]
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ConfigError(f"grid: not a grid snapshot ({type(exc).__name__}: {exc})") from None
        grid._empty_at = [-1] * len(grid._cells)
        for slot, j in enumerate(grid._empty):
            grid._empty_at[j] = slot
        return grid

    # -- arrays -----------------------------------------------------------------------------
    def wrap(self, xs: Any, ys: Any) -> tuple[np.ndarray, np.ndarray]:
        """Coordinates moved onto the grid: wrapped on a torus, clipped to the edge if bounded.

        On a bounded grid a clipped move stays at the edge; use ``inside`` first to refuse
        moves off the grid instead.

        Args:
            xs: x coordinates (anything numpy turns into an int array).
            ys: y coordinates, the same shape.

        Returns:
            ``(xs, ys)`` as int64 arrays on the grid.
        """
        import numpy as np

        xs = np.asarray(xs, dtype=np.int64)
        ys = np.asarray(ys, dtype=np.int64)
        if self.torus:
            return np.mod(xs, self.width), np.mod(ys, self.height)
        return np.clip(xs, 0, self.width - 1), np.clip(ys, 0, self.height - 1)

    def inside(self, xs: Any, ys: Any) -> np.ndarray:
        """A boolean array: which ``(x, y)`` lie on the grid as given (all True on a torus)."""
        import numpy as np

        xs = np.asarray(xs)
        ys = np.asarray(ys)
        if self.torus:
            return np.ones(np.broadcast(xs, ys).shape, dtype=bool)
        return (xs >= 0) & (xs < self.width) & (ys >= 0) & (ys < self.height)

    def neighbour_table(
        self, moore: bool = True, radius: int = 1, include_center: bool = False
    ) -> np.ndarray:
        """Every cell's neighbourhood as cell indices: an ``(n_cells, k)`` int64 array.

        Row ``y * width + x`` lists the neighbours of ``(x, y)`` as indices ``y * width + x``, in
        ``neighbourhood`` order, padded with -1 where a bounded grid's edge (or a small torus's
        repeats) leaves fewer than ``k``. For batch worlds that count neighbours with numpy:
        mask the padding (``table >= 0``) before indexing with it, since numpy reads -1 as the
        last cell (``np.where(table >= 0, values[table], 0)``).
        """
        import numpy as np

        k = len(_offsets(moore, radius, include_center))
        out = np.full((len(self._cells), k), -1, dtype=np.int64)
        w = self.width
        for i, cell in enumerate(self._cells):
            hood = self.neighbourhood(cell, moore, radius, include_center)
            out[i, : len(hood)] = [y * w + x for x, y in hood]
        return out


def _whole(value: Any) -> int:
    """``value`` as an int if it is a whole number (numpy ints too); else ValueError."""
    if isinstance(value, bool):
        raise ValueError(value)
    index = getattr(value, "__index__", None)
    if index is None:
        raise TypeError(value)
    return int(index())
