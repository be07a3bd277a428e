"""The Boltzmann wealth model (Mesa's introductory model) as a Vivarium world and policy.

Every agent starts with ``starting_wealth`` units (1). Each step every agent with wealth gives one
unit to another agent picked at random; wealth is conserved and its distribution grows a long
tail. World ``boltzmann`` and policy ``boltzmann`` are built in (``vivarium.experiment.build`` imports this
module when a run uses them):

```python
Experiment(world="boltzmann", policy="boltzmann", agents=1000, steps=200, order="shuffle")
```

Actions: ``noop`` and ``give(to)``, which moves one unit from the giver to ``to`` if the giver
has any (else the action fails with the reason, as does giving to oneself or to a stranger).
Observations carry the time step, the agent's id and wealth, every agent id and the tools. The
``boltzmann`` policy gives to a uniformly drawn other agent with its own seeded generator
(``random.Random(stable_agent_seed(seed, agent_id))``), and does nothing when it has nothing,
as Mesa's agent does. ``final_wealth(actions)`` and ``gini`` read the outcome from a trace.
"""

from __future__ import annotations

import hashlib
import json
import random
from array import array
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from vivarium.seeding import CountingRandom
from vivarium.types import ActionRequest, ActionResult
from vivarium.worlds.observation import ObservationKey
from vivarium.worlds.registry import ActionError, ActionRegistry, NoArguments

if TYPE_CHECKING:
    import pandas as pd


# No docstring: pydantic would put it in the ``give`` tool's JSON schema (the prompt an LLM sees).
class GiveArgs(BaseModel):  # noqa: D101
    model_config = ConfigDict(extra="forbid")
    to: str = Field(description="The id of the agent who receives one unit of wealth.")


# ``random.Random.getrandbits`` itself (C), which ``CountingRandom`` wraps to count words.
_getrandbits = random.Random.getrandbits

# One shared outcome for every successful action: results are read, never changed.
_OK = ActionResult.ok()


def _noop(world: BoltzmannWorld, request: ActionRequest, args: NoArguments) -> ActionResult:
    return _OK


def _give(world: BoltzmannWorld, request: ActionRequest, args: GiveArgs) -> ActionResult:
    world.give(request.agent_id, args.to)
    return _OK


BOLTZMANN_ACTIONS = ActionRegistry(default_tool="give")
BOLTZMANN_ACTIONS.action("noop", "Do nothing this step.")(_noop)
BOLTZMANN_ACTIONS.action("give", "Give one unit of your wealth to another agent.", GiveArgs)(_give)
_NOOP = BOLTZMANN_ACTIONS.get("noop")
_GIVE = BOLTZMANN_ACTIONS.get("give")


