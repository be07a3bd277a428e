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

import functools
import hashlib
import inspect
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from vivarium.config import LLMConfig, add_code_digests
from vivarium.errors import ConfigError, VivariumError
from vivarium.objects import OBJECTS, _module_text, fingerprint, suggest
from vivarium.objects import _from_a_library as _library_code
from vivarium.plan import PlannedAgent, agent_plan, load_spec

if TYPE_CHECKING:
    from vivarium.config import ExperimentConfig
    from vivarium.gateways.stack import GatewaySettings
    from vivarium.seeding import AgentSeeds

__all__ = [
    "BEHAVIOUR_CODE",
    "BUILTIN_POLICIES",
    "CODE_META_KEY",
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
    "changed_code",
    "check_names",
    "factory_digest",
    "gateway_settings",
    "keep_sent_digest",
    "known_names",
    "load_spec",
    "package_code_digest",
    "policy_factory",
    "random_action_space",
    "recorded_seeds",
    "register_policy",
    "registered_digests",
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
        SimpleCognitivePolicy,
        langgraph_available,
    )

    llm = config.llm or LLMConfig(mock=True)
    gateway = shared_gateway(config, shared)
    cls = CognitiveAgentPolicy if llm.graph and langgraph_available() else SimpleCognitivePolicy
    return cls(gateway, _cognitive_config(config, agent))


def _cognitive_config(config: ExperimentConfig, agent: PlannedAgent) -> Any:
    """The ``CognitivePolicyConfig`` of one agent: the run's ``llm`` section and its LLM seed."""
    from vivarium.policies.cognitive import CognitivePolicyConfig

    llm = config.llm or LLMConfig(mock=True)
    explicit = agent.group.action_space or config.action_space
    return CognitivePolicyConfig(
        model=llm.model,
        temperature=llm.temperature,
        max_tokens=llm.max_tokens,
        system_prompt=llm.system_prompt,
        force_tool=llm.force_tool,
        seed=agent.seeds.llm,
        # LLM agents see every tool of the world unless the config names an action space.
        tools=list(explicit) if explicit else None,
    )


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
    _DIGESTS[("world", name)] = (factory, _code_digest(factory))


def register_policy(name: str, factory: PolicyFactory) -> None:
    """Make ``policy=name`` available in this process (it shadows a built-in of that name).

    The factory's code (see ``factory_digest``), as it is now, is part of the id of every
    run that uses the name: a run of an edited factory is a new run, and a resume refuses one
    that changed. Register it again after changing what it uses (as running the cell or the
    script again does).

    Args:
        name: The name configs use.
        factory: ``factory(config, planned_agent, shared)`` returns one agent's policy; the
            planned agent carries its seeds (``planned_agent.seeds.agent``, ``.llm``).
    """
    POLICIES[name] = factory
    _DIGESTS[("policy", name)] = (factory, _code_digest(factory))


# -- the code of registered factories -----------------------------------------------------------
# A registered name says nothing of the code behind it, so its digest joins the run's identity
# (``ExperimentConfig.code_digests``), as a class given as an object is named by its digest.

_DIGESTS: dict[tuple[str, str], tuple[Any, str]] = {}
"""(kind, name) -> (factory, digest), taken when the factory was registered (or sent)."""


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
    _DIGESTS[(kind, name)] = (factory, digest)


def factory_digest(kind: str, name: str, factory: Any) -> str:
    """The digest of a registered factory's code, and of the code and plain data it uses.

    The factory is digested as a class or factory given as an object is (its module's source
    file, its bytecode, closures and defaults: ``vivarium.objects``), and so is, as far as can
    be followed, what it reaches through its module's globals: the classes and functions of
    user code it calls (their code and closures), and the plain values (numbers, texts, and
    containers of them) any of them reads, such as a prompt word set from ``sys.argv``. Library
    code is named by its module, as everywhere; other objects (a client, a model) are left out.

    The digest is taken when the factory is registered, as an object's is when it is named:
    what it closes over may change as runs go (a counter, a list of results) without making
    it another policy, and a resume then finds the code it recorded.

    Args:
        kind: ``"world"`` or ``"policy"``.
        name: The registered name (a digest a sweep sent for it is used: ``keep_sent_digest``).
        factory: The registered factory.

    Returns:
        16 hex digits.
    """
    known = _DIGESTS.get((kind, name))
    if known is not None and known[0] is factory:
        return known[1]
    digest = _code_digest(factory)  # put in the table by hand: taken at its first use
    _DIGESTS[(kind, name)] = (factory, digest)
    return digest


