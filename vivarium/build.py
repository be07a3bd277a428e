"""From a config to a running engine: the registries of worlds and policies."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vivarium.seeding import agent_ids, stable_agent_seed

if TYPE_CHECKING:
    from vivarium.config import ExperimentConfig

WorldFactory = Callable[["ExperimentConfig"], Any]
PolicyFactory = Callable[["ExperimentConfig", str], Any]


def _channel_world(config: ExperimentConfig) -> Any:
    from vivarium.worlds.channel import InMemoryChannel

    return InMemoryChannel(message_history_limit=config.message_history_limit)


def _random_policy(config: ExperimentConfig, agent_id: str) -> Any:
    from vivarium.policies.random import RandomAgentPolicy

    return RandomAgentPolicy.from_seed(
        stable_agent_seed(config.seed, agent_id), config.action_space
    )


WORLDS: dict[str, WorldFactory] = {"channel": _channel_world}
POLICIES: dict[str, PolicyFactory] = {"random": _random_policy}


def register_world(name: str, factory: WorldFactory) -> None:
    """Make ``world=name`` available to configs, the CLI and sweeps."""
    WORLDS[name] = factory


def register_policy(name: str, factory: PolicyFactory) -> None:
    """Make ``policy=name`` available; ``factory(config, agent_id)`` returns one agent's policy."""
    POLICIES[name] = factory


def known_names(kind: str) -> list[str]:
    return sorted(WORLDS if kind == "world" else POLICIES)


def build_agents(config: ExperimentConfig) -> dict[str, Any]:
    factory = POLICIES[config.policy]
    return {aid: factory(config, aid) for aid in agent_ids(config.agents)}


def build_world(config: ExperimentConfig) -> Any:
    return WORLDS[config.world](config)
