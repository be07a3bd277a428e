"""Mesa's Boltzmann wealth (grid) and Schelling models, written with Vivarium's public API.

Each model comes twice, as a user would write it:

- **per agent**: a plain-Python world (``observe``/``apply``/``state_digest`` and an
  ``ActionRegistry``) and an ``AgentPolicy`` whose decisions are actions (``move(to, give_to)``,
  ``move(to)``), exactly Mesa's rules in Mesa's order (sequential, random order each step);
- **batched**: a world that keeps its state in numpy arrays (``BatchWorld``) and a policy class
  that decides every agent's step at once (``BatchPolicy``): the policy draws each agent's
  random choices as arrays, the world applies the rule to all agents at once (the simultaneous
  version of the same rule) and records where each agent went in the ``result`` column.

The two paths draw differently (and the batched one is simultaneous), so their traces differ;
their statistics agree (``tests/test_own_models.py``). The benchmark
(``benchmarks/own_models_vs_mesa.py``) and the tests import this module; the notebook
``07_your_own_model.ipynb`` writes its own from scratch.

Cells are numbered ``x + y * width``. As in Mesa's examples the grids do not wrap unless
``torus=True`` (Mesa's ``OrthogonalMooreGrid`` default).
"""

from __future__ import annotations

import hashlib
import json
import operator
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from vivarium.types import ActionRequest, ActionResult
from vivarium.worlds.base import BatchDecisions, BatchOutcomes
from vivarium.worlds.registry import ActionError, ActionRegistry, NoArguments

_OK = ActionResult.ok()


# -- shared helpers ------------------------------------------------------------------------------
def moore_neighbours(width: int, height: int, radius: int, torus: bool) -> list[tuple[int, ...]]:
    """Each cell's Moore neighbours (centre excluded) as cell numbers, in Mesa's offset order."""
    out: list[tuple[int, ...]] = []
    offsets = [
        (dx, dy)
        for dx in range(-radius, radius + 1)
        for dy in range(-radius, radius + 1)
        if (dx, dy) != (0, 0)
    ]
    for y in range(height):
        for x in range(width):
            cells: list[int] = []
            for dx, dy in offsets:
                nx, ny = x + dx, y + dy
                if torus:
                    nx, ny = nx % width, ny % height
                elif not (0 <= nx < width and 0 <= ny < height):
                    continue
                cell = nx + ny * width
                if cell not in cells:
                    cells.append(cell)
            out.append(tuple(cells))
    return out


def neighbour_table(width: int, height: int, torus: bool) -> tuple[np.ndarray, np.ndarray]:
    """Every cell's Moore neighbours (radius 1) as a (cells, 8) array, and how many each has.

    Row ``c`` lists the neighbours of cell ``c`` in ``moore_neighbours`` order, then -1s.
    """
    if torus and min(width, height) < 3:  # wrapped offsets repeat cells: dedupe the slow way
        lists = moore_neighbours(width, height, 1, torus)
        table = np.full((width * height, 8), -1, dtype=np.int64)
        for c, cells in enumerate(lists):
            table[c, : len(cells)] = cells
        return table, np.array([len(c) for c in lists], dtype=np.int64)
    x = np.tile(np.arange(width), height)[:, None]
    y = np.repeat(np.arange(height), width)[:, None]
    dx = np.array([d for d in (-1, 0, 1) for _ in range(3)])
    dy = np.array([d for _ in range(3) for d in (-1, 0, 1)])
    keep = (dx != 0) | (dy != 0)
    nx, ny = x + dx[keep], y + dy[keep]
    if torus:
        nx, ny, valid = nx % width, ny % height, np.ones(nx.shape, dtype=bool)
    else:
        valid = (nx >= 0) & (nx < width) & (ny >= 0) & (ny < height)
    cand = np.where(valid, nx + ny * width, -1)
    first = np.argsort(~valid, axis=1, kind="stable")  # valid cells first, in order
    return np.take_along_axis(cand, first, axis=1), valid.sum(axis=1)


def _quoted_head(text: str) -> str:
    """``text`` as a JSON string literal without its closing quote."""
    return json.dumps(text, ensure_ascii=False)[:-1]


def gini(values: Any) -> float:
    """The Gini coefficient as Mesa's example computes it (0 = equal wealth)."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n, total = len(x), x.sum()
    if n == 0 or total == 0:
        return 0.0
    b = float((x * (n - np.arange(n))).sum()) / (n * total)
    return 1 + 1 / n - 2 * b


class _Rows:
    """Row numbers of a batch's agents, cached while the engine passes the same list."""

    agent_ids: tuple[str, ...]
    index: dict[str, int]
    _last: tuple[Sequence[str] | None, np.ndarray] = (None, np.empty(0, dtype=np.int64))

    def _rows(self, agent_ids: Sequence[str]) -> np.ndarray:
        if self._last[0] is not agent_ids:
            rows = np.array(operator.itemgetter(*agent_ids)(self.index), dtype=np.int64)
            self._last = (agent_ids, rows.reshape(-1))
        return self._last[1]


