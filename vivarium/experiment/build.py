"""From a config to a world and its agents: worlds and policies by name.

A config names its world and policies (``world: ecology``, ``policy: random``). The built-in ones
are the tables ``BUILTIN_WORLDS`` and ``BUILTIN_POLICIES``: each factory imports its world or
policy when called, so ``import vivarium.experiment.build`` stays light. A notebook, a script or a plugin
adds its own with ``register_world`` / ``register_policy`` (``WORLDS`` and ``POLICIES`` hold only
those, and shadow a built-in of the same name). Config validation knows none of this: a name is
checked when the run is built (``check_names``), with one line that lists the known names.
A world or policy given as a Python object (``Experiment(world=MyWorld)``) is named by its
reference and built by ``vivarium.experiment.objects``.

The run's agents come from its plan (``vivarium.experiment.plan.agent_plan``), each with its seeds: a
policy factory takes the seed it needs from the planned agent, and ``recorded_seeds`` tells the
engine which seed each agent runs on, for the trace's agents table. Factories share a dict
(``shared``) for what one run's agents have in common: the plan, the gateway stack, loaded agent
specs.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from vivarium.errors import ConfigError, VivariumError
from vivarium.experiment.config import LLMConfig, make_config
from vivarium.experiment.objects import OBJECTS, suggest
from vivarium.experiment.plan import PlannedAgent, agent_plan, load_spec

if TYPE_CHECKING:
    from vivarium.experiment.config import ExperimentConfig
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
    "keep_sent_digest",
    "sent_digest",
    "was_sent",
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
        api_base=llm.api_bases,
        api_key=llm.api_key.get_secret_value() if llm.api_key else None,
        transport=llm.transport,
        forced_tool_format=llm.forced_tool_format,
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

        gateway = build_gateway(gateway_settings(config.llm_in_force), config.seed)
        shared["gateway"] = _with_parent_replies(config, gateway)
    return shared["gateway"]


def _with_parent_replies(config: ExperimentConfig, gateway: Any) -> Any:
    """A fork's stack under the layer that serves what its parent asked from the parent's record.

    Only a fork that changes something (a fork without changes is its parent, copied) whose
    parent's trace is where the fork recorded it.
    """
    fork = config.fork_of
    if fork is None or fork.trace is None or config.resolved_run_id() == fork.run_id:
        return gateway
    from vivarium.gateways.parent_replies import ParentRepliesGateway
    from vivarium.gateways.recorded import split_calls
    from vivarium.trace.resume import recorded_calls
    from vivarium.trace.run import read_run_record

    parent = Path(fork.trace)
    done = int(read_run_record(parent)["steps_done"])
    calls = (
        call
        for _, decisions in recorded_calls(parent, fork.step, done)
        for rows in decisions.values()
        for call in split_calls(rows)
    )
    return ParentRepliesGateway(gateway, calls)


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
    # The world's own actions: the channel's emit_event is not one of them.
    "boltzmann": ("noop", "give"),
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
        SimpleCognitivePolicy,
        langgraph_available,
    )

    llm = config.llm_in_force
    gateway = shared_gateway(config, shared)
    cls = CognitiveAgentPolicy if llm.graph and langgraph_available() else SimpleCognitivePolicy
    return cls(gateway, _cognitive_config(config, agent, own_options=True))


def _cognitive_config(
    config: ExperimentConfig, agent: PlannedAgent, *, own_options: bool = False
) -> Any:
    """The ``CognitivePolicyConfig`` of one agent: the run's ``llm`` section and its LLM seed.

    With ``own_options`` (the built-in cognitive policy), its group's ``policy_options`` over
    them; a policy class of one's own gets its options as keywords instead.
    """
    from vivarium.policies.cognitive import CognitivePolicyConfig

    llm = config.llm_in_force
    explicit = agent.group.action_space or config.action_space
    fields: dict[str, Any] = {
        "model": llm.model,
        "temperature": llm.temperature,
        "max_tokens": llm.max_tokens,
        "system_prompt": llm.system_prompt,
        "force_tool": llm.force_tool,
        "seed": agent.seeds.llm,
        # LLM agents see every tool of the world unless the config names an action space.
        "tools": list(explicit) if explicit else None,
    }
    if not own_options:
        return CognitivePolicyConfig(**fields)
    # The group's own options (one agent's prompt or model, as a fork gives it) over the run's;
    # which it may give, ``BUILTIN_POLICIES`` says (``BuiltinPolicy.check_options``).
    options = dict(agent.group.policy_options)
    return make_config(
        CognitivePolicyConfig, {**fields, **options}, where=f"policy of {agent.agent_id}"
    )


def _workflow_policy(config: ExperimentConfig, agent: PlannedAgent, shared: dict[str, Any]) -> Any:
    from vivarium.workflow.policy import WorkflowPolicy

    if not agent.group.agent:
        raise ConfigError(
            "config: agents: a workflow group needs 'agent: <folder with agent.yaml>'"
        )

    spec = load_spec(agent.group.agent, shared)
    llm = config.llm_in_force
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
    options: frozenset[str] = frozenset()

    def check_options(self, name: str, agent: PlannedAgent) -> None:
        """Refuse, in one line, ``policy_options`` this policy does not take (never ignored).

        Raises:
            ConfigError: A group gives an option not in ``options``.
        """
        unknown = sorted(set(agent.group.policy_options) - self.options)
        if unknown:
            takes = ", ".join(sorted(self.options)) or "none"
            raise ConfigError(
                f"config: policy_options {', '.join(unknown)} do not apply to the {name} "
                f"policy of {agent.agent_id} (it takes {takes})"
            )


BUILTIN_WORLDS: Mapping[str, WorldFactory] = MappingProxyType(
    {"boltzmann": _boltzmann_world, "channel": _channel_world, "ecology": _ecology_world}
)
"""The worlds every run knows: name -> factory."""

BUILTIN_POLICIES: Mapping[str, BuiltinPolicy] = MappingProxyType(
    {
        "boltzmann": BuiltinPolicy(_boltzmann_policy, _agent_seed),
        "cognitive": BuiltinPolicy(
            _cognitive_policy,
            _llm_seed,
            # An agent's own LLM settings (``CognitivePolicyConfig``): its prompt, its model.
            frozenset(
                {
                    "model",
                    "temperature",
                    "max_tokens",
                    "system_prompt",
                    "force_tool",
                    "memory_k",
                    "memory_query",
                    "working_memory_bytes",
                    "context_tokens",
                }
            ),
        ),
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
    _SENT.pop(("world", name), None)


def register_policy(name: str, factory: PolicyFactory) -> None:
    """Make ``policy=name`` available in this process (it shadows a built-in of that name).

    The factory's code, and every value it reads (see ``vivarium.experiment.digest``), as they are when
    a run starts, are part of the id of every run that uses the name: a run of an edited
    factory, or of one whose notebook globals changed, is a new run, and a resume refuses one
    that changed.

    Args:
        name: The name configs use.
        factory: ``factory(config, planned_agent, shared)`` returns one agent's policy; the
            planned agent carries its seeds (``planned_agent.seeds.agent``, ``.llm``).
    """
    POLICIES[name] = factory
    _SENT.pop(("policy", name), None)


# -- the digests a sweep sent with its factories (``vivarium.experiment.identity`` reads them) ---

_SENT: dict[tuple[str, str], tuple[Any, str]] = {}
"""(kind, name) -> (factory, digest) for the factories a sweep process sent to this worker."""


def keep_sent_digest(kind: str, name: str, factory: Any, digest: str) -> None:
    """Use ``digest`` for ``factory`` registered under ``name``, as the sweep process named it.

    A worker's copy of a factory from a script or a notebook is not in the file it came from
    (its ``__main__`` is the worker's), so its digest is the one computed where it was defined:
    the worker's run ids are then the sweep's.

    Args:
        kind: ``"world"`` or ``"policy"``.
        name: The registered name.
        factory: The factory registered under it in this process.
        digest: Its digest in the sweep process (``factory_digest``).
    """
    _SENT[(kind, name)] = (factory, digest)


def sent_digest(kind: str, name: str, factory: Any) -> str | None:
    """The digest a sweep process sent for ``factory`` under ``name``.

    Returns:
        The digest, or None (none sent, or another factory registered under the name since).
    """
    sent = _SENT.get((kind, name))
    return sent[1] if sent is not None and sent[0] is factory else None


def was_sent(kind: str, name: str) -> bool:
    """Whether the factory under ``name`` came from a sweep process (its digest with it)."""
    return (kind, name) in _SENT


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
    llm = _llm_keywords(entry.obj) if entry.form != "instance" else ()
    if not llm:
        return lambda config, agent, shared: entry.build_policy(agent)

    def build(config: ExperimentConfig, agent: PlannedAgent, shared: dict[str, Any]) -> Any:
        # An LLM policy of one's own gets what the built-in one does: the run's gateway stack
        # (built from ``llm=``) and, for a CognitiveAgentPolicy subclass, its config. Options
        # the group gives by the same names win. A ``gateway`` with a default is given only
        # with ``llm=``: without one, the class makes its own client (never the mock behind
        # its back); a required one gets the stack the built-in policy would (the mock).
        given = {}
        if config.llm is not None or not _optional_gateway(entry.obj):
            given["gateway"] = shared_gateway(config, shared)
        if "config" in llm:
            given["config"] = _cognitive_config(config, agent)
        options = {**given, **agent.group.policy_options}
        group = agent.group.model_copy(update={"policy_options": options})
        return entry.build_policy(replace(agent, group=group))

    return build


def _llm_keywords(target: Any) -> tuple[str, ...]:
    """What a policy class or factory given as an object takes of an LLM policy's making.

    ``gateway`` when its signature names it; ``config`` too when it is a subclass of the
    built-in cognitive policies (whose ``config`` is a ``CognitivePolicyConfig``). Read once
    per class (it is asked for every agent).
    """
    try:
        return _cached_llm_keywords(target)
    except TypeError:  # an unhashable callable
        return _read_llm_keywords(target)


def _read_llm_keywords(target: Any) -> tuple[str, ...]:
    try:
        names = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return ()
    if "gateway" not in names:
        return ()
    if "config" in names and isinstance(target, type) and _is_cognitive(target):
        return ("gateway", "config")
    return ("gateway",)


_cached_llm_keywords = functools.lru_cache(maxsize=256)(_read_llm_keywords)


def _optional_gateway(target: Any) -> bool:
    """Whether ``target``'s ``gateway`` parameter has a default (it can make its own client).

    Read once per class, as ``_llm_keywords`` is.
    """
    try:
        return _cached_optional_gateway(target)
    except TypeError:  # an unhashable callable
        return _read_optional_gateway(target)


def _read_optional_gateway(target: Any) -> bool:
    try:
        param = inspect.signature(target).parameters.get("gateway")
    except (TypeError, ValueError):
        return False
    return param is not None and param.default is not inspect.Parameter.empty


_cached_optional_gateway = functools.lru_cache(maxsize=256)(_read_optional_gateway)


def _is_cognitive(cls: type) -> bool:
    """Whether ``cls`` is a built-in cognitive policy's subclass (without importing them)."""
    return any(
        base.__module__ == "vivarium.policies.cognitive"
        and base.__name__ in ("CognitiveAgentPolicy", "SimpleCognitivePolicy", "_CognitiveCore")
        for base in cls.__mro__
    )


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

    def checked(config: ExperimentConfig, agent: PlannedAgent, shared: dict[str, Any]) -> Any:
        builtin.check_options(name, agent)
        return builtin.factory(config, agent, shared)

    return checked


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


def recorded_seeds(plan: Sequence[PlannedAgent], agents: Mapping[str, Any]) -> dict[str, Any]:
    """The seed each agent of a run runs on, as the trace's agents table records it.

    The one place this is decided, for every agent of a run (the engine records it as given):

    - an agent of a built-in policy: the seed its factory gives it (``BuiltinPolicy.seed``:
      the agent seed of random and Boltzmann agents, the LLM seed of cognitive and workflow
      agents);
    - an agent of a policy class or factory given as an object: the ``seed`` Vivarium offers
      it, its agent seed (a subclass of the cognitive policy: the LLM seed its config carries);
    - an agent of a registered factory, or of a policy given as an instance, whose seed
      Vivarium did not choose: what its policy reports (``policies.base.policy_seed``: its
      ``seed``, or ``request_seed(agent_id)``; None when it reports none).

    Args:
        plan: The run's planned agents.
        agents: Their policies, by agent id (``build_agents``).

    Returns:
        Agent id -> seed (None: recorded as NULL), for every planned agent.
    """
    from vivarium.policies.base import policy_seed

    seeds: dict[str, Any] = {}
    for p in plan:
        builtin = BUILTIN_POLICIES.get(p.group.policy)
        entry = OBJECTS.get(p.group.policy)
        if p.group.policy in POLICIES:  # registered: shadows a built-in of its name
            seeds[p.agent_id] = policy_seed(agents[p.agent_id], p.agent_id)
        elif builtin is not None:
            seeds[p.agent_id] = builtin.seed(p.seeds)
        elif entry is not None and entry.kind == "policy" and entry.form != "instance":
            # A cognitive subclass runs on the LLM seed its config carries (see above).
            llm = "config" in _llm_keywords(entry.obj)
            seeds[p.agent_id] = p.seeds.llm if llm else p.seeds.agent
        else:
            seeds[p.agent_id] = policy_seed(agents[p.agent_id], p.agent_id)
    return seeds
