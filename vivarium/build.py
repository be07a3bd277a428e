"""From a config to a world and its agents: worlds and policies by name.

A config names its world and policies (``world: ecology``, ``policy: random``). The built-in ones
are the tables ``BUILTIN_WORLDS`` and ``BUILTIN_POLICIES``: each factory imports its world or
policy when called, so ``import vivarium.build`` stays light. A notebook, a script or a plugin
adds its own with ``register_world`` / ``register_policy`` (``WORLDS`` and ``POLICIES`` hold only
those, and shadow a built-in of the same name). Config validation knows none of this: a name is
checked when the run is built (``check_names``), with one line that lists the known names.
A world or policy given as a Python object (``Experiment(world=MyWorld)``) is named by its
reference and built by ``vivarium.objects``.

The run's agents come from its plan (``vivarium.plan.agent_plan``), each with its seeds: a
policy factory takes the seed it needs from the planned agent, and ``recorded_seeds`` tells the
engine which seed each agent runs on, for the trace's agents table. Factories share a dict
(``shared``) for what one run's agents have in common: the plan, the gateway stack, loaded agent
specs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from vivarium.config import LLMConfig
from vivarium.errors import ConfigError, VivariumError
from vivarium.objects import OBJECTS, suggest
from vivarium.plan import PlannedAgent, agent_plan, load_spec

if TYPE_CHECKING:
    from vivarium.config import ExperimentConfig
    from vivarium.gateways.stack import GatewaySettings
    from vivarium.seeding import AgentSeeds

__all__ = [
    "BUILTIN_POLICIES",
    "BUILTIN_WORLDS",
    "POLICIES",
    "RANDOM_ACTION_SPACES",
    "WORLDS",
    "BuiltinPolicy",
    "PlannedAgent",
    "PolicyFactory",
    "WorldFactory",
    "agent_plan",
    "build_agents",
    "build_world",
    "check_names",
    "gateway_settings",
    "known_names",
    "load_spec",
    "policy_factory",
    "random_action_space",
    "recorded_seeds",
    "register_policy",
    "register_world",
    "shared_gateway",
    "world_factory",
]

WorldFactory = Callable[["ExperimentConfig", list[PlannedAgent], dict[str, Any]], Any]
"""``factory(config, plan, shared)`` returns the world of a run."""

PolicyFactory = Callable[["ExperimentConfig", PlannedAgent, dict[str, Any]], Any]
"""``factory(config, planned_agent, shared)`` returns the policy of one agent."""


def gateway_settings(llm: LLMConfig) -> GatewaySettings:
    """The gateway stack's settings for an ``llm`` config section (the gateways know no config).

    Args:
        llm: The run's LLM section.

    Returns:
        Plain settings for ``vivarium.gateways.stack.build_gateway``.
    """
    from vivarium.gateways.stack import GatewaySettings

    return GatewaySettings(
        model=llm.model,
        mock=llm.uses_mock,
        mock_latency_ms=llm.mock_latency_ms,
        api_base=tuple(llm.api_bases) if len(llm.api_bases) > 1 else llm.api_base,
        api_key=llm.api_key.get_secret_value() if llm.api_key else None,
        transport=llm.transport,
        timeout=llm.timeout,
        retries=llm.num_retries,
        requests_per_minute=llm.rate_limit_rpm,
        tokens_per_minute=llm.rate_limit_tpm,
        cache=llm.cache,
        cache_mode=llm.cache_mode,
    )


def shared_gateway(config: ExperimentConfig, shared: dict[str, Any]) -> Any:
    """The run's one gateway stack, built on first use and shared by every agent.

    Args:
        config: The experiment config (its ``llm`` section; none: the mock LLM).
        shared: What one run's builders share; holds the stack under ``"gateway"``.

    Returns:
        The gateway stack.
    """
    if "gateway" not in shared:
        from vivarium.gateways.stack import build_gateway

        llm = config.llm or LLMConfig(mock=True)
        shared["gateway"] = build_gateway(gateway_settings(llm), config.seed)
    return shared["gateway"]


# -- built-in worlds ----------------------------------------------------------------------------
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


def _boltzmann_world(
    config: ExperimentConfig, plan: list[PlannedAgent], shared: dict[str, Any]
) -> Any:
    from vivarium.worlds.boltzmann import BoltzmannWorld

    return BoltzmannWorld([p.agent_id for p in plan], **dict(config.world_options))


# -- built-in policies --------------------------------------------------------------------------
# What random agents draw from in a world when the config names no action space: the world's
# actions they can make arguments for (vivarium.policies.random.ARGUMENT_MAKERS). Worlds not
# listed get the channel's noop/emit_event.
RANDOM_ACTION_SPACES: dict[str, tuple[str, ...]] = {
    "ecology": ("noop", "read_artifact", "write_artifact", "invoke_artifact", "post_message"),
}


def random_action_space(world: str) -> tuple[str, ...]:
    """The actions random agents draw from in ``world`` by default.

    Args:
        world: The world's name.

    Returns:
        The action names.
    """
    from vivarium.policies.random import DEFAULT_ACTION_SPACE

    return RANDOM_ACTION_SPACES.get(world, DEFAULT_ACTION_SPACE)


def _random_policy(config: ExperimentConfig, agent: PlannedAgent, shared: dict[str, Any]) -> Any:
    from vivarium.policies.random import RandomAgentPolicy

    space = agent.group.action_space or config.action_space or random_action_space(config.world)
    return RandomAgentPolicy.from_seed(agent.seeds.agent, space)


def _boltzmann_policy(config: ExperimentConfig, agent: PlannedAgent, shared: dict[str, Any]) -> Any:
    from vivarium.worlds.boltzmann import BoltzmannPolicy

    ids = shared.get("boltzmann_ids")
    if ids is None:
        ids = shared["boltzmann_ids"] = [p.agent_id for p in shared["plan"]]
    return BoltzmannPolicy(agent.agent_id, ids, agent.seeds.agent)


def _cognitive_policy(config: ExperimentConfig, agent: PlannedAgent, shared: dict[str, Any]) -> Any:
    from vivarium.policies.cognitive import (
        CognitiveAgentPolicy,
        CognitivePolicyConfig,
        SimpleCognitivePolicy,
        langgraph_available,
    )

    llm = config.llm or LLMConfig(mock=True)
    explicit = agent.group.action_space or config.action_space

    policy_config = CognitivePolicyConfig(
        model=llm.model,
        temperature=llm.temperature,
        max_tokens=llm.max_tokens,
        system_prompt=llm.system_prompt,
        force_tool=llm.force_tool,
        seed=agent.seeds.llm,
        # LLM agents see every tool of the world unless the config names an action space.
        tools=list(explicit) if explicit else None,
    )
    gateway = shared_gateway(config, shared)
    cls = CognitiveAgentPolicy if llm.graph and langgraph_available() else SimpleCognitivePolicy
    return cls(gateway, policy_config)


def _workflow_policy(config: ExperimentConfig, agent: PlannedAgent, shared: dict[str, Any]) -> Any:
    from vivarium.workflow.policy import WorkflowPolicy

    if not agent.group.agent:
        raise ConfigError(
            "config: agents: a workflow group needs 'agent: <folder with agent.yaml>'"
        )

    spec = load_spec(agent.group.agent, shared)
    llm = config.llm or LLMConfig(mock=True)
    return WorkflowPolicy(
        spec,
        shared_gateway(config, shared),
        seed=agent.seeds.llm,
        request_seed=agent.seeds.workflow_request,
        model=llm.model,
        temperature=llm.temperature,
        max_tokens=llm.max_tokens,
    )


def _agent_seed(seeds: AgentSeeds) -> int:
    return seeds.agent


def _llm_seed(seeds: AgentSeeds) -> int:
    return seeds.llm


@dataclass(frozen=True, slots=True)
class BuiltinPolicy:
    """A built-in policy: how to make it, and which of an agent's seeds it runs on.

    Attributes:
        factory: Makes the policy of one planned agent.
        seed: Picks, from the agent's seeds, the one the trace's agents table records (for LLM
            agents the seed the provider receives, or the one a workflow agent derives its
            request seeds from).
    """

    factory: PolicyFactory
    seed: Callable[[AgentSeeds], int]


BUILTIN_WORLDS: Mapping[str, WorldFactory] = MappingProxyType(
    {"boltzmann": _boltzmann_world, "channel": _channel_world, "ecology": _ecology_world}
)
"""The worlds every run knows: name -> factory."""

BUILTIN_POLICIES: Mapping[str, BuiltinPolicy] = MappingProxyType(
    {
        "boltzmann": BuiltinPolicy(_boltzmann_policy, _agent_seed),
        "cognitive": BuiltinPolicy(_cognitive_policy, _llm_seed),
        "random": BuiltinPolicy(_random_policy, _agent_seed),
        "workflow": BuiltinPolicy(_workflow_policy, _llm_seed),
    }
)
"""The policies every run knows: name -> factory and seed."""


# -- registered by users ------------------------------------------------------------------------
WORLDS: dict[str, WorldFactory] = {}
"""Worlds registered in this process (``register_world``); a sweep sends them to its workers."""

POLICIES: dict[str, PolicyFactory] = {}
"""Policies registered in this process (``register_policy``); sent to a sweep's workers too."""