def _seed_of(seed: int | None) -> int:
    return 0 if seed is None else int(seed)


# ================================================================================================
# Boltzmann wealth on a grid
# ================================================================================================
# No docstrings on argument models: pydantic would put them in the tools' JSON schema.
class MoveGiveArgs(BaseModel):  # noqa: D101
    model_config = ConfigDict(extra="forbid")
    to: int = Field(description="A neighbouring cell to move to (see `neighbours`).")
    give_to: str | None = Field(
        default=None, description="An agent in that cell to give one unit of wealth to."
    )


class GiveToArgs(BaseModel):  # noqa: D101
    model_config = ConfigDict(extra="forbid")
    to: str = Field(description="An agent in your cell to give one unit of wealth to.")


def _b_noop(world: Any, request: ActionRequest, args: NoArguments) -> ActionResult:
    return _OK


def _b_move(world: BoltzmannGridWorld, request: ActionRequest, args: MoveGiveArgs) -> ActionResult:
    world.move_and_give(request.agent_id, args.to, args.give_to)
    return _OK


def _b_give(world: BoltzmannGridWorld, request: ActionRequest, args: GiveToArgs) -> ActionResult:
    world.give(request.agent_id, args.to)
    return _OK


def _b_wander(world: Any, request: ActionRequest, args: NoArguments) -> ActionResult:
    raise ActionError("wander is applied in batches only")


BOLTZMANN_GRID_ACTIONS = ActionRegistry(default_tool="move")
BOLTZMANN_GRID_ACTIONS.action("noop", "Stay and do nothing this step.")(_b_noop)
BOLTZMANN_GRID_ACTIONS.action(
    "move",
    "Move to a neighbouring cell, then give one unit of wealth to an agent there (optional).",
    MoveGiveArgs,
)(_b_move)
BOLTZMANN_GRID_ACTIONS.action(
    "give", "Give one unit of wealth to an agent in your cell.", GiveToArgs
)(_b_give)


class BoltzmannGridWorld:
    """Agents on a grid with wealth; Mesa's ``BoltzmannWealth`` as a per-agent world.

    Observation: ``time_step``, ``agent_id``, ``wealth``, ``cell``, ``neighbours`` (the cells
    it may move to), ``occupants`` (every cell's agents, a shared read-only list of lists) and
    ``tools`` (the actions an LLM policy is offered).
    """

    name = "boltzmann_grid"
    registry = BOLTZMANN_GRID_ACTIONS
    model_reporters = {"gini": lambda w: gini(w.wealth)}
    agent_reporters = {
        "wealth": lambda w: w.wealth,
        "x": lambda w: np.array(w.cell) % w.width,
        "y": lambda w: np.array(w.cell) // w.width,
    }

    def __init__(
        self,
        agent_ids: Sequence[str],
        seed: int | None = 0,
        width: int = 10,
        height: int = 10,
        torus: bool = False,
    ) -> None:
        """Place every agent on a random cell (several may share one), with wealth 1."""
        self.agent_ids = tuple(agent_ids)
        self.width, self.height = width, height
        self.index = {a: i for i, a in enumerate(self.agent_ids)}
        self.neighbours = moore_neighbours(width, height, 1, torus)
        rng = random.Random(_seed_of(seed))
        self.cell = [rng.randrange(width * height) for _ in self.agent_ids]
        self.wealth = [1] * len(self.agent_ids)
        self.occupants: list[list[str]] = [[] for _ in range(width * height)]
        for a, c in zip(self.agent_ids, self.cell, strict=True):
            self.occupants[c].append(a)
        self.transfers = 0
        self._tools = ("noop", "move", "give")  # what an LLM policy is offered

    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        """What the agent sees; the lists are shared, not copied (cheap for many agents)."""
        i = self.index[agent_id]
        c = self.cell[i]
        return {
            "time_step": time_step,
            "agent_id": agent_id,
            "wealth": self.wealth[i],
            "cell": c,
            "neighbours": self.neighbours[c],
            "occupants": self.occupants,
            "tools": self._tools,
        }

    def apply(self, request: ActionRequest) -> ActionResult:
        """``move`` by hand when well formed (the common case); anything else via the registry."""
        args = request.arguments
        if request.action_name == "move" and type(args.get("to")) is int and len(args) <= 2:
            give = args.get("give_to")
            if give is None or type(give) is str:
                try:
                    self.move_and_give(request.agent_id, args["to"], give)
                except ActionError as exc:
                    return ActionResult.failed(str(exc))
                return _OK
        return self.registry.dispatch(self, request)

    def state_digest(self) -> str:
        """Transfers and a hash of every agent's cell and wealth."""
        data = np.array([self.cell, self.wealth], dtype=np.int64).tobytes()
        return f"t{self.transfers}:{hashlib.sha256(data).hexdigest()[:16]}"

    def move_and_give(self, agent_id: str, to: int, give_to: str | None) -> None:
        """Mesa's agent step: move to neighbouring cell ``to``, then give to ``give_to``."""
        i = self.index[agent_id]
        here = self.cell[i]
        if to not in self.neighbours[here]:
            raise ActionError(f"cell {to} is not a neighbour of cell {here}")
        self.occupants[here].remove(agent_id)
        self.occupants[to].append(agent_id)
        self.cell[i] = to
        if give_to is not None:
            self.give(agent_id, give_to)

    def give(self, agent_id: str, to: str) -> None:
        """Move one unit of wealth to a cellmate."""
        i, j = self.index[agent_id], self.index.get(to)
        if j is None or j == i or self.cell[j] != self.cell[i]:
            raise ActionError(f"{to} is not another agent in your cell")
        if self.wealth[i] <= 0:
            raise ActionError("nothing to give (wealth 0)")
        self.wealth[i] -= 1
        self.wealth[j] += 1
        self.transfers += 1