class BoltzmannWorld:
    """Agents' wealth; ``give`` moves one unit. Total wealth never changes.

    It implements ``World`` and the capabilities ``NamedWorld``, ``ActionWorld`` and
    ``CheckpointableWorld`` of ``vivarium.worlds.base``.
    """

    name = "boltzmann"

    def __init__(
        self,
        agent_ids: Sequence[str],
        starting_wealth: int = 1,
        registry: ActionRegistry | None = None,
    ) -> None:
        """Give every agent ``starting_wealth`` units.

        Args:
            agent_ids: The agents, in the order ``observe`` lists them and snapshots store them.
            starting_wealth: Units each agent starts with.
            registry: The actions to offer; by default a copy of ``BOLTZMANN_ACTIONS``.

        Raises:
            ValueError: ``starting_wealth`` is negative.
        """
        if starting_wealth < 0:
            raise ValueError(f"starting_wealth must be >= 0, not {starting_wealth}")
        self.agent_ids = tuple(agent_ids)
        self.starting_wealth = starting_wealth
        self.wealth: dict[str, int] = dict.fromkeys(self.agent_ids, starting_wealth)
        self.transfers = 0
        self.registry = registry or BOLTZMANN_ACTIONS.extend()
        self._tools = self.registry.names()

    # What ``observe`` returns, key by key (the docs page and ``describe`` read this).
    OBSERVATION_KEYS: ClassVar[tuple[ObservationKey, ...]] = (
        ObservationKey("time_step", "int", "The step being decided, counting from 0."),
        ObservationKey("agent_id", "str", "The id of the observing agent."),
        ObservationKey("wealth", "int", "The units of wealth the agent holds now."),
        ObservationKey("agents", "tuple[str, ...]", "Every agent id, in the world's order."),
        ObservationKey("tools", "tuple[str, ...]", "The names of the world's actions."),
    )

    # -- the world protocol -------------------------------------------------------------------
    def observe(self, agent_id: str, time_step: int) -> dict[str, Any]:
        """What ``agent_id`` sees: the time step, its id and wealth, every agent id and the tools.

        The agent ids and tools are shared tuples, not copies: building an observation must stay
        cheap when a thousand agents observe every step.
        """
        return {
            "time_step": time_step,
            "agent_id": agent_id,
            "wealth": self.wealth.get(agent_id, 0),
            "agents": self.agent_ids,
            "tools": self._tools,
        }

    def apply(self, request: ActionRequest) -> ActionResult:
        """Perform one action; a refused action comes back as a failed result, never raises.

        A well-formed ``give`` takes a fast path with the same outcome as the registry's; anything
        else (or a registry whose ``give`` was overridden) goes through ``ActionRegistry.dispatch``.
        """
        args = request.arguments
        spec = self.registry.get(request.action_name)
        # The common cases, checked by hand (the registry's validation costs more than the move),
        # while the registry still holds the built-in actions.
        if spec is _GIVE and type(args) is dict and len(args) == 1 and type(args.get("to")) is str:
            try:
                self.give(request.agent_id, args["to"])
            except ActionError as exc:
                return ActionResult.failed(str(exc))
            return _OK
        if spec is _NOOP and type(args) is dict and not args:
            return _OK
        return self.registry.dispatch(self, request)

    def state_digest(self) -> str:
        """A short fingerprint of the state (transfer count and a hash of all wealth) for traces."""
        counts = array("q", self.wealth.values()).tobytes()
        return f"t{self.transfers}:{hashlib.sha256(counts).hexdigest()[:16]}"

    # -- the model ----------------------------------------------------------------------------
    def give(self, giver: str, receiver: str) -> None:
        """Move one unit of wealth from ``giver`` to ``receiver``.

        Args:
            giver: The agent that pays.
            receiver: The agent that receives.

        Raises:
            ActionError: ``receiver`` is unknown or is ``giver``, or ``giver`` has nothing.
        """
        wealth = self.wealth
        if receiver not in wealth:
            raise ActionError(f"unknown agent '{receiver}'")
        if receiver == giver:
            raise ActionError("cannot give to yourself")
        if wealth.get(giver, 0) <= 0:
            raise ActionError("nothing to give (wealth 0)")
        wealth[giver] -= 1
        wealth[receiver] += 1
        self.transfers += 1

    @property
    def total_wealth(self) -> int:
        """The sum of all wealth: always agents times ``starting_wealth`` (a check on the model)."""
        return sum(self.wealth.values())

    # -- checkpoints --------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The state as JSON-ready data: wealth in ``agent_ids`` order and the transfer count."""
        return {"wealth": [self.wealth[a] for a in self.agent_ids], "transfers": self.transfers}

    def restore(self, state: dict[str, Any]) -> None:
        """Return to a state ``snapshot`` took, for a world built with the same ``agent_ids``.

        Raises:
            ValueError: The snapshot holds a different number of agents.
        """
        self.wealth = dict(zip(self.agent_ids, state["wealth"], strict=True))
        self.transfers = state["transfers"]


def _position(ids: list[str] | tuple[str, ...], agent_id: str) -> tuple[int, int]:
    """Where ``agent_id`` is in ``ids``, and how often it is (0, 1 or 2 for "more").

    One pass over ``ids``; an absent id is placed at ``len(ids)`` (nothing to skip).
    """
    try:
        first = ids.index(agent_id)
    except ValueError:
        return len(ids), 0
    try:
        ids.index(agent_id, first + 1)
    except ValueError:
        return first, 1
    return first, 2