def register_world(name: str, factory: WorldFactory) -> None:
    """Make ``world=name`` available in this process (it shadows a built-in of that name).

    Args:
        name: The name configs use.
        factory: ``factory(config, plan, shared)`` returns the world.
    """
    WORLDS[name] = factory


def register_policy(name: str, factory: PolicyFactory) -> None:
    """Make ``policy=name`` available in this process (it shadows a built-in of that name).

    Args:
        name: The name configs use.
        factory: ``factory(config, planned_agent, shared)`` returns one agent's policy; the
            planned agent carries its seeds (``planned_agent.seeds.agent``, ``.llm``).
    """
    POLICIES[name] = factory


# -- lookup -------------------------------------------------------------------------------------
def known_names(kind: str) -> list[str]:
    """The world or policy names a config may use here: the built-in and registered ones.

    Args:
        kind: ``"world"``, or ``"policy"`` (any other word).

    Returns:
        The names, sorted.
    """
    if kind == "world":
        return sorted({*BUILTIN_WORLDS, *WORLDS})
    return sorted({*BUILTIN_POLICIES, *POLICIES})


def _unknown(kind: str, where: str, name: str) -> str:
    hint = suggest("world" if kind == "world" else "policy", name, known_names(kind))
    return f"{where}: unknown {kind} '{name}' {hint}"