class BoltzmannGridPolicy:
    """Mesa's ``MoneyAgent``: a random neighbouring cell, then a random cellmate if wealthy."""

    name = "boltzmann_grid"

    def __init__(self, agent_id: str, seed: int | None = 0) -> None:
        """One agent's policy with its own generator (seeded from the plan)."""
        self.agent_id = agent_id
        self.rng = random.Random(_seed_of(seed))

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """``move(to, give_to)``: the cellmate is drawn among the destination's occupants."""
        draw = self.rng.random  # one C call per draw (``randrange`` costs four times more)
        nb = observation["neighbours"]
        to = nb[int(draw() * len(nb))]
        arguments: dict[str, Any] = {"to": to}
        if observation["wealth"] > 0:
            mates = [a for a in observation["occupants"][to] if a != agent_id]
            if mates:
                arguments["give_to"] = mates[int(draw() * len(mates))]
        return ActionRequest.trusted(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name="move",
            arguments=arguments,
            reasoning=None,
            metadata={},
        )


# -- batched ---------------------------------------------------------------------------------------
BATCH_BOLTZMANN_ACTIONS = BOLTZMANN_GRID_ACTIONS.extend()
BATCH_BOLTZMANN_ACTIONS.action(
    "wander",
    "Move to a random neighbouring cell, then give one unit to a random agent there if you can.",
)(_b_wander)


