"""From a config to a running engine: the registries of worlds and policies."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vivarium.seeding import agent_ids, stable_agent_seed

if TYPE_CHECKING:
    from vivarium.config import ExperimentConfig

WorldFactory = Callable[["ExperimentConfig"], Any]
PolicyFactory = Callable[["ExperimentConfig", str, dict[str, Any]], Any]


def _channel_world(config: ExperimentConfig) -> Any:
    from vivarium.worlds.channel import InMemoryChannel

    return InMemoryChannel(message_history_limit=config.message_history_limit)


def _random_policy(config: ExperimentConfig, agent_id: str, shared: dict[str, Any]) -> Any:
    from vivarium.policies.random import RandomAgentPolicy

    seed = stable_agent_seed(config.seed, agent_id)
    return RandomAgentPolicy.from_seed(seed, config.action_space)


def shared_gateway(config: ExperimentConfig, shared: dict[str, Any]) -> Any:
    """The run's one gateway stack, built on first use and shared by every agent."""
    if "gateway" not in shared:
        from vivarium.config import LLMConfig
        from vivarium.gateways.stack import build_gateway

        shared["gateway"] = build_gateway(config.llm or LLMConfig(mock=True), config.seed)
    return shared["gateway"]


def _cognitive_policy(config: ExperimentConfig, agent_id: str, shared: dict[str, Any]) -> Any:
    from vivarium.config import LLMConfig
    from vivarium.policies.cognitive import (
        CognitiveAgentPolicy,
        CognitivePolicyConfig,
        SimpleCognitivePolicy,
    )
    from vivarium.seeding import derive_seed

    llm = config.llm or LLMConfig(mock=True)
    policy_config = CognitivePolicyConfig(
        model=llm.model,
        temperature=llm.temperature,
        max_tokens=llm.max_tokens,
        system_prompt=llm.system_prompt,
        force_tool=llm.force_tool,
        seed=derive_seed(config.seed, "llm", agent_id) & 0x7FFFFFFF,
        # LLM agents see every tool of the world unless the config names an action space.
        tools=list(config.action_space) if "action_space" in config.model_fields_set else None,
    )
    gateway = shared_gateway(config, shared)
    cls = CognitiveAgentPolicy if llm.graph and _has_langgraph() else SimpleCognitivePolicy
    return cls(gateway, policy_config)


def _has_langgraph() -> bool:
    import importlib.util

    return importlib.util.find_spec("langgraph") is not None


WORLDS: dict[str, WorldFactory] = {"channel": _channel_world}
POLICIES: dict[str, PolicyFactory] = {"random": _random_policy, "cognitive": _cognitive_policy}


def register_world(name: str, factory: WorldFactory) -> None:
    """Make ``world=name`` available to configs, the CLI and sweeps."""
    WORLDS[name] = factory


def register_policy(name: str, factory: PolicyFactory) -> None:
    """Make ``policy=name`` available; ``factory(config, agent_id, shared)`` makes one policy.

    ``shared`` is a dict the factories of one run share (e.g. ``shared_gateway`` keeps the
    run's gateway stack there).
    """
    POLICIES[name] = factory


def known_names(kind: str) -> list[str]:
    return sorted(WORLDS if kind == "world" else POLICIES)


def build_agents(config: ExperimentConfig, shared: dict[str, Any] | None = None) -> dict[str, Any]:
    """One policy per agent id; ``shared`` holds what agents share (the gateway stack)."""
    factory = POLICIES[config.policy]
    shared = {} if shared is None else shared
    return {aid: factory(config, aid, shared) for aid in agent_ids(config.agents)}


def build_world(config: ExperimentConfig) -> Any:
    return WORLDS[config.world](config)