def _object_world(name: str) -> WorldFactory | None:
    entry = OBJECTS.get(name)
    if entry is None or entry.kind != "world":
        return None
    return lambda config, plan, shared: entry.build_world(config, plan)


def _object_policy(name: str) -> PolicyFactory | None:
    entry = OBJECTS.get(name)
    if entry is None or entry.kind != "policy":
        return None
    return lambda config, agent, shared: entry.build_policy(agent)


def world_factory(name: str) -> WorldFactory:
    """The factory of world ``name``: a registered one, else the built-in one.

    Args:
        name: The world's name in the config.

    Returns:
        The factory.

    Raises:
        ConfigError: No world has that name (one line, listing the known names).
    """
    factory = WORLDS.get(name) or BUILTIN_WORLDS.get(name) or _object_world(name)
    if factory is None:
        raise ConfigError(f"config: {_unknown('world', 'world', name)}")
    return factory


def policy_factory(name: str) -> PolicyFactory:
    """The factory of policy ``name``: a registered one, else the built-in one.

    Args:
        name: The policy's name in the config.

    Returns:
        The factory.

    Raises:
        ConfigError: No policy has that name (one line, listing the known names).
    """
    factory = POLICIES.get(name) or _object_policy(name)
    if factory is not None:
        return factory
    builtin = BUILTIN_POLICIES.get(name)
    if builtin is None:
        raise ConfigError(f"config: {_unknown('policy', 'policy', name)}")
    return builtin.factory


