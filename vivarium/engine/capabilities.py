"""What a world and its policies can do: checked once, when an engine is built.

The contracts are the protocols of ``vivarium.worlds.base`` and ``vivarium.policies.base``.
Here they are checked against the objects of one run (``vivarium.protocols``), and the answers
kept in small frozen records the engine reads instead of probing objects while it steps. A
missing required method, half of a capability (``snapshot`` without ``restore``), or a
capability of the wrong shape (``model_reporters`` that is not a mapping of names to callables)
is a one-line ``ConfigError`` that names it, before any step runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from vivarium.engine.reporters import check_reporters
from vivarium.errors import ConfigError
from vivarium.policies.base import (
    AgentPolicy,
    AsyncAgentPolicy,
    BatchPolicy,
    CallsLLM,
    StatefulPolicy,
    UsesAgentState,
    UsesWorldActions,
)
from vivarium.protocols import implements, protocol_members, require
from vivarium.worlds.base import (
    ActionWorld,
    AgentListWorld,
    AgentReportingWorld,
    BatchWorld,
    CheckpointableWorld,
    LLMQuotaWorld,
    MessagingWorld,
    ModelReportingWorld,
    Reporter,
    World,
    world_name,
)
from vivarium.worlds.registry import ActionRegistry

__all__ = [
    "PolicyCapabilities",
    "WorldCapabilities",
    "check_policies",
    "check_world",
    "protocol_members",
]


@dataclass(frozen=True, slots=True)
class WorldCapabilities:
    """What the engine may ask of a world besides ``observe``, ``apply``, ``state_digest``.

    Attributes:
        name: The name recorded for the world.
        registry: Its action registry (``ActionWorld``), handed to LLM policies, or None.
        messages: It has ``take_messages`` (``MessagingWorld``).
        checkpoints: It has ``snapshot`` and ``restore`` (``CheckpointableWorld``).
        llm_quota: It has ``over_llm_quota`` and ``record_llm_usage`` (``LLMQuotaWorld``).
        batch: It has ``batch_actions`` and ``apply_batch`` (``BatchWorld``).
        model_reporters: Its model reporters (``ModelReportingWorld``), checked; else empty.
        agent_reporters: Its agent reporters (``AgentReportingWorld``), checked; else empty.
        agent_list: It keeps its own list of its agents (``AgentListWorld``), which its agent
            reporters' sequences follow.
    """

    name: str
    registry: ActionRegistry | None
    messages: bool
    checkpoints: bool
    llm_quota: bool
    batch: bool
    model_reporters: Mapping[str, Reporter] = field(default_factory=dict)
    agent_reporters: Mapping[str, Reporter] = field(default_factory=dict)
    agent_list: bool = False


@dataclass(frozen=True, slots=True)
class PolicyCapabilities:
    """What the engine may ask of one agent's policy besides ``decide``.

    Attributes:
        is_async: It has ``adecide``, awaited instead of ``decide``.
        uses_agent_state: The engine keeps its agent state (``uses_agent_state`` is true).
        stateful: It has ``get_state`` and ``set_state``, saved in checkpoints.
        uses_world_actions: It takes the world's action registry (``use_world_actions``).
        calls_llm: It holds a gateway that is not None.
        batch: Its class can decide for many agents at once (``batch_decider``).
    """

    is_async: bool = False
    uses_agent_state: bool = False
    stateful: bool = False
    uses_world_actions: bool = False
    calls_llm: bool = False
    batch: bool = False


def check_world(world: object) -> WorldCapabilities:
    """Check ``world`` against the World contract; return what else it can do.

    Raises:
        ConfigError: A method of ``World`` is missing, half of a capability, or a capability
            of the wrong shape (reporters that are not a mapping of names to callables, an
            ``agent_ids`` that is not a list of ids).
    """
    owner = f"world {type(world).__name__}"
    require(world, World, owner)
    registry = world.registry if implements(world, ActionWorld) else None
    model = world.model_reporters if implements(world, ModelReportingWorld) else None
    agent = world.agent_reporters if implements(world, AgentReportingWorld) else None
    agent_list = implements(world, AgentListWorld)
    if agent_list:
        _check_agent_ids(world.agent_ids, owner)
    return WorldCapabilities(
        name=world_name(world),
        registry=registry if isinstance(registry, ActionRegistry) else None,
        messages=implements(world, MessagingWorld, owner),
        checkpoints=implements(world, CheckpointableWorld, owner),
        llm_quota=implements(world, LLMQuotaWorld, owner),
        batch=implements(world, BatchWorld, owner),
        model_reporters=check_reporters(model, "model_reporters"),
        agent_reporters=check_reporters(agent, "agent_reporters"),
        agent_list=agent_list,
    )


def _check_agent_ids(ids: object, owner: str) -> None:
    """Refuse an ``agent_ids`` that is no list of agent ids (None is fine: no list for now).

    Raises:
        ConfigError: names what it is instead (one line).
    """
    if ids is None or (isinstance(ids, Iterable) and not isinstance(ids, str | bytes)):
        return
    raise ConfigError(
        f"{owner}: agent_ids is {type(ids).__name__}, not a sequence of agent ids "
        "(an AgentListWorld lists its agents in the order its agent reporters follow)"
    )


@dataclass(frozen=True, slots=True)
class _ClassCapabilities:
    """What a policy class offers; the same for every instance, so checked once per class."""

    methods: PolicyCapabilities  # with the instance-level members False
    has_agent_state_flag: bool
    has_gateway: bool


def _class_capabilities(policy: object, owner: str) -> _ClassCapabilities:
    require(policy, AgentPolicy, owner)
    return _ClassCapabilities(
        methods=PolicyCapabilities(
            is_async=implements(policy, AsyncAgentPolicy, owner),
            stateful=implements(policy, StatefulPolicy, owner),
            uses_world_actions=implements(policy, UsesWorldActions, owner),
            batch=implements(policy, BatchPolicy, owner),
        ),
        has_agent_state_flag=implements(policy, UsesAgentState),
        has_gateway=implements(policy, CallsLLM),
    )


def check_policies(agent_ids: Sequence[str], policies: Sequence[Any]) -> list[PolicyCapabilities]:
    """Check every agent's policy against the policy contract; return what each can do.

    Methods are checked once per policy class (10,000 random agents are one check); the
    values of ``uses_agent_state`` and ``gateway`` are read from each policy.

    Raises:
        ConfigError: A policy has no ``decide``, or half of a capability.
    """
    by_class: dict[type, _ClassCapabilities] = {}
    out: list[PolicyCapabilities] = []
    for agent_id, policy in zip(agent_ids, policies, strict=True):
        kind = by_class.get(type(policy))
        if kind is None:
            kind = by_class[type(policy)] = _class_capabilities(policy, f"policy for {agent_id}")
        caps = kind.methods
        state = kind.has_agent_state_flag and bool(policy.uses_agent_state)
        llm = kind.has_gateway and policy.gateway is not None
        if state or llm:
            caps = replace(caps, uses_agent_state=state, calls_llm=llm)
        out.append(caps)
    return out
