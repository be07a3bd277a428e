"""The policy protocol: anything with ``decide`` (and optionally ``adecide``) is a policy."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from vivarium.types import ActionRequest


@runtime_checkable
class AgentPolicy(Protocol):
    """Maps an observation to an action. State the policy needs is passed in, never hidden."""

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest: ...


@runtime_checkable
class AsyncAgentPolicy(Protocol):
    """A policy the engine can await; LLM calls of one step then run concurrently."""

    async def adecide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest: ...


@runtime_checkable
class UsesWorldActions(Protocol):
    """A policy that describes actions to a model: the engine hands it the world's action
    registry when a run is built, and it refuses there (``ConfigError``) what the world lacks."""

    def use_world_actions(self, registry: Any, world: str) -> None: ...


def policy_name(policy: object) -> str:
    """The name recorded for a policy: its ``name`` attribute, else its class name."""
    return str(getattr(policy, "name", None) or type(policy).__name__)
