"""From a config to a world and its agents: the registries of worlds and policies.

A config names either a number of agents of one policy, or groups of agents (``agents:
[{policy: workflow, agent: data/agents/alpha_2}, {policy: random, count: 3}]``). The plan lists
every agent id with its group; worlds are built for the planned ids, then one policy per agent.
Factories share a dict (``shared``) for what one run's agents have in common: the gateway
stack, loaded agent specs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vivarium.errors import ConfigError, VivariumError
from vivarium.seeding import derive_seed, stable_agent_seed

if TYPE_CHECKING:
    from vivarium.config import AgentGroup, ExperimentConfig


@dataclass(frozen=True, slots=True)
class PlannedAgent:
    agent_id: str
    group: AgentGroup


WorldFactory = Callable[["ExperimentConfig", list[PlannedAgent], dict[str, Any]], Any]
PolicyFactory = Callable[["ExperimentConfig", PlannedAgent, dict[str, Any]], Any]


# -- the plan ---------------------------------------------------------------------------------
def agent_plan(
    config: ExperimentConfig, shared: dict[str, Any] | None = None
) -> list[PlannedAgent]:
    """Every agent id with its group, sorted by id (the engine's canonical order)."""
    from vivarium.config import AgentGroup

    shared = {} if shared is None else shared
    if config.base_dir:
        shared.setdefault("base_dir", config.base_dir)
    groups = (
        config.agents
        if isinstance(config.agents, list)
        else [AgentGroup(policy=config.policy, count=config.agents)]
    )
    numbered = sum(g.count for g in groups if not g.agent)
    width = max(3, len(str(max(numbered - 1, 0))))
    plan: list[PlannedAgent] = []
    disabled: list[str] = []
    counter = 0
    for group in groups:
        if group.agent:
            spec = load_spec(group.agent, shared)
            base = group.id or spec.id
            ids = [base] if group.count == 1 else [f"{base}_{i}" for i in range(group.count)]
            enabled = spec.enabled and group.enabled is not False
        else:
            ids = [f"{group.id or 'agent'}_{counter + i:0{width}d}" for i in range(group.count)]
            counter += group.count
            enabled = group.enabled is not False
        if enabled:
            plan.extend(PlannedAgent(aid, group) for aid in ids)
        else:  # left out of the run; the recorded config says so (ExperimentConfig.identity)
            disabled.append(group.agent or group.id or group.policy)
    if not plan:
        raise ConfigError(
            f"config: agents: every agent is disabled (enabled: false: {', '.join(disabled)}); "
            "enable one to run"
        )
    seen: set[str] = set()
    for p in plan:
        if p.agent_id in seen:
            raise ConfigError(f"config: agents: agent id '{p.agent_id}' is used twice")
        seen.add(p.agent_id)
    return sorted(plan, key=lambda p: p.agent_id)


def load_spec(folder: str, shared: dict[str, Any]) -> Any:
    """A workflow agent's spec, loaded once per run.

    A relative folder is looked up from the config's ``base_dir`` first, then from the working
    directory, so a config runs the same from a notebook folder or the project root.
    """
    specs = shared.setdefault("specs", {})
    if folder not in specs:
        from vivarium.workflow.config import load_agent, resolve_agent_folder

        specs[folder] = load_agent(resolve_agent_folder(folder, shared.get("base_dir")))
    return specs[folder]


def shared_gateway(config: ExperimentConfig, shared: dict[str, Any]) -> Any:
    """The run's one gateway stack, built on first use and shared by every agent."""
    if "gateway" not in shared:
        from vivarium.config import LLMConfig
        from vivarium.gateways.stack import build_gateway

        shared["gateway"] = build_gateway(config.llm or LLMConfig(mock=True), config.seed)
    return shared["gateway"]


# -- worlds -----------------------------------------------------------------------------------
def _channel_world(
    config: ExperimentConfig, plan: list[PlannedAgent], shared: dict[str, Any]
) -> Any:
    from vivarium.worlds.channel import InMemoryChannel

    return InMemoryChannel(message_history_limit=config.message_history_limit)


def _ecology_world(
    config: ExperimentConfig, plan: list[PlannedAgent], shared: dict[str, Any]
) -> Any:
    from vivarium.worlds.ecology import EcologyWorld

    scrip = {}
    for p in plan:
        spec = load_spec(p.group.agent, shared) if p.group.agent else None
        scrip[p.agent_id] = (
            spec.starting_scrip if spec is not None else p.group.starting_scrip or 100
        )
    options = dict(config.world_options)
    return EcologyWorld(
        [p.agent_id for p in plan],
        starting_scrip=scrip,
        total_steps=config.steps,
        message_history_limit=config.message_history_limit,
        **options,
    )


# -- policies ---------------------------------------------------------------------------------
# What random agents draw from in a world when the config names no action space: the world's
# actions they can make arguments for (vivarium.policies.random.ARGUMENT_MAKERS). Worlds not
# listed get the channel's noop/emit_event.
RANDOM_ACTION_SPACES: dict[str, tuple[str, ...]] = {
    "ecology": ("noop", "read_artifact", "write_artifact", "invoke_artifact", "post_message"),
}


def random_action_space(world: str) -> tuple[str, ...]:
    """The actions random agents draw from in ``world`` by default."""
    from vivarium.policies.random import DEFAULT_ACTION_SPACE

    return RANDOM_ACTION_SPACES.get(world, DEFAULT_ACTION_SPACE)


def _random_policy(config: ExperimentConfig, agent: PlannedAgent, shared: dict[str, Any]) -> Any:
    from vivarium.policies.random import RandomAgentPolicy

    space = agent.group.action_space or config.action_space or random_action_space(config.world)
    return RandomAgentPolicy.from_seed(stable_agent_seed(config.seed, agent.agent_id), space)


def _cognitive_policy(config: ExperimentConfig, agent: PlannedAgent, shared: dict[str, Any]) -> Any:
    from vivarium.config import LLMConfig
    from vivarium.policies.cognitive import (
        CognitiveAgentPolicy,
        CognitivePolicyConfig,
        SimpleCognitivePolicy,
    )

    llm = config.llm or LLMConfig(mock=True)
    explicit = agent.group.action_space or config.action_space

    policy_config = CognitivePolicyConfig(
        model=llm.model,
        temperature=llm.temperature,
        max_tokens=llm.max_tokens,
        system_prompt=llm.system_prompt,
        force_tool=llm.force_tool,
        seed=derive_seed(config.seed, "llm", agent.agent_id) & 0x7FFFFFFF,
        # LLM agents see every tool of the world unless the config names an action space.
        tools=list(explicit) if explicit else None,
    )
    gateway = shared_gateway(config, shared)
    cls = CognitiveAgentPolicy if llm.graph and _has_langgraph() else SimpleCognitivePolicy
    return cls(gateway, policy_config)


def _workflow_policy(config: ExperimentConfig, agent: PlannedAgent, shared: dict[str, Any]) -> Any:
    from vivarium.workflow.policy import WorkflowPolicy

    if not agent.group.agent:
        raise ConfigError(
            "config: agents: a workflow group needs 'agent: <folder with agent.yaml>'"
        )
    from vivarium.config import LLMConfig

    spec = load_spec(agent.group.agent, shared)
    llm = config.llm or LLMConfig(mock=True)
    seed = derive_seed(config.seed, "llm", agent.agent_id) & 0x7FFFFFFF
    return WorkflowPolicy(
        spec,
        shared_gateway(config, shared),
        seed=seed,
        model=llm.model,
        temperature=llm.temperature,
        max_tokens=llm.max_tokens,
    )


def _has_langgraph() -> bool:
    import importlib.util

    return importlib.util.find_spec("langgraph") is not None


WORLDS: dict[str, WorldFactory] = {"channel": _channel_world, "ecology": _ecology_world}
POLICIES: dict[str, PolicyFactory] = {
    "random": _random_policy,
    "cognitive": _cognitive_policy,
    "workflow": _workflow_policy,
}


def register_world(name: str, factory: WorldFactory) -> None:
    """Make ``world=name`` available: ``factory(config, plan, shared)`` returns the world."""
    WORLDS[name] = factory


def register_policy(name: str, factory: PolicyFactory) -> None:
    """Make ``policy=name`` available: ``factory(config, planned_agent, shared)`` makes one."""
    POLICIES[name] = factory


def known_names(kind: str) -> list[str]:
    return sorted(WORLDS if kind == "world" else POLICIES)


def build_agents(config: ExperimentConfig, shared: dict[str, Any] | None = None) -> dict[str, Any]:
    """One policy per agent id; ``shared`` holds what agents share (the gateway stack)."""
    shared = {} if shared is None else shared
    plan = shared.get("plan") or agent_plan(config, shared)
    shared["plan"] = plan
    return {p.agent_id: POLICIES[p.group.policy](config, p, shared) for p in plan}


def build_world(config: ExperimentConfig, shared: dict[str, Any] | None = None) -> Any:
    """The world; a world that refuses its ``world_options`` is a one-line ``ConfigError``."""
    shared = {} if shared is None else shared
    plan = shared.get("plan") or agent_plan(config, shared)
    shared["plan"] = plan
    try:
        return WORLDS[config.world](config, plan, shared)
    except Exception as exc:
        if isinstance(exc, VivariumError) or not config.world_options:
            raise
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ConfigError(
            f"config: world_options: world '{config.world}' refused them: "
            f"{type(exc).__name__}: {text}"
        ) from None