class BatchBoltzmannWorld(_Rows):
    """The grid Boltzmann model with its state in numpy arrays (a ``BatchWorld``).

    ``apply_batch`` applies a whole step of ``wander`` decisions at once, with Mesa's sequential
    rule: the agent at commit position k moves to the neighbour its draw picks and, if it has
    wealth, gives one unit to the cellmate its second draw picks among those there at its turn
    (agents before it that moved in, agents after it not yet gone). Cellmates are found for
    all agents at once with sorted keys, and who can give (``sequential_gives``) in a few
    rounds of array operations. The agents act in the engine's order or, when that is sorted,
    in a random order the policy draws each step (as Mesa's ``shuffle_do``). The ``result``
    column records ``{"give_to": id, "to": cell}`` per agent.
    One agent at a time (``observe``/``apply``) it behaves as ``BoltzmannGridWorld``.
    """

    name = "boltzmann_grid"
    registry = BATCH_BOLTZMANN_ACTIONS
    model_reporters = {"gini": lambda w: gini(w.wealth)}
    agent_reporters = {
        "wealth": lambda w: w.wealth,
        "x": lambda w: w.cell % w.width,
        "y": lambda w: w.cell // w.width,
    }

    def __init__(
        self,
        agent_ids: Sequence[str],
        seed: int | None = 0,
        width: int = 10,
        height: int = 10,
        torus: bool = False,
    ) -> None:
        """Place every agent on a random cell with wealth 1 (numpy generator from ``seed``)."""
        self.agent_ids = tuple(agent_ids)
        n = len(self.agent_ids)
        self.width, self.height = width, height
        self.index = {a: i for i, a in enumerate(self.agent_ids)}
        self.torus = torus
        self._neighbours: list[tuple[int, ...]] | None = None
        self.table, self.n_neighbours = neighbour_table(width, height, torus)
        rng = np.random.default_rng(_seed_of(seed))
        self.cell = rng.integers(0, width * height, size=n)
        self.wealth = np.ones(n, dtype=np.int64)
        self.transfers = 0
        # The result column is a JSON array of each row's JSON text: the two halves of every
        # row's string literal are built once ('"{\\"give_to\\":\\"agent_3\\",' and '\\"to\\":37}"').
        self._give_text = np.array(
            [_quoted_head(f'{{"give_to":"{a}",') for a in self.agent_ids] + ['"{'],
            dtype=object,
        )
        self._to_text = np.array([f'\\"to\\":{c}}}"' for c in range(width * height)], dtype=object)

    @property
    def neighbours(self) -> list[tuple[int, ...]]:
        """Each cell's neighbours as tuples (for the one-agent-at-a-time path; made once)."""
        if self._neighbours is None:
            self._neighbours = moore_neighbours(self.width, self.height, 1, self.torus)
        return self._neighbours

    # -- one agent at a time (LLM or other policies) --------------------------------------------
    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        """As ``BoltzmannGridWorld.observe`` (occupants built on demand: the slow path)."""
        i = self.index[agent_id]
        c = int(self.cell[i])
        occupants: list[list[str]] = [[] for _ in range(self.width * self.height)]
        for a, cc in zip(self.agent_ids, self.cell.tolist(), strict=True):
            occupants[cc].append(a)
        return {
            "time_step": time_step,
            "agent_id": agent_id,
            "wealth": int(self.wealth[i]),
            "cell": c,
            "neighbours": self.neighbours[c],
            "occupants": occupants,
        }

    def apply(self, request: ActionRequest) -> ActionResult:
        """One action through the registry (``move``, ``give``, ``noop``)."""
        return self.registry.dispatch(self, request)

    def move_and_give(self, agent_id: str, to: int, give_to: str | None) -> None:
        """Move to neighbouring cell ``to``, then give to ``give_to`` if given."""
        i = self.index[agent_id]
        if to not in self.neighbours[int(self.cell[i])]:
            raise ActionError(f"cell {to} is not a neighbour of cell {int(self.cell[i])}")
        self.cell[i] = to
        if give_to is not None:
            self.give(agent_id, give_to)

    def give(self, agent_id: str, to: str) -> None:
        """Move one unit of wealth to a cellmate."""
        i, j = self.index[agent_id], self.index.get(to)
        if j is None or j == i or self.cell[j] != self.cell[i]:
            raise ActionError(f"{to} is not another agent in your cell")
        if self.wealth[i] <= 0:
            raise ActionError("nothing to give (wealth 0)")
        self.wealth[i] -= 1
        self.wealth[j] += 1
        self.transfers += 1

    def state_digest(self) -> str:
        """Transfers and a hash of every agent's cell and wealth."""
        data = self.cell.tobytes() + self.wealth.tobytes()
        return f"t{self.transfers}:{hashlib.sha256(data).hexdigest()[:16]}"

    # -- the batch path --------------------------------------------------------------------------
    def batch_actions(self) -> frozenset[str]:
        """The one action applied in batches."""
        return frozenset({"wander"})

    def apply_batch(self, decisions: BatchDecisions, agent_ids: Sequence[str]) -> BatchOutcomes:
        """Move everyone, then let everyone with wealth give to a random cellmate.

        Agents act in activation order: the engine's commit order, or the order the policy
        drew (``extra["order"]``, positions in ``agent_ids``) when the engine's is sorted.
        """
        rows = self._rows(agent_ids)
        u_move, u_give = decisions.extra["u_move"], decisions.extra["u_give"]
        perm = decisions.extra.get("order")
        if perm is not None:  # from here on, position k is the k-th agent to act
            rows, u_move, u_give = rows[perm], u_move[perm], u_give[perm]
        n = len(rows)
        old = self.cell[rows]
        new = self.table[old, (u_move * self.n_neighbours[old]).astype(np.int64)]
        self.cell[rows] = new
        # Mesa's agents move and give one after another: the agent at position k finds
        # in its new cell those before it that moved there and those after it not yet gone.
        # Keys cell * n + position, sorted, answer both counts with binary searches.
        at = np.arange(n)
        cells = len(self.n_neighbours)
        by_new = np.argsort(new, kind="stable")  # by (cell, position)
        by_old = np.argsort(old, kind="stable")
        s_new, s_old = (new * n + at)[by_new], (old * n + at)[by_old]
        count_new = np.bincount(new, minlength=cells)
        ends_new = np.cumsum(count_new)
        ends_old = np.cumsum(np.bincount(old, minlength=cells))
        first_new = ends_new[new] - count_new[new]
        rank = np.empty(n, dtype=np.int64)
        rank[by_new] = at
        before = rank - first_new
        after_from = np.empty(n, dtype=np.int64)
        after_from[by_new] = np.searchsorted(s_old, s_new, side="right")  # sorted queries
        after = ends_old[new] - after_from
        pick = (u_give * (before + after)).astype(np.int64)
        mate_pos = np.where(
            pick < before,
            by_new[np.minimum(first_new + pick, n - 1)],
            by_old[np.minimum(after_from + pick - before, n - 1)],
        )
        mate = np.where(before + after > 0, rows[mate_pos], -1)
        gave = sequential_gives(rows, self.wealth, mate)
        self.wealth -= np.bincount(rows[gave], minlength=len(self.wealth))
        self.wealth += np.bincount(mate[gave], minlength=len(self.wealth))
        receiver = np.where(gave, mate, -1)
        self.transfers += int(gave.sum())
        if perm is not None:  # back to the engine's order for the result column
            back = np.empty(n, dtype=np.int64)
            back[perm] = at
            receiver, new = receiver[back], new[back]
        result = (
            "["
            + ",".join(
                map(
                    str.__add__,
                    self._give_text[receiver].tolist(),
                    self._to_text[new].tolist(),
                )
            )
            + "]"
        )
        done = BatchOutcomes.all_succeeded(n)
        return BatchOutcomes(success=done.success, result=result)


