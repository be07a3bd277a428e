"""The policy contract: anything with ``decide`` is a policy; the rest are capabilities.

A policy maps an observation to an action (``AgentPolicy``). Everything else a policy may
do is an optional capability, one small protocol each, which the engine looks for once, when
a run is built (a policy with half of a capability, ``get_state`` without ``set_state``, is
refused there with a one-line error):

| protocol           | members              | the engine then                              |
|--------------------|----------------------|----------------------------------------------|
| `AgentPolicy`      | decide               | asks it for each decision (required)         |
| `AsyncAgentPolicy` | adecide              | awaits it, with the step's other decisions   |
| `UsesAgentState`   | uses_agent_state     | keeps its agent state, passed in and out     |
| `StatefulPolicy`   | get_state, set_state | saves its state in checkpoints               |
| `UsesWorldActions` | use_world_actions    | hands it the world's action registry         |
| `CallsLLM`         | gateway              | treats all-timeouts as an LLM outage         |
| `BatchPolicy`      | batch_decider        | decides a whole step at once (`BatchWorld`)  |
| `NamedPolicy`      | name                 | records that name (else the class's)         |
| `SeededPolicy`     | seed                 | records it as the agent's seed               |
| `AgentSeedPolicy`  | request_seed         | records the seed it derives for each agent   |

Each is checked with ``vivarium.protocols.implements`` where the policy enters (the engine's
build: ``vivarium.engine.capabilities``; the recorded name and seed: ``policy_name``,
``policy_seed``), never probed for by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from vivarium.protocols import implements
from vivarium.types import ActionRequest

if TYPE_CHECKING:
    from vivarium.worlds.base import BatchDecisions
    from vivarium.worlds.registry import ActionRegistry


@runtime_checkable
class AgentPolicy(Protocol):
    """Maps an observation to an action. State the policy needs is passed in, never hidden."""

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """The action of ``agent_id`` at ``time_step``, given what it observes.

        Called once per agent and step, in commit order. An exception (or a return value
        that is not an ``ActionRequest``) is retried as configured, then recorded as a
        fallback ``noop`` with its reason; the run goes on.

        Returns:
            The request, naming this ``agent_id`` and ``time_step``.
        """
        ...


@runtime_checkable
class AsyncAgentPolicy(Protocol):
    """A policy the engine can await; LLM calls of one step then run concurrently."""

    async def adecide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """``decide``, awaitable: used instead of it, with the run's timeout and retries."""
        ...


@runtime_checkable
class UsesAgentState(Protocol):
    """A policy whose per-agent state the engine keeps (a workflow's state, working memory).

    When ``uses_agent_state`` is true, the observation carries the agent's last state under
    ``"agent_state"`` (None at first), and the request returns the new one in
    ``metadata["agent_state"]``; the engine keeps it, checkpoints it and records nothing of
    it in the action row.
    """

    uses_agent_state: bool


@runtime_checkable
class StatefulPolicy(Protocol):
    """A policy with state of its own (a random generator) that checkpoints save."""

    def get_state(self) -> Any:
        """The policy's state after the last committed step, JSON-serialisable."""
        ...

    def set_state(self, state: Any) -> None:
        """Become the policy ``get_state`` saved (called before a resumed run's first step)."""
        ...


@runtime_checkable
class UsesWorldActions(Protocol):
    """A policy that describes actions to a model.

    The engine hands it the world's action registry when a run is built, and it refuses
    there (``ConfigError``) what the world lacks.
    """

    def use_world_actions(self, registry: ActionRegistry, world: str) -> None:
        """Act with ``registry``'s actions in the world named ``world``; called once per run."""
        ...


@runtime_checkable
class CallsLLM(Protocol):
    """A policy that calls a model through ``gateway`` (None: it calls none after all)."""

    gateway: Any


@runtime_checkable
class BatchDecider(Protocol):
    """Decides one whole step for a fixed group of agents at once, made by ``BatchPolicy``."""

    def decide_batch(self, time_step: int, order: Sequence[int] | None) -> BatchDecisions:
        """Every agent's decision for ``time_step``.

        Args:
            time_step: The step to decide.
            order: Agent indices in commit order, or None for index order (0, 1, ...).

        Returns:
            One row per agent, in commit order: exactly what the agents' ``decide`` would have
            returned one by one, and each policy's own state advanced the same way.
        """
        ...

    def sync_policies(self) -> None:
        """Leave every policy as deciding one by one would have.

        Called before a checkpoint reads ``get_state``, and when a run ends.
        """
        ...


@runtime_checkable
class BatchPolicy(Protocol):
    """A policy class that can decide a whole step for many agents at once.

    The engine asks the class of the first agent's policy, once, before the first step in
    which every agent acts, and only when the world is a ``vivarium.worlds.base.BatchWorld``.
    """

    @classmethod
    def batch_decider(
        cls, policies: Sequence[Any], world_actions: frozenset[str]
    ) -> BatchDecider | None:
        """A decider for ``policies`` (one per agent, in agent index order), or None.

        Args:
            policies: Every agent's policy, of any type.
            world_actions: The actions the world can apply in a batch (``batch_actions()``).

        Returns:
            None when these policies cannot be decided together with those actions (another
            policy type among them, an action the world cannot batch): the engine then asks
            each agent in turn.
        """
        ...


@runtime_checkable
class NamedPolicy(Protocol):
    """A policy with a name (``"random"``), recorded for its agents instead of its class's."""

    name: str


@runtime_checkable
class SeededPolicy(Protocol):
    """A policy of one agent that runs on a seed of its own (None: it has none)."""

    seed: int | None


@runtime_checkable
class AgentSeedPolicy(Protocol):
    """A policy shared by several agents that derives each one's seed (an LLM policy's)."""

    def request_seed(self, agent_id: str) -> int | None:
        """The seed ``agent_id``'s requests carry (None: none)."""
        ...


def policy_name(policy: object) -> str:
    """The name recorded for a policy: its ``name`` (``NamedPolicy``), else its class name."""
    name = policy.name if implements(policy, NamedPolicy) else None
    return str(name or type(policy).__name__)


def policy_seed(policy: object, agent_id: str) -> Any:
    """The seed ``agent_id`` runs on, as its policy reports it (None: it reports none).

    The policy's own ``seed``, else (a policy shared by several agents, such as an LLM policy
    with a master seed) the one it derives for this agent, ``request_seed(agent_id)``. Read
    where Vivarium did not choose the agent's seed itself: for a policy built by a registered
    factory or given as an instance (``vivarium.experiment.build.recorded_seeds``, which decides every
    agent's recorded seed for a run), and for an engine built by hand.
    """
    seed = policy.seed if implements(policy, SeededPolicy) else None
    if seed is None and implements(policy, AgentSeedPolicy):
        seed = policy.request_seed(agent_id)
    return seed