def check_names(config: ExperimentConfig, where: str = "config") -> None:
    """Check that the world and every policy ``config`` names exist here.

    Config validation does not know which names exist (a notebook may register its own after
    the config is made): the run checks them when it is built.

    Args:
        config: The experiment config.
        where: What the error message starts with (the config's file, a sweep's run).

    Raises:
        ConfigError: One line naming every unknown name and where it is (``world``,
            ``policy``, ``agents.1.policy``), with the known names.
    """
    problems = []
    if (
        config.world not in WORLDS
        and config.world not in BUILTIN_WORLDS
        and _object_world(config.world) is None
    ):
        problems.append(_unknown("world", "world", config.world))
    names = [("policy", config.policy)]
    if isinstance(config.agents, list):
        names += [(f"agents.{i}.policy", g.policy) for i, g in enumerate(config.agents)]
    for field, name in names:
        if name not in POLICIES and name not in BUILTIN_POLICIES and _object_policy(name) is None:
            problems.append(_unknown("policy", field, name))
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems))


# -- building -----------------------------------------------------------------------------------
def _plan(config: ExperimentConfig, shared: dict[str, Any]) -> list[PlannedAgent]:
    plan = shared.get("plan")
    if plan is None:
        check_names(config)
        plan = shared["plan"] = agent_plan(config, shared)
    return plan


def build_agents(config: ExperimentConfig, shared: dict[str, Any] | None = None) -> dict[str, Any]:
    """One policy per planned agent.

    Args:
        config: The experiment config.
        shared: What the run's builders share (the plan, the gateway stack); the caller
            closes the gateway when the run ends.

    Returns:
        Agent id -> policy, in the plan's order.

    Raises:
        ConfigError: A name the config uses is unknown, or the plan is refused.
    """
    shared = {} if shared is None else shared
    plan = _plan(config, shared)
    return {p.agent_id: policy_factory(p.group.policy)(config, p, shared) for p in plan}


def build_world(config: ExperimentConfig, shared: dict[str, Any] | None = None) -> Any:
    """The world of the run, built for its planned agents.

    Args:
        config: The experiment config.
        shared: What the run's builders share (the plan, loaded agent specs).

    Returns:
        The world.

    Raises:
        ConfigError: A name the config uses is unknown, or the world refuses its
            ``world_options`` (one line).
    """
    shared = {} if shared is None else shared
    plan = _plan(config, shared)
    factory = world_factory(config.world)
    try:
        return factory(config, plan, shared)
    except Exception as exc:
        if isinstance(exc, VivariumError) or not config.world_options:
            raise
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ConfigError(
            f"config: world_options: world '{config.world}' refused them: "
            f"{type(exc).__name__}: {text}"
        ) from None


def recorded_seeds(plan: Sequence[PlannedAgent]) -> dict[str, int]:
    """The seed each agent of a built-in policy runs on, for the trace's agents table.

    An agent of a policy given as an object runs on its agent seed (the ``seed`` it is
    offered). An agent of a registered policy is left out: the engine records what its policy
    reports (its ``seed``, or ``request_seed(agent_id)``).

    Args:
        plan: The run's planned agents.

    Returns:
        Agent id -> seed.
    """
    seeds = {}
    for p in plan:
        builtin = BUILTIN_POLICIES.get(p.group.policy)
        if p.group.policy in POLICIES:
            continue
        if builtin is not None:
            seeds[p.agent_id] = builtin.seed(p.seeds)
        else:
            entry = OBJECTS.get(p.group.policy)
            if entry is not None and entry.kind == "policy" and entry.form != "instance":
                seeds[p.agent_id] = p.seeds.agent
    return seeds