def sequential_gives(agents: np.ndarray, wealth: np.ndarray, mate: np.ndarray) -> np.ndarray:
    """Which agents give when they give one after another, in position order, to ``mate``.

    The agent at position k (``agents[k]``, an agent index) gives one unit to ``mate[k]``
    (an agent index, -1: nobody) if it has any at its turn: its wealth before the step
    (``wealth[agents[k]]``) plus what agents before it gave it (each agent acts once, so it
    has given nothing yet). An agent with wealth gives; one without gives only if an earlier
    giver gave to it. Found for all at once, by rounds: each adds those whose earliest giver
    acts before them, until none is added (rounds: the longest chain of passed-on units).

    Returns:
        A boolean array: the agent at position k gave.
    """
    n = len(agents)
    can = mate >= 0
    gives = can & (wealth[agents] > 0)
    broke = np.flatnonzero(can & ~gives)  # positions that give only if paid in time
    while len(broke):
        givers = np.flatnonzero(gives)
        first = np.full(len(wealth), n, dtype=np.int64)  # earliest giver's position, per agent
        np.minimum.at(first, mate[givers], givers)
        paid = first[agents[broke]] < broke
        if not paid.any():
            break
        gives[broke[paid]] = True
        broke = broke[~paid]
    return gives


class _BoltzmannDecider:
    """Decides ``wander`` for every agent: two uniform draws each (``BatchDecider``)."""

    def __init__(self, policies: Sequence[BatchBoltzmannPolicy]) -> None:
        self.policies = list(policies)
        self.rng = np.random.default_rng([p.seed for p in self.policies[:1]] + [len(policies)])
        self.codes = np.zeros(len(policies), dtype=np.int64)

    def decide_batch(self, time_step: int, order: Sequence[int] | None) -> BatchDecisions:
        """Two draws per agent, and the order they act in unless the engine shuffled them."""
        n = len(self.policies)
        extra = {"u_move": self.rng.random(n), "u_give": self.rng.random(n)}
        if order is None:  # the engine keeps agent order: the model draws Mesa's random order
            extra["order"] = self.rng.permutation(n)
        return BatchDecisions(
            time_step=time_step, action_names=("wander",), codes=self.codes, extra=extra
        )

    def sync_policies(self) -> None:
        """Nothing to hand back: the agents' own generators are not used in batches."""


class _BatchedPolicy:
    """A per-agent policy that the engine may decide for all agents at once (``BatchPolicy``).

    Alone (an agent at a time) it decides as ``single`` does; given every agent, the engine
    asks ``decider`` when the world batches ``action``. Subclasses name the three.
    """

    single: type
    action: str
    decider: type

    def __init__(self, agent_id: str, seed: int | None = 0) -> None:
        """One agent's policy; a batch decider seeds its generator from the policies' seeds."""
        self.agent_id, self.seed = agent_id, _seed_of(seed)
        self._single: Any = None  # made when first asked alone

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """One agent's decision (when the engine does not batch)."""
        if self._single is None:
            self._single = self.single(self.agent_id, self.seed)
        return self._single.decide(
            run_id=run_id, time_step=time_step, agent_id=agent_id, observation=observation
        )

    @classmethod
    def batch_decider(cls, policies: Sequence[Any], world_actions: frozenset[str]) -> Any:
        """A decider for all agents when the world batches ``action`` (else None)."""
        if cls.action not in world_actions or not all(type(p) is cls for p in policies):
            return None
        return cls.decider(policies)