def _code_digest(factory: Any) -> str:
    """The digest ``factory_digest`` describes, of the factory as it is now.

    The source file of its module, then the fingerprints (``vivarium.objects.fingerprint``)
    of the factory (a function's closures and defaults included, a partial's arguments) and
    of what it reaches, with the names of user modules taken out of them: a module imported
    as ``tests.helpers`` in one process and ``helpers`` in another is the same code. An
    instance of a library class it holds (a gateway stack, a client) is named by its type
    (``fingerprint(..., opaque=True)``): its state differs per process (a cassette's process
    id, a connection), so a script run again, or a resume in a new process, finds its run id.
    """
    target = factory.func if isinstance(factory, functools.partial) else factory
    modules = {str(getattr(target, "__module__", "") or "")}
    parts = [fingerprint(target, opaque=True)]
    if isinstance(factory, functools.partial):
        parts.append(fingerprint((factory.args, factory.keywords), opaque=True))
    parts += [f"{key}={text}" for key, text in sorted(_reached_globals(factory, modules).items())]
    text = "\n".join(parts)
    for module in sorted(modules - {""}, key=len, reverse=True):
        text = text.replace(f"class({module}.", "class(").replace(f"<{module}.", "<")
    h = hashlib.sha256(_module_text(target) or b"")
    h.update(text.encode())
    return h.hexdigest()[:16]


_PLAIN = (type(None), bool, int, float, complex, str, bytes)


def _plain(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is plain data: a number, a text, or a small container of them."""
    if isinstance(value, _PLAIN):
        return True
    if depth > 4 or not isinstance(value, list | tuple | set | frozenset | dict):
        return False
    items = [*value.keys(), *value.values()] if isinstance(value, dict) else list(value)
    return len(items) <= 10_000 and all(_plain(v, depth + 1) for v in items)


def _code_names(code: types.CodeType) -> set[str]:
    """Every global name ``code`` and the code nested in it (lambdas, comprehensions) read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _library(obj: Any) -> bool:
    """Whether ``obj`` is library code (never what ``__main__`` defines).

    A notebook's cell or a script is user code even when ``__main__`` is an installed tool's
    file (``python -m pytest``), which ``vivarium.objects`` would count as a library.
    """
    return getattr(obj, "__module__", None) != "__main__" and _library_code(obj)


def _reached_globals(root: Any, modules: set[str]) -> dict[str, str]:
    """``qualname.name`` -> fingerprint of each user-code global and plain value ``root`` reaches.

    ``modules`` receives the names of the user modules passed through.
    """
    found: dict[str, str] = {}
    seen: set[int] = set()

    def visit(obj: Any, depth: int) -> None:
        if depth > 8 or id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, functools.partial):
            visit(obj.func, depth + 1)
            return
        obj = getattr(obj, "__func__", obj)  # a bound method, a staticmethod, a classmethod
        if isinstance(obj, property):
            for part in (obj.fget, obj.fset, obj.fdel):
                if part is not None:
                    visit(part, depth + 1)
            return
        if isinstance(obj, type):
            if _library(obj):
                return
            modules.add(obj.__module__)
            for value in vars(obj).values():
                if callable(value) or isinstance(value, staticmethod | classmethod | property):
                    visit(value, depth + 1)
            for base in obj.__bases__:
                visit(base, depth + 1)
            return
        if not inspect.isfunction(obj):
            if callable(obj) and not isinstance(obj, types.BuiltinFunctionType):
                visit(type(obj), depth + 1)  # a callable instance: its class's code
            return
        if _library(obj):
            return
        modules.add(str(obj.__globals__.get("__name__", "")))
        for name in sorted(_code_names(obj.__code__)):
            if name not in obj.__globals__:
                continue
            value = obj.__globals__[name]
            key = f"{obj.__qualname__}.{name}"
            if _plain(value):
                found.setdefault(key, fingerprint(value, opaque=True))
            elif inspect.isfunction(value) or isinstance(value, type | functools.partial):
                if not _library(getattr(value, "func", value)):
                    found.setdefault(key, fingerprint(value, opaque=True))
                visit(value, depth + 1)
        for cell in obj.__closure__ or ():
            try:
                content = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if callable(content):
                visit(content, depth + 1)

    visit(root, 0)
    return found


