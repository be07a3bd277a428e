"""What a world and its policies can do: checked once, when an engine is built.

The contracts are the protocols of ``vivarium.worlds.base`` and ``vivarium.policies.base``.
Here they are checked against the objects of one run, and the answers kept in small frozen
records the engine reads instead of probing objects while it steps. A missing required
method, or half of a capability (``snapshot`` without ``restore``), is a one-line
``ConfigError`` that names the method, before any step runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol

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
from vivarium.worlds.base import (
    ActionWorld,
    BatchWorld,
    CheckpointableWorld,
    LLMQuotaWorld,
    MessagingWorld,
    World,
    world_name,
)
from vivarium.worlds.registry import ActionRegistry


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
    """

    name: str
    registry: ActionRegistry | None
    messages: bool
    checkpoints: bool
    llm_quota: bool
    batch: bool


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


def protocol_members(protocol: type) -> tuple[str, ...]:
    """The public methods and attributes a protocol declares, in declaration order."""
    names: dict[str, None] = {}
    for base in reversed(protocol.__mro__):
        if base in (object, Protocol, Generic):
            continue
        for name in (*vars(base).get("__annotations__", {}), *vars(base)):
            if not name.startswith("_"):
                names[name] = None
    return tuple(names)


def _is_method(protocol: type, name: str) -> bool:
    member = vars(protocol).get(name)
    return callable(member) or isinstance(member, classmethod | staticmethod)


def _lacking(obj: object, protocol: type) -> list[str]:
    """The members of ``protocol`` that ``obj`` lacks.

    A method it has as something that cannot be called counts as lacking.
    """
    return [
        name
        for name in protocol_members(protocol)
        if not hasattr(obj, name)
        or (_is_method(protocol, name) and not callable(getattr(obj, name)))
    ]


def _called(name: str, protocol: type) -> str:
    return f"{name}()" if _is_method(protocol, name) else name


def _has(obj: object, protocol: type, owner: str) -> bool:
    """Whether ``obj`` implements ``protocol``; half of it is a ``ConfigError``."""
    lacking = _lacking(obj, protocol)
    if not lacking:
        return True
    members = protocol_members(protocol)
    if len(lacking) == len(members):
        return False
    present = next(m for m in members if m not in lacking)
    raise ConfigError(
        f"{owner} has {_called(present, protocol)} but no {_called(lacking[0], protocol)} "
        f"method (a {protocol.__name__} needs {', '.join(_called(m, protocol) for m in members)})"
    )


def _require(obj: object, protocol: type, owner: str) -> None:
    for name in _lacking(obj, protocol):
        raise ConfigError(f"{owner} has no {_called(name, protocol)} method")


def check_world(world: object) -> WorldCapabilities:
    """Check ``world`` against the World contract; return what else it can do.

    Raises:
        ConfigError: A method of ``World`` is missing, or half of a capability.
    """
    owner = f"world {type(world).__name__}"
    _require(world, World, owner)
    registry = world.registry if isinstance(world, ActionWorld) else None
    return WorldCapabilities(
        name=world_name(world),
        registry=registry if isinstance(registry, ActionRegistry) else None,
        messages=_has(world, MessagingWorld, owner),
        checkpoints=_has(world, CheckpointableWorld, owner),
        llm_quota=_has(world, LLMQuotaWorld, owner),
        batch=_has(world, BatchWorld, owner),
    )


@dataclass(frozen=True, slots=True)
class _ClassCapabilities:
    """What a policy class offers; the same for every instance, so checked once per class."""

    methods: PolicyCapabilities  # with the instance-level members False
    has_agent_state_flag: bool
    has_gateway: bool


def _class_capabilities(policy: object, owner: str) -> _ClassCapabilities:
    _require(policy, AgentPolicy, owner)
    return _ClassCapabilities(
        methods=PolicyCapabilities(
            is_async=_has(policy, AsyncAgentPolicy, owner),
            stateful=_has(policy, StatefulPolicy, owner),
            uses_world_actions=_has(policy, UsesWorldActions, owner),
            batch=_has(policy, BatchPolicy, owner),
        ),
        has_agent_state_flag=isinstance(policy, UsesAgentState),
        has_gateway=isinstance(policy, CallsLLM),
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