class BatchBoltzmannPolicy(_BatchedPolicy):
    """Wander (as ``BoltzmannGridPolicy``), decided for all agents at once."""

    name = "boltzmann_grid_batch"
    single, action, decider = BoltzmannGridPolicy, "wander", _BoltzmannDecider


# ================================================================================================
# Schelling segregation
# ================================================================================================
class MoveToArgs(BaseModel):  # noqa: D101
    model_config = ConfigDict(extra="forbid")
    to: int = Field(description="An empty cell to move to (see `empty_cells`).")


def _s_noop(world: Any, request: ActionRequest, args: NoArguments) -> ActionResult:
    return _OK


def _s_move(world: SchellingWorld, request: ActionRequest, args: MoveToArgs) -> ActionResult:
    world.move(request.agent_id, args.to)
    return _OK


def _s_seek(world: Any, request: ActionRequest, args: NoArguments) -> ActionResult:
    raise ActionError("seek is applied in batches only")


SCHELLING_ACTIONS = ActionRegistry(default_tool="move")
SCHELLING_ACTIONS.action("noop", "Stay where you are.")(_s_noop)
SCHELLING_ACTIONS.action("move", "Move to an empty cell.", MoveToArgs)(_s_move)


class _SchellingState(_Rows):
    """Positions and types of a Schelling world; happiness computed with numpy (the rule)."""

    def __init__(
        self,
        agent_ids: Sequence[str],
        seed: int | None = 0,
        width: int = 20,
        height: int = 20,
        minority_pc: float = 0.5,
        homophily: float = 0.4,
        radius: int = 1,
        torus: bool = False,
    ) -> None:
        """Place agents on distinct random cells, type 1 with probability ``minority_pc``."""
        self.agent_ids = tuple(agent_ids)
        n, cells = len(self.agent_ids), width * height
        if n >= cells:
            raise ValueError(f"{n} agents do not fit on {cells} cells with room to move")
        self.width, self.height, self.radius, self.torus = width, height, radius, torus
        self.homophily = homophily
        self.index = {a: i for i, a in enumerate(self.agent_ids)}
        rng = np.random.default_rng(_seed_of(seed))
        self.cell = rng.choice(cells, size=n, replace=False).astype(np.int64)
        self.type = (rng.random(n) < minority_pc).astype(np.int64)
        self.grid = np.full(cells, -1, dtype=np.int64)  # agent index per cell, -1 when empty
        self.grid[self.cell] = np.arange(n)
        self.moves = 0
        self._happy_at = -1
        self._happy = np.zeros(n, dtype=bool)
        self._prepare()

    def _prepare(self) -> None:
        """What a world adds to the shared state (its own lists, its result texts)."""

    def happy(self) -> np.ndarray:
        """Mesa's ``assign_state``: similar neighbours / neighbours >= homophily (0 if none)."""
        if self._happy_at == self.moves:
            return self._happy
        w, h, r = self.width, self.height, self.radius
        kind = np.zeros(w * h, dtype=np.int64)  # 0 empty, 1 + type otherwise
        kind[self.cell] = 1 + self.type
        kind = kind.reshape(h, w)
        mode = "wrap" if self.torus else "constant"
        padded = np.pad(kind, r, mode=mode)
        same = np.zeros((h, w), dtype=np.int64)
        total = np.zeros((h, w), dtype=np.int64)
        for dy in range(-r, r + 1):
            for dx in range(-r, r + 1):
                if dx == dy == 0:
                    continue
                shifted = padded[r + dy : r + dy + h, r + dx : r + dx + w]
                total += shifted > 0
                same += shifted == kind
        same, total = same.reshape(-1)[self.cell], total.reshape(-1)[self.cell]
        frac = np.where(total > 0, same / np.maximum(total, 1), 0.0)
        self._happy = frac >= self.homophily
        self._happy_at = self.moves
        return self._happy

    def share_happy(self) -> float:
        """The share of happy agents (Mesa reports it in percent)."""
        return float(self.happy().mean()) if len(self.agent_ids) else 0.0

    def state_digest(self) -> str:
        """Moves and a hash of every agent's cell."""
        return f"m{self.moves}:{hashlib.sha256(self.cell.tobytes()).hexdigest()[:16]}"