def registered_digests(config: ExperimentConfig) -> dict[str, str]:
    """The code digest of each registered world and policy ``config`` uses, by kind and name.

    Args:
        config: The experiment config.

    Returns:
        ``{"world:<name>": digest, "policy:<name>": digest}`` for the names registered in
        this process (built-in names and objects are not: an object's name holds its digest).
    """
    used = [("world", config.world, WORLDS)]
    if isinstance(config.agents, list):
        used += [("policy", group.policy, POLICIES) for group in config.agents]
    else:
        used.append(("policy", config.policy, POLICIES))
    found = {}
    for kind, name, table in used:
        factory = table.get(name)
        if factory is not None:
            found[f"{kind}:{name}"] = factory_digest(kind, name, factory)
    return found


add_code_digests(registered_digests)


# -- the code of the built-in worlds and policies ------------------------------------------------
CODE_META_KEY = "vivarium_code"
"""The trace ``meta`` key under which a run records ``package_code_digest()``."""

BEHAVIOUR_CODE = ("policies", "worlds", "workflow", "memory.py")
"""The parts of the package whose code decides what agents do (their source is digested)."""


@functools.cache
def package_code_digest() -> str:
    """The version and a digest of the source of Vivarium's built-in worlds and policies.

    A run id derives from the config alone, so the same config run by edited package code
    (a prompt changed in ``vivarium/policies/prompting.py``) has the same id and a different
    trace. The digest is recorded with each run (``CODE_META_KEY``, outside the run id, which
    stays what it was), and a finished trace made by other code is not replaced without
    ``overwrite`` (``vivarium.runner.trace_path``). Read once per process: the modules are
    imported once too.

    Returns:
        ``<version>+<16 hex digits>``.
    """
    from pathlib import Path

    from vivarium._version import __version__

    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for part in BEHAVIOUR_CODE:
        where = root / part
        files = sorted(where.rglob("*.py")) if where.is_dir() else [where]
        for file in files:
            if file.is_file():
                h.update(file.relative_to(root).as_posix().encode() + b"\0")
                h.update(file.read_bytes() + b"\0")
    return f"{__version__}+{h.hexdigest()[:16]}"


def changed_code(recorded: Mapping[str, str], config: ExperimentConfig) -> str | None:
    """The registered world or policy whose code differs from what a run recorded, if any.

    Args:
        recorded: The run's recorded ``code_digests``.
        config: The run's config, as it is resumed.

    Returns:
        ``"policy 'name'"`` for the first changed one, or None (a name no longer registered is
        left to ``check_names``, which says so).
    """
    current = registered_digests(config)
    for key, digest in sorted(recorded.items()):
        if key in current and current[key] != digest:
            kind, _, name = key.partition(":")
            return f"{kind} '{name}'"
    return None


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
                # A cognitive subclass runs on the LLM seed its config carries (see above).
                llm = "config" in _llm_keywords(entry.obj)
                seeds[p.agent_id] = p.seeds.llm if llm else p.seeds.agent
    return seeds