class BoltzmannPolicy:
    """Give one unit to a random other agent (drawn with this agent's own generator).

    An ``AgentPolicy`` and a ``StatefulPolicy`` (its generator is checkpointed).
    """

    name = "boltzmann"

    def __init__(self, agent_id: str, agent_ids: Sequence[str], seed: int) -> None:
        """Set up the policy of one agent.

        Args:
            agent_id: The agent this policy decides for.
            agent_ids: Every agent in the world (``agent_id`` included or not).
            seed: This agent's own seed (``stable_agent_seed(seed, agent_id)``), so that its
                draws do not depend on the other agents or on the order they act in.

        Raises:
            ValueError: There is no other agent to give to.
        """
        self.agent_id = agent_id
        # The others are ``agent_ids`` without this agent, read through the shared sequence
        # (skipping this agent's position) rather than copied: a thousand agents would
        # otherwise build a million-entry list between them.
        ids = agent_ids if isinstance(agent_ids, list | tuple) else list(agent_ids)
        skip, mine = _position(ids, agent_id)
        if mine > 1:  # listed twice: the plain list of the others
            ids = [a for a in ids if a != agent_id]
            skip, mine = len(ids), 0
        self._ids = ids
        self._skip = skip
        self._n_others = len(ids) - mine
        if self._n_others < 1:
            raise ValueError("the Boltzmann model needs at least two agents")
        self.seed = seed
        self.rng = CountingRandom(seed)

    @property
    def others(self) -> list[str]:
        """Every agent but this one, in ``agent_ids`` order (the list the draws index)."""
        skip = self._skip
        return [*self._ids[:skip], *self._ids[skip + 1 :]]

    def _draw_other(self) -> str:
        """``others[rng.randrange(len(others))]``, from the same draws without the copy.

        ``randrange(n)`` takes ``n.bit_length()`` random bits until they are below ``n``
        (``random.Random._randbelow_with_getrandbits``); the same loop runs here on the
        generator's own ``getrandbits``, so the words it counts are the same.
        """
        n = self._n_others
        rng = self.rng
        k = n.bit_length()
        if type(rng) is CountingRandom:  # its counting, done here: one Python call fewer
            r, draws = _getrandbits(rng, k), 1
            while r >= n:
                r, draws = _getrandbits(rng, k), draws + 1
            rng.words += draws * ((k + 31) // 32)
        else:
            r = rng.getrandbits(k)
            while r >= n:
                r = rng.getrandbits(k)
        return self._ids[r if r < self._skip else r + 1]

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """Give to a uniformly drawn other agent if the observation shows wealth, else ``noop``.

        As Mesa's agent does, an agent with nothing does nothing (and draws no random number).
        """
        if observation.get("wealth", 0) > 0:
            to = self._draw_other()
            action, arguments = "give", {"to": to}
        else:
            action, arguments = "noop", {}
        return ActionRequest.trusted(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            action_name=action,
            arguments=arguments,
            reasoning=None,
            metadata={},
        )

    def get_state(self) -> dict[str, Any]:
        """The generator's position (seed and words drawn): small, unlike its full state."""
        return {"seed": self.seed, "words": self.rng.words}

    def set_state(self, state: dict[str, Any]) -> None:
        """Resume from ``get_state``: reseed and skip the words already drawn."""
        self.seed = state["seed"]
        self.rng = CountingRandom(self.seed)
        self.rng.skip(state["words"])


# -- reading the outcome ----------------------------------------------------------------------
def final_wealth(actions: pd.DataFrame, starting_wealth: int = 1) -> pd.Series:
    """Each agent's wealth after the run, from its actions (successful gives move one unit).

    Agents that never appear in ``actions`` are not listed; every agent acts each step.
    """
    import pandas as pd

    agents = actions["agent_id"].astype(str)
    gives = actions[(actions["action"] == "give") & actions["success"].astype(bool)]
    receivers = gives["arguments"].map(lambda text: json.loads(text)["to"])
    given = gives["agent_id"].astype(str).value_counts()
    received = receivers.value_counts()
    ids = pd.Index(sorted(set(agents)))
    wealth = (
        starting_wealth + received.reindex(ids, fill_value=0) - given.reindex(ids, fill_value=0)
    )
    wealth.name = "wealth"
    return wealth.astype("int64")


def gini(values: Iterable[float]) -> float:
    """The Gini coefficient, as Mesa's tutorial computes it (0 = equal, near 1 = one has all)."""
    xs = sorted(values)
    n = len(xs)
    total = sum(xs)
    if n == 0 or total == 0:
        return 0.0
    b = sum(x * (n - i) for i, x in enumerate(xs)) / (n * total)
    return 1 + (1 / n) - 2 * b


__all__ = [
    "BOLTZMANN_ACTIONS",
    "BoltzmannPolicy",
    "BoltzmannWorld",
    "GiveArgs",
    "final_wealth",
    "gini",
]