_SCHELLING_REPORTERS = {
    "share_happy": lambda w: w.share_happy(),
}
_SCHELLING_AGENT_REPORTERS = {
    "type": lambda w: w.type,
    "happy": lambda w: w.happy(),
    "x": lambda w: w.cell % w.width,
    "y": lambda w: w.cell // w.width,
}


class SchellingWorld(_SchellingState):
    """Mesa's ``Schelling`` as a per-agent world: unhappy agents move to a random empty cell.

    Happiness is assessed for everyone at the start of each step (Mesa: at the end of the
    previous one), so agents act on the same assessment, as in Mesa; and, as in Mesa's
    ``assign_state``, agent by agent in plain Python: each counts its occupied and similar
    neighbours (``assess_each``; the reporters and the batched world use the numpy rule,
    ``happy``, which gives the same). Observation:
    ``time_step``, ``agent_id``, ``type``, ``happy``, ``cell``, ``empty_cells`` (shared) and
    ``tools``.
    """

    name = "schelling"
    registry = SCHELLING_ACTIONS
    model_reporters = _SCHELLING_REPORTERS
    agent_reporters = _SCHELLING_AGENT_REPORTERS

    def _prepare(self) -> None:
        """The empty cells as a list with each cell's place, and the per-step assessment."""
        self.empty = np.flatnonzero(self.grid < 0).tolist()
        self._slot = {c: k for k, c in enumerate(self.empty)}
        self._step = -1
        self._happy_now: list[bool] = []
        self._cells: list[int] = self.cell.tolist()
        self._types: list[int] = self.type.tolist()
        self._occupant: list[int] = self.grid.tolist()  # agent index per cell, -1 when empty
        self._near = moore_neighbours(self.width, self.height, self.radius, self.torus)
        self._tools = self.registry.names()  # what an LLM policy is offered

    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        """What the agent sees; ``empty_cells`` is the world's own list (read, do not keep)."""
        if time_step != self._step:  # a new step: assess everyone once
            self._step = time_step
            self._happy_now = self.assess_each()
        i = self.index[agent_id]
        return {
            "time_step": time_step,
            "agent_id": agent_id,
            "type": self._types[i],
            "happy": self._happy_now[i],
            "cell": self._cells[i],
            "empty_cells": self.empty,
            "tools": self._tools,
        }

    def assess_each(self) -> list[bool]:
        """Mesa's ``assign_state`` for every agent in turn: happy when similar neighbours over
        occupied neighbours (0 when there are none) reach ``homophily``."""
        occupant, types, near, homophily = self._occupant, self._types, self._near, self.homophily
        happy = []
        for i, cell in enumerate(self._cells):
            mine, total, same = types[i], 0, 0
            for c in near[cell]:
                j = occupant[c]
                if j >= 0:
                    total += 1
                    same += types[j] == mine
            happy.append((same / total if total else 0.0) >= homophily)
        return happy

    def apply(self, request: ActionRequest) -> ActionResult:
        """``move`` by hand when well formed; anything else via the registry."""
        to = request.arguments.get("to")
        if request.action_name == "move" and type(to) is int and len(request.arguments) == 1:
            try:
                self.move(request.agent_id, to)
            except ActionError as exc:
                return ActionResult.failed(str(exc))
            return _OK
        return self.registry.dispatch(self, request)

    def move(self, agent_id: str, to: int) -> None:
        """Move to empty cell ``to`` (its old cell becomes empty)."""
        k = self._slot.pop(to, None)
        if k is None:
            raise ActionError(f"cell {to} is not empty")
        i = self.index[agent_id]
        here = self._cells[i]
        self.empty[k] = here
        self._slot[here] = k
        self._cells[i] = to
        self.cell[i] = to
        self.grid[here], self.grid[to] = -1, i
        self._occupant[here], self._occupant[to] = -1, i
        self.moves += 1


class SchellingPolicy:
    """Mesa's ``SchellingAgent``: if unhappy, move to a random empty cell; else stay."""

    name = "schelling"

    def __init__(self, agent_id: str, seed: int | None = 0) -> None:
        """One agent's policy with its own generator."""
        self.rng = random.Random(_seed_of(seed))

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """``move(to)`` to a uniformly drawn empty cell when unhappy, else ``noop``."""
        if observation["happy"]:
            action, arguments = "noop", {}
        else:
            empty = observation["empty_cells"]
            action, arguments = "move", {"to": empty[int(self.rng.random() * len(empty))]}
        return ActionRequest.trusted(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name=action,
            arguments=arguments,
            reasoning=None,
            metadata={},
        )


