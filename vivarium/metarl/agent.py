"""The MetaRLGym agent interface: chat messages in, an action and the new agent state out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Protocol, runtime_checkable

from vivarium.protocols import implements


class Agent(ABC):
    """The MetaRLGym agent interface.

    ``action, agent_state = agent.get_action(messages, agent_state)``: the state is passed in and
    handed back, so whoever runs the agent (an environment's loop, the engine) owns it. Agents
    written for MetaRLGym keep working: ``agent_state`` defaults to ``None``, extra keyword
    arguments are accepted, and ``reset_memory`` (the original's name) is what the runners call.
    """

    @abstractmethod
    def get_action(
        self, messages: list[dict[str, Any]], agent_state: Any = None, **kwargs: Any
    ) -> tuple[Any, Any]:
        """The next action (usually the reply text) and the new agent state.

        Args:
            messages: The chat so far, ``{"role", "content"}`` dicts (an environment's messages
                also carry their ``session_id``).
            agent_state: What the previous call returned; ``None`` on an episode's first call.
            **kwargs: Agent-specific options; the runners here pass none.
        """

    def reset(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Forget anything kept between trials (state passed in and out needs nothing)."""

    def reset_memory(self) -> None:
        """MetaRLGym's name for ``reset``: the runners call this one, so either override works."""
        self.reset()

    def update_memory(
        self, messages: list[dict[str, Any]], action: Any, reward: float, agent_state: Any
    ) -> Any:
        """Fold a step's outcome into the agent state; by default the state is unchanged.

        MetaRLGym deprecated this hook (its version returns ``None``); a ``None`` return keeps
        the state as it was.
        """
        return agent_state


@runtime_checkable
class ResetsMemory(Protocol):
    """An agent that forgets between trials under MetaRLGym's name for it."""

    def reset_memory(self) -> None:
        """Forget anything kept between trials."""
        ...


@runtime_checkable
class Resets(Protocol):
    """An agent that forgets between trials (``Agent.reset``)."""

    def reset(self) -> None:
        """Forget anything kept between trials."""
        ...


@runtime_checkable
class UpdatesMemory(Protocol):
    """An agent that folds each step's outcome into its state (MetaRLGym's deprecated hook)."""

    def update_memory(
        self, messages: list[dict[str, Any]], action: Any, reward: float, agent_state: Any
    ) -> Any:
        """The agent state after the step (None: unchanged)."""
        ...


def reset_agent(agent: Any) -> None:
    """Reset an agent before a trial, by ``reset_memory`` or else ``reset`` (either may be absent).

    Structural (``ResetsMemory``, ``Resets``), so that agents subclassing MetaRLGym's own
    ``Agent`` class run too.
    """
    if implements(agent, ResetsMemory):
        agent.reset_memory()
    elif implements(agent, Resets):
        agent.reset()


def remember(
    agent: Any, messages: list[dict[str, Any]], action: Any, reward: float, agent_state: Any
) -> Any:
    """The agent state after ``update_memory`` (kept as it was when the hook returns ``None``)."""
    if not implements(agent, UpdatesMemory):
        return agent_state
    updated = agent.update_memory(messages, action, reward, agent_state)
    return agent_state if updated is None else updated
