"""The grid helper: neighbourhoods against brute force and against Mesa 3, agents, arrays."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from vivarium.errors import ConfigError
from vivarium.worlds.grid import Grid, neighbour_offsets


def _torus_gap(a: int, b: int, n: int) -> int:
    d = abs(a - b) % n
    return min(d, n - d)


def _brute(w, h, torus, cell, moore, radius, include_center):
    """Every cell within the distance, by the distance formula over all cells."""
    x0, y0 = cell
    out = set()
    for x, y in itertools.product(range(w), range(h)):
        dx = _torus_gap(x, x0, w) if torus else abs(x - x0)
        dy = _torus_gap(y, y0, h) if torus else abs(y - y0)
        dist = max(dx, dy) if moore else dx + dy
        if dist <= radius and ((x, y) != (x0, y0) or include_center):
            out.add((x, y))
    return out


SIZES = [(1, 1), (2, 3), (3, 3), (5, 4), (7, 6), (10, 10)]


@pytest.mark.parametrize(("w", "h"), SIZES)
@pytest.mark.parametrize("torus", [True, False])
@pytest.mark.parametrize("moore", [True, False])
@pytest.mark.parametrize("radius", [0, 1, 2, 3])
@pytest.mark.parametrize("include_center", [False, True])
def test_neighbourhood_is_every_cell_within_the_distance(
    w, h, torus, moore, radius, include_center
):
    grid = Grid(w, h, torus=torus)
    for cell in itertools.product(range(w), range(h)):
        hood = grid.neighbourhood(cell, moore=moore, radius=radius, include_center=include_center)
        assert len(hood) == len(set(hood)), (cell, hood)  # each cell once
        assert set(hood) == _brute(w, h, torus, cell, moore, radius, include_center), cell


def test_known_neighbourhoods_and_order():
    grid = Grid(5, 4)
    # Torus corner: x wraps to 4, y wraps to 3; offsets dx-major from (-1, -1).
    assert grid.neighbourhood((0, 0)) == [
        (4, 3), (4, 0), (4, 1), (0, 3), (0, 1), (1, 3), (1, 0), (1, 1)
    ]  # fmt: skip
    assert grid.neighbourhood((0, 0), moore=False) == [(4, 0), (0, 3), (0, 1), (1, 0)]
    bounded = Grid(5, 4, torus=False)
    assert bounded.neighbourhood((0, 0)) == [(0, 1), (1, 0), (1, 1)]
    assert bounded.neighbourhood((4, 3), moore=False) == [(3, 3), (4, 2)]
    assert bounded.neighbourhood((2, 2), include_center=True)[4] == (2, 2)
    # A cell given off a torus is wrapped; the list handed out is the caller's own.
    hood = grid.neighbourhood((5, -1))
    assert hood == grid.neighbourhood((0, 3))
    hood.clear()
    assert len(grid.neighbourhood((0, 3))) == 8
    assert grid.neighborhood((1, 1)) == grid.neighbourhood((1, 1))


@pytest.mark.parametrize("torus", [True, False])
@pytest.mark.parametrize("moore", [True, False])
@pytest.mark.parametrize("radius", [1, 2])
def test_neighbourhoods_agree_with_mesa(torus, moore, radius):
    discrete = pytest.importorskip("mesa.discrete_space")
    kind = discrete.OrthogonalMooreGrid if moore else discrete.OrthogonalVonNeumannGrid
    w, h = 7, 5
    theirs = kind((w, h), torus=torus, random=random.Random(0))
    ours = Grid(w, h, torus=torus)
    for cell in [(0, 0), (6, 4), (3, 2), (0, 2), (6, 0), (1, 4)]:
        for center in (False, True):
            mesa_cells = {
                c.coordinate
                for c in theirs[cell].get_neighborhood(radius=radius, include_center=center)
            }
            ours_cells = set(ours.neighbourhood(cell, moore, radius, center))
            assert ours_cells == mesa_cells, (cell, center)


def test_offsets_match_the_neighbourhood_order():
    assert neighbour_offsets().tolist() == [
        [-1, -1], [-1, 0], [-1, 1], [0, -1], [0, 1], [1, -1], [1, 0], [1, 1]
    ]  # fmt: skip
    assert neighbour_offsets(moore=False).tolist() == [[-1, 0], [0, -1], [0, 1], [1, 0]]
    assert neighbour_offsets(moore=False, radius=2).shape == (12, 2)
    assert neighbour_offsets(radius=2, include_center=True).shape == (25, 2)
    assert neighbour_offsets(radius=0).shape == (0, 2)
    grid = Grid(9, 9)
    centre = (4, 4)
    for moore in (True, False):
        expected = [(4 + dx, 4 + dy) for dx, dy in neighbour_offsets(moore, 2).tolist()]
        assert grid.neighbourhood(centre, moore, 2) == expected


def test_wrap_inside_and_neighbour_table():
    torus, bounded = Grid(4, 3), Grid(4, 3, torus=False)
    xs, ys = np.array([-1, 4, 2, 9]), np.array([3, -2, 1, 0])
    wx, wy = torus.wrap(xs, ys)
    assert wx.tolist() == [3, 0, 2, 1] and wy.tolist() == [0, 1, 1, 0]
    cx, cy = bounded.wrap(xs, ys)
    assert cx.tolist() == [0, 3, 2, 3] and cy.tolist() == [2, 0, 1, 0]
    assert torus.inside(xs, ys).tolist() == [True] * 4
    assert bounded.inside(xs, ys).tolist() == [False, False, True, False]
    for grid in (torus, bounded):
        table = grid.neighbour_table(moore=False)
        assert table.shape == (12, 4)
        for i, (x, y) in enumerate(grid.cells()):
            row = [int(j) for j in table[i] if j >= 0]
            assert [(j % 4, j // 4) for j in row] == grid.neighbourhood((x, y), moore=False)
    assert (bounded.neighbour_table()[0] == -1).sum() == 5  # a corner has 3 of 8


def test_agents_place_move_remove_in_order():
    grid = Grid(3, 3)
    grid.place("a", (1, 1))
    grid.place("b", (1, 1))
    grid.place("c", (0, 0))
    assert grid.agents_at((1, 1)) == ["a", "b"]
    grid.move("a", (0, 0))
    assert grid.agents_at((0, 0)) == ["c", "a"]
    assert grid.agents_at((1, 1)) == ["b"]
    grid.move("b", (1, 1))  # moving onto its own cell puts it last, still there
    assert grid.agents_at((1, 1)) == ["b"]
    assert grid.cell_of("a") == (0, 0)
    assert grid.positions() == {"a": (0, 0), "b": (1, 1), "c": (0, 0)}
    assert list(grid.positions()) == ["a", "b", "c"]  # placement order
    assert grid.agents_around((1, 1)) == ["c", "a"]
    assert grid.agents_around((1, 1), include_center=True) == ["c", "a", "b"]
    assert grid.remove("c") == (0, 0)
    assert "c" not in grid and len(grid) == 2
    grid.move("a", (4, 5))  # wraps on a torus to (1, 2)
    assert grid.cell_of("a") == (1, 2)
    assert grid.is_empty((0, 0)) and not grid.is_empty((1, 2))
    expected = [(x, y) for y in range(3) for x in range(3) if (x, y) not in {(1, 1), (1, 2)}]
    assert grid.empty_cells() == expected


def test_random_empty_cell_is_uniform_over_empties_and_seeded():
    grid = Grid(4, 4)
    rng = random.Random(3)
    taken = set()
    for i in range(12):  # fill 12 of 16 cells through random_empty_cell
        cell = grid.random_empty_cell(rng)
        assert cell not in taken
        grid.place(f"a{i}", cell)
        taken.add(cell)
    empties = set(grid.empty_cells())
    assert len(empties) == 4 and not (empties & taken)
    counts = {c: 0 for c in empties}
    rng = random.Random(5)
    for _ in range(4000):
        counts[grid.random_empty_cell(rng)] += 1
    assert set(counts) == empties
    assert all(850 < n < 1150 for n in counts.values()), counts  # 1000 each expected
    # numpy generators too; same seed and moves -> same draws.
    draws = [grid.random_empty_cell(np.random.default_rng(7)) for _ in range(2)]
    assert draws[0] == draws[1] and draws[0] in empties

    def replay(seed):
        g, r = Grid(6, 6), random.Random(seed)
        for i in range(30):
            g.place(f"a{i}", g.random_empty_cell(r))
            if i % 3 == 0:
                g.move(f"a{i // 2}", g.random_empty_cell(r))
        return g.positions()

    assert replay(1) == replay(1)
    assert replay(1) != replay(2)
    for cell in itertools.product(range(4), range(4)):
        grid.place(f"x{cell}", cell) if grid.is_empty(cell) else None
    with pytest.raises(ConfigError, match="no empty cell"):
        grid.random_empty_cell(rng)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Grid(0, 3), "width must be a whole number >= 1"),
        (lambda: Grid(3, 2.5), "height must be a whole number >= 1"),
        (lambda: Grid(3, 3, torus="yes"), "torus must be True or False"),
        (lambda: Grid(3, 3, torus=False).place("a", (3, 0)), r"off the 3x3 grid"),
        (lambda: Grid(3, 3).place("a", (1,)), r"a cell is \(x, y\)"),
        (lambda: Grid(3, 3).place("a", (1.5, 0)), "whole numbers"),
        (lambda: Grid(3, 3).neighbourhood((0, 0), radius=-1), "radius"),
        (lambda: Grid(3, 3).move("a", (0, 0)), "not on the grid"),
        (lambda: Grid(3, 3).remove("a"), "not on the grid"),
        (lambda: Grid(3, 3).cell_of("a"), "not on the grid"),
    ],
)
def test_bad_input_is_one_line(make, message):
    with pytest.raises(ConfigError, match=message) as info:
        make()
    assert "\n" not in str(info.value)


def test_placing_twice_is_refused():
    grid = Grid(2, 2)
    grid.place("a", (0, 0))
    with pytest.raises(ConfigError, match="already at"):
        grid.place("a", (1, 1))
    grid.place("b", (np.int64(1), np.int64(1)))  # numpy ints are cells too
    assert grid.cell_of("b") == (1, 1) and type(grid.cell_of("b")[0]) is int


def test_snapshot_restores_order_and_future_draws():
    import copy
    import json
    import pickle

    grid, rng = Grid(5, 3, torus=False), random.Random(4)
    for i in range(9):
        grid.place(f"a{i}", grid.random_empty_cell(rng))
    for i in range(0, 9, 2):
        grid.move(f"a{i}", grid.cell_of("a1"))  # a crowded cell, arrival order != placement
    state = json.loads(json.dumps(grid.snapshot()))
    for other in (Grid.from_snapshot(state), copy.deepcopy(grid), pickle.loads(pickle.dumps(grid))):
        assert other.positions() == grid.positions()
        assert list(other.positions()) == list(grid.positions())
        assert other.agents_at(grid.cell_of("a1")) == grid.agents_at(grid.cell_of("a1"))
        assert other.empty_cells() == grid.empty_cells() and other.torus is False
        a, b = random.Random(9), random.Random(9)
        assert [other.random_empty_cell(a) for _ in range(5)] == [
            grid.random_empty_cell(b) for _ in range(5)
        ]
    with pytest.raises(ConfigError, match="not a grid snapshot"):
        Grid.from_snapshot({"size": [2, 2]})