# -- batched ---------------------------------------------------------------------------------------
BATCH_SCHELLING_ACTIONS = SCHELLING_ACTIONS.extend()
BATCH_SCHELLING_ACTIONS.action(
    "seek", "If you are unhappy, move to a random empty cell; else stay."
)(_s_seek)


class BatchSchellingWorld(_SchellingState):
    """Schelling with numpy state (a ``BatchWorld``): ``seek`` for every agent at once.

    The unhappy agents (assessed before the step) leave their cells together and take
    distinct cells drawn at random from the empty ones and those they left (their draws give
    the order in which they choose). The ``result`` column records ``{"to": cell}`` for a
    mover and null for an agent that stays.
    """

    name = "schelling"
    registry = BATCH_SCHELLING_ACTIONS
    model_reporters = _SCHELLING_REPORTERS
    agent_reporters = _SCHELLING_AGENT_REPORTERS

    def _prepare(self) -> None:
        """Each cell's result text, built once."""
        cells = self.width * self.height
        self._to_text = np.array(
            [f'"{{\\"to\\":{c}}}"' for c in range(cells)] + ["null"], dtype=object
        )

    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        """As ``SchellingWorld.observe`` (the slow path, for other policies)."""
        i = self.index[agent_id]
        return {
            "time_step": time_step,
            "agent_id": agent_id,
            "type": int(self.type[i]),
            "happy": bool(self.happy()[i]),
            "cell": int(self.cell[i]),
            "empty_cells": np.flatnonzero(self.grid < 0).tolist(),
        }

    def apply(self, request: ActionRequest) -> ActionResult:
        """One action through the registry."""
        return self.registry.dispatch(self, request)

    def move(self, agent_id: str, to: int) -> None:
        """Move to empty cell ``to``."""
        if not 0 <= to < len(self.grid) or self.grid[to] >= 0:
            raise ActionError(f"cell {to} is not empty")
        i = self.index[agent_id]
        self.grid[self.cell[i]], self.grid[to] = -1, i
        self.cell[i] = to
        self.moves += 1

    def batch_actions(self) -> frozenset[str]:
        """The one action applied in batches."""
        return frozenset({"seek"})

    def apply_batch(self, decisions: BatchDecisions, agent_ids: Sequence[str]) -> BatchOutcomes:
        """Move every unhappy agent to a distinct random free cell, all at once."""
        rows = self._rows(agent_ids)
        unhappy = ~self.happy()[rows]
        movers = rows[unhappy]
        dest = np.full(len(rows), len(self.grid), dtype=np.int64)  # "null" by default
        if len(movers):
            free = np.concatenate([np.flatnonzero(self.grid < 0), self.cell[movers]])
            # The policy's generator draws a distinct free cell for each mover.
            target = decisions.extra["rng"].choice(free, size=len(movers), replace=False)
            self.grid[self.cell[movers]] = -1
            self.grid[target] = movers
            self.cell[movers] = target
            dest[unhappy] = target
            self.moves += len(movers)
        result = "[" + ",".join(self._to_text[dest].tolist()) + "]"
        done = BatchOutcomes.all_succeeded(len(rows))
        return BatchOutcomes(success=done.success, result=result)


class _SchellingDecider:
    """Decides ``seek`` for every agent; its generator draws the cells (``BatchDecider``)."""

    def __init__(self, policies: Sequence[BatchSchellingPolicy]) -> None:
        self.n = len(policies)
        self.rng = np.random.default_rng([policies[0].seed, self.n])
        self.codes = np.zeros(self.n, dtype=np.int64)

    def decide_batch(self, time_step: int, order: Sequence[int] | None) -> BatchDecisions:
        return BatchDecisions(
            time_step=time_step,
            action_names=("seek",),
            codes=self.codes,
            extra={"rng": self.rng},
        )

    def sync_policies(self) -> None:
        """Nothing to hand back."""


class BatchSchellingPolicy(_BatchedPolicy):
    """Seek (as ``SchellingPolicy``), decided for all agents at once."""

    name = "schelling_batch"
    single, action, decider = SchellingPolicy, "seek", _SchellingDecider


# -- sizes -----------------------------------------------------------------------------------------
def schelling_agents(width: int, height: int, density: float) -> int:
    """The number of agents Mesa places on average: ``density`` of the cells."""
    return round(width * height * density)


__all__ = [
    "BatchBoltzmannPolicy",
    "BatchBoltzmannWorld",
    "BatchSchellingPolicy",
    "BatchSchellingWorld",
    "BoltzmannGridPolicy",
    "BoltzmannGridWorld",
    "SchellingPolicy",
    "SchellingWorld",
    "gini",
    "moore_neighbours",
    "schelling_agents",
]
