"""LLM-driven policies: observation -> chat messages -> one model call -> one action.

``SimpleCognitivePolicy`` runs the three stages as plain calls; ``CognitiveAgentPolicy`` runs the
same stages as a LangGraph ``StateGraph`` (a starting point for richer workflows). Both give the
same ``ActionRequest`` for the same reply, and both fail soft: an unusable reply (or a call
the server rejects) becomes a ``noop`` whose metadata says why, so a flaky model never ends a
run. An outage is not the agent's doing: an infrastructure failure after the gateway's retries
(``LLMCallError.infrastructure``) is raised as ``LLMUnavailable`` and stops the run, resumably,
unless the run asked for fallbacks (``on_llm_error="fallback"``).

A world observation (balances, artifacts, memory, ...) is shown as the prompt sections the
workflow policy uses too (``vivarium.policies.sections``), with the ``memory_k`` memories most
relevant to the moment: searched in a plugged ``MemoryStore`` (``memory=``, a store or a
factory ``agent_id -> store``) or else in the observation's memory (the ecology world searches
all of the agent's entries). A request above ``context_tokens`` (8000) loses its oldest history
lines first (``vivarium.policies.budget``).

``ActionRequest.metadata`` carries ``parse_path`` (``tool_call``, ``json_text``, ``fallback``),
``model``, ``finish_reason``, and when they apply ``fallback_reason``, ``tool_call_error`` and
``context_trimmed`` (what the context budget cut, and how many tokens).
Nothing timing-dependent is recorded here, so traces stay byte-identical on replay.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from vivarium.errors import ConfigError
from vivarium.gateways.base import LLMResponse
from vivarium.gateways.effects import Flow, arun, run
from vivarium.memory import StoreSource, search_memories, store_for
from vivarium.optional import available, require
from vivarium.policies.asking import ask
from vivarium.policies.budget import DEFAULT_CONTEXT_TOKENS, fit_messages, tool_characters
from vivarium.policies.graph_batch import batch_graph, batcher
from vivarium.policies.parsing import FALLBACK_ACTION, MAX_REASON_CHARS, parse_action, truncate
from vivarium.policies.prompting import (
    arg_models_for,
    available_tools,
    build_messages,
    default_registry,
    uses_sections,
)
from vivarium.policies.sections import (
    last_action_section,
    recent_events_section,
    recent_failures_section,
    render_query,
)
from vivarium.seeding import shared_policy_seed
from vivarium.settings import DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE
from vivarium.types import ActionRequest
from vivarium.worlds.registry import ActionRegistry


class CognitivePolicyConfig(BaseModel):
    """How an LLM agent asks its model. Loads from YAML/JSON like every other config."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    temperature: float = Field(DEFAULT_TEMPERATURE, ge=0.0)  # as ``llm.temperature``'s
    max_tokens: int = Field(DEFAULT_MAX_TOKENS, ge=1)
    system_prompt: str | None = None
    # True: force the world's main action (its registry's default_tool: post_message in the
    # channel, write_artifact in the ecology); a name: force that tool, which the world must
    # have. Small local models rarely call tools under tool_choice="auto": forcing makes them act.
    force_tool: bool | str = False
    seed: int | None = None
    tools: list[str] | None = None
    # Memory retrieval (the agent ecology's rag): how many memories (its default limit, 5; 0
    # shows none) and the query, a ``{name}`` template over the observation (``{tick}`` too).
    # Unset: the last action's result, recent failures and recent events, as text.
    memory_k: int = Field(5, ge=0, le=50)
    memory_query: str | None = None
    working_memory_bytes: int = Field(2000, ge=16)
    # The context budget in estimated tokens (the aam engine's 8k); None for none.
    context_tokens: int | None = Field(DEFAULT_CONTEXT_TOKENS, ge=64)


@dataclass(frozen=True, slots=True)
class _Plan:
    """Everything one decision needs before the model call."""

    request: dict[str, Any]
    allowed: tuple[str, ...]
    arg_models: dict[str, type[BaseModel]]
    trimmed: dict[str, Any] | None = None


def _as_config(
    config: CognitivePolicyConfig | Mapping[str, Any] | None, overrides: Mapping[str, Any]
) -> CognitivePolicyConfig:
    if isinstance(config, CognitivePolicyConfig):
        base = config.model_dump(exclude_unset=True)
    else:
        base = dict(config or {})
    return CognitivePolicyConfig.model_validate({**base, **overrides})


def _error_reason(exc: BaseException) -> str:
    return truncate(f"llm error: {type(exc).__name__}: {exc}", MAX_REASON_CHARS)


class _CognitiveCore:
    """The three stages, shared by both policies so they cannot drift apart."""

    name = "cognitive"

    def __init__(
        self,
        gateway: Any,
        config: CognitivePolicyConfig | Mapping[str, Any] | None = None,
        registry: ActionRegistry | None = None,
        *,
        master_seed: int | None = None,
        memory: StoreSource | None = None,
        **overrides: Any,
    ) -> None:
        self.gateway = gateway
        self.config = _as_config(config, overrides)
        # Searched, never filled, by the policy: its contents are the caller's state (see
        # WorkflowPolicy's ``memory`` for resume and replay).
        self.memory = memory
        # No registry given: the channel's until the engine hands over the world's own.
        self._own_registry = registry is not None
        self.registry = registry or default_registry()
        self.master_seed = master_seed
        self._spec_chars: dict[tuple[int, ...], tuple[list[dict[str, Any]], int]] = {}
        if registry is not None:
            self.check_tools(registry, "the given registry")

    # -- the world's actions --------------------------------------------------------------------
    def use_world_actions(self, registry: ActionRegistry, world: str) -> None:
        """Act with the tools (names, argument models) of the world this policy runs in.

        Called by the engine when a run is built. A policy given its own registry keeps it.
        A ``force_tool`` or ``tools`` naming an action the world lacks is a ``ConfigError``
        then, not a ``force_tool`` silently ignored at every decision.
        """
        if not self._own_registry:
            self.registry = registry
        self.check_tools(self.registry, f"the {world} world")

    def check_tools(self, registry: ActionRegistry, where: str) -> None:
        """Check that ``tools`` and a named ``force_tool`` are actions of ``registry``.

        Args:
            registry: The actions available.
            where: Where they come from, for the error (``"the channel world"``).

        Raises:
            ConfigError: One line naming the setting: a tool the registry lacks, or a forced
                tool outside ``tools``.
        """
        known = ", ".join(registry.names())
        for name in self.config.tools or ():
            if name not in registry:
                raise ConfigError(
                    f"action_space: {name!r} is not an action of {where} (actions: {known})"
                )
        force = self.config.force_tool
        if not isinstance(force, str):
            return
        if force not in registry:
            raise ConfigError(
                f"llm.force_tool: {force!r} is not an action of {where} (actions: {known})"
            )
        if self.config.tools is not None and force not in self.config.tools:
            raise ConfigError(
                f"llm.force_tool: {force!r} is not in the action_space "
                f"({', '.join(self.config.tools)})"
            )

    @property
    def seed(self) -> int | None:
        """The seed sent with every request, when the policy has one of its own.

        It is recorded in the trace's agents table; without it, a master seed derives one per
        agent instead (``request_seed``).
        """
        return self.config.seed

    # -- stage 1: messages and request ----------------------------------------------------------
    def request_seed(self, agent_id: str) -> int | None:
        """The provider seed of ``agent_id``'s requests.

        ``config.seed`` (an agent built from a config gets its plan's ``llm`` seed there), else
        ``seeding.shared_policy_seed`` of the master seed and the agent id, else None.
        """
        if self.config.seed is not None:
            return self.config.seed
        if self.master_seed is None:
            return None
        return shared_policy_seed(self.master_seed, agent_id)

    def tool_choice(self, tools: list[str]) -> str | dict[str, Any] | None:
        if not tools:
            return None
        force = self.config.force_tool
        name: str | None = None
        if isinstance(force, str):
            name = force if force in tools else None
        elif force:
            name = self.registry.forced_default(tools)
        if name is None:
            return "auto"
        return {"type": "function", "function": {"name": name}}

    def plan(self, agent_id: str, observation: Mapping[str, Any]) -> _Plan:
        names = available_tools(observation, self.config.tools)
        if not names and "tools" not in observation and self.registry is not None:
            # A world of one's own need not list its tools in the observation: the actions of
            # its registry (handed over when the run is built) are what the model may call.
            names = available_tools({"tools": self.registry.names()}, self.config.tools)
        described = [n for n in names if n in self.registry]
        specs = self.registry.tool_specs(described)
        choice = self.tool_choice(described)
        forced = choice["function"]["name"] if isinstance(choice, dict) else None
        messages = build_messages(
            observation,
            agent_id=agent_id,
            system_prompt=self.config.system_prompt,
            registry=self.registry,
            tools=names,
            forced=forced,
            memories=self.recall(agent_id, observation),
            working_memory_bytes=self.config.working_memory_bytes,
        )
        messages, trim = fit_messages(
            messages, specs, self.config.context_tokens, tool_chars=self._tool_chars(specs)
        )
        request = {
            "model": self.config.model,
            "messages": messages,
            "tools": specs or None,
            "tool_choice": choice,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
            "seed": self.request_seed(agent_id),
        }
        trimmed = trim.as_metadata() if trim is not None else None
        return _Plan(request, tuple(names), arg_models_for(names, self.registry), trimmed)

    def _tool_chars(self, specs: list[dict[str, Any]]) -> int:
        """``tool_characters(specs)``, counted once per set of the registry's specs.

        The specs are the registry's own shared dicts, read-only (``ActionRegistry.tool_specs``),
        so the same ones count the same: kept by identity (and kept alive, so that an identity
        is never another spec's).
        """
        key = tuple(map(id, specs))
        found = self._spec_chars.get(key)
        if found is None:
            found = self._spec_chars[key] = (specs, tool_characters(specs))
        return found[1]

    def memory_query(self, observation: Mapping[str, Any]) -> str:
        """The retrieval query: ``memory_query`` filled from the observation, or its default.

        The default is what just happened: the last action's result, recent failures and
        recent events, as the prompt shows them.
        """
        if self.config.memory_query:
            values = {**observation, "tick": observation.get("time_step")}
            return render_query(self.config.memory_query, values)
        parts = (
            last_action_section(observation),
            recent_failures_section(observation),
            recent_events_section(observation),
        )
        return "\n".join(p for p in parts if p)

    def recall(self, agent_id: str, observation: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """The memories the prompt shows, best first; None when it shows no memory section.

        Only world observations have one (with a memory or a plugged store, and ``memory_k``
        above 0).
        """
        store = store_for(self.memory, agent_id)
        if self.config.memory_k <= 0 or not uses_sections(observation):
            return None
        if store is None and "memory" not in observation:
            return None
        query = self.memory_query(observation)
        return search_memories(
            query, self.config.memory_k, store=store, observed=observation.get("memory")
        )

    # -- stage 2: the model call (errors are returned, not raised) ------------------------------
    def asking(self, request: dict[str, Any]) -> Flow[tuple[LLMResponse | None, str | None]]:
        """The model call as a flow (``asking.ask``): the reply, or the fallback reason."""
        response, exc = yield from ask(self.gateway, request)
        return response, None if exc is None else _error_reason(exc)

    def call(self, request: dict[str, Any]) -> tuple[LLMResponse | None, str | None]:
        """The model call, blocking (``gateway.chat``): the reply, or the fallback reason."""
        return run(self.asking(request))

    async def acall(self, request: dict[str, Any]) -> tuple[LLMResponse | None, str | None]:
        """The model call on the event loop (``gateway.achat``)."""
        return await arun(self.asking(request))

    # -- stage 3: the action --------------------------------------------------------------------
    def to_action(
        self,
        *,
        run_id: str,
        time_step: int,
        agent_id: str,
        plan: _Plan,
        response: LLMResponse | None,
        error: str | None,
    ) -> ActionRequest:
        if response is None:
            fallback: dict[str, Any] = {
                "parse_path": "fallback",
                "fallback_reason": error or "llm error: no response",
                "model": self.config.model,
                "finish_reason": None,
            }
            if plan.trimmed is not None:
                fallback["context_trimmed"] = plan.trimmed
            return ActionRequest(
                run_id=run_id,
                time_step=time_step,
                agent_id=agent_id,
                action_name=FALLBACK_ACTION,
                metadata=fallback,
            )
        parsed = parse_action(response, plan.allowed, plan.arg_models)
        metadata = {
            **parsed.metadata,
            "model": self.config.model,
            "finish_reason": response.finish_reason,
        }
        if plan.trimmed is not None:
            metadata["context_trimmed"] = plan.trimmed
        fields = {
            "run_id": run_id,
            "time_step": time_step,
            "agent_id": agent_id,
            "action_name": parsed.action_name,
            "arguments": parsed.arguments,
            "reasoning": parsed.reasoning,
            "metadata": metadata,
        }
        if type(run_id) is str and type(time_step) is int and type(agent_id) is str:
            # Every field is of its type already (the parse validated its own): no validation
            # per decision. Anything else a caller passes is validated, as before.
            return ActionRequest.trusted(**fields)  # type: ignore[no-any-return]
        return ActionRequest(**fields)


class SimpleCognitivePolicy(_CognitiveCore):
    """build messages -> call the model -> parse the action, as plain function calls."""

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """Prompt the model with the observation and parse its reply into an action.

        A failed call or an unparseable reply becomes a recorded fallback action; an
        infrastructure failure (an unreachable server) stops the run instead, resumably.
        """
        return run(self._decision(run_id, time_step, agent_id, observation))

    async def adecide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """``decide`` with the model called through ``gateway.achat``, for concurrent steps."""
        return await arun(self._decision(run_id, time_step, agent_id, observation))

    def _decision(
        self, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> Flow[ActionRequest]:
        """The decision as one flow: the prompt, the model call, the action."""
        plan = self.plan(agent_id, observation)
        response, error = yield from self.asking(plan.request)
        return self.to_action(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            plan=plan,
            response=response,
            error=error,
        )


class CognitiveState(TypedDict, total=False):
    """The LangGraph state of one decision. Built fresh per decision: nothing carries over."""

    policy: CognitiveAgentPolicy
    run_id: str
    time_step: int
    agent_id: str
    observation: dict[str, Any]
    plan: _Plan
    messages: list[dict[str, Any]]
    response: LLMResponse | None
    error: str | None
    action: ActionRequest


class CognitiveAgentPolicy(_CognitiveCore):
    """The same pipeline as a LangGraph ``StateGraph``, compiled once per policy class.

    Its nodes are build_messages -> call_model -> parse_action. ``decide`` invokes ``graph``;
    ``agraph`` is the same graph with ``async`` nodes (LangGraph would run plain functions in a
    worker thread, a thread hop per node that costs more than the node), whose call_model node
    uses ``gateway.achat``. ``adecide`` runs concurrent decisions through a batch graph of the
    same node methods (``vivarium.policies.graph_batch``), or ``agraph`` per decision.

    Both graphs are compiled once per policy class and shared by its instances: each run's
    state carries the policy that decides (``policy``), and the nodes call its ``_build_node``,
    ``_call_node`` / ``_acall_node`` and ``_parse_node``. Compiling costs ~1 ms a graph, paid
    by every agent of a run otherwise (10 s for 10,000 agents).
    """

    # Run concurrent async decisions through the graph in batches (see ``adecide``).
    batch_decisions = True

    def __init__(
        self,
        gateway: Any,
        config: CognitivePolicyConfig | Mapping[str, Any] | None = None,
        registry: ActionRegistry | None = None,
        *,
        master_seed: int | None = None,
        memory: StoreSource | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(
            gateway, config, registry, master_seed=master_seed, memory=memory, **overrides
        )
        if _shared_compile(type(self)):
            self.graph, self.agraph = _graphs(type(self))
        else:  # a subclass's own ``_compile`` that needs its instance: compiled per instance
            require("langgraph.graph")
            self.graph = self._compile(_build, _call, _parse)
            self.agraph = self._compile(_abuild, _acall, _aparse)
        if self.batch_decisions:
            batch_graph()  # compiled now, not in a run's first step

    @staticmethod
    def _compile(build: Any, call: Any, parse: Any) -> Any:
        graph = require("langgraph.graph")
        END, START, StateGraph = graph.END, graph.START, graph.StateGraph

        builder = StateGraph(CognitiveState)
        builder.add_node("build_messages", build)
        builder.add_node("call_model", call)
        builder.add_node("parse_action", parse)
        builder.add_edge(START, "build_messages")
        builder.add_edge("build_messages", "call_model")
        builder.add_edge("call_model", "parse_action")
        builder.add_edge("parse_action", END)
        return builder.compile()

    async def _abuild_node(self, state: CognitiveState) -> dict[str, Any]:
        return self._build_node(state)

    async def _aparse_node(self, state: CognitiveState) -> dict[str, Any]:
        return self._parse_node(state)

    def _build_node(self, state: CognitiveState) -> dict[str, Any]:
        plan = self.plan(state["agent_id"], state["observation"])
        return {"plan": plan, "messages": plan.request["messages"]}

    def _call_node(self, state: CognitiveState) -> dict[str, Any]:
        response, error = self.call(state["plan"].request)
        return {"response": response, "error": error}

    async def _acall_node(self, state: CognitiveState) -> dict[str, Any]:
        response, error = await self.acall(state["plan"].request)
        return {"response": response, "error": error}

    def _parse_node(self, state: CognitiveState) -> dict[str, Any]:
        action = self.to_action(
            run_id=state["run_id"],
            time_step=state["time_step"],
            agent_id=state["agent_id"],
            plan=state["plan"],
            response=state.get("response"),
            error=state.get("error"),
        )
        return {"action": action}

    def _initial(
        self, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> CognitiveState:
        return {
            "policy": self,
            "run_id": run_id,
            "time_step": time_step,
            "agent_id": agent_id,
            "observation": observation,
        }

    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """Run the graph on one observation; the action is its final state's ``action``."""
        final = self.graph.invoke(self._initial(run_id, time_step, agent_id, observation))
        return final["action"]

    async def adecide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """Run the async graph on one observation, for concurrent steps.

        Decisions asked for together (an engine's step) go through one batch graph
        invocation (``graph_batch``): the same node methods, requests, records and actions,
        for LangGraph's cost once per batch instead of once per decision (~0.7 ms). A
        subclass that compiles a graph of its own (``_compile``), or sets
        ``batch_decisions = False``, runs ``agraph`` once per decision.
        """
        state = self._initial(run_id, time_step, agent_id, observation)
        if self.batch_decisions and _batchable(type(self)):
            return await batcher().decide(state)
        final = await self.agraph.ainvoke(state)
        return final["action"]


# Node functions of the shared graphs: each hands the step to the policy its state carries.
def _build(state: CognitiveState) -> dict[str, Any]:
    return state["policy"]._build_node(state)


def _call(state: CognitiveState) -> dict[str, Any]:
    return state["policy"]._call_node(state)


def _parse(state: CognitiveState) -> dict[str, Any]:
    return state["policy"]._parse_node(state)


async def _abuild(state: CognitiveState) -> dict[str, Any]:
    return await state["policy"]._abuild_node(state)


async def _acall(state: CognitiveState) -> dict[str, Any]:
    return await state["policy"]._acall_node(state)


async def _aparse(state: CognitiveState) -> dict[str, Any]:
    return await state["policy"]._aparse_node(state)


_compiled: dict[type, tuple[Any, Any]] = {}
_compile_lock = threading.Lock()
# What the batch graph runs in place of the per-decision graph: a subclass that overrides any
# of these (or the graph itself) decides through its own graph, one invocation a decision.
_BATCH_REPLACES = ("_compile", "_abuild_node", "_aparse_node", "adecide")


def _batchable(cls: type[CognitiveAgentPolicy]) -> bool:
    """Whether ``cls``'s decisions can run through the batch graph and stay the same.

    The batch graph calls ``_build_node``, ``_acall_node`` and ``_parse_node`` (a subclass's
    own too); a subclass with its own graph or async build and parse nodes keeps its graph.
    """
    return all(
        getattr(cls, name) is getattr(CognitiveAgentPolicy, name) for name in _BATCH_REPLACES
    )


def _shared_compile(cls: type[CognitiveAgentPolicy]) -> bool:
    """Whether ``cls._compile`` is a static method (one graph per class); else per instance."""
    for klass in cls.__mro__:
        if "_compile" in vars(klass):
            return isinstance(vars(klass)["_compile"], staticmethod)
    return True


def _graphs(cls: type[CognitiveAgentPolicy]) -> tuple[Any, Any]:
    """The (sync, async) graphs of ``cls``, compiled on its first instance and then shared.

    LangGraph is required by every instance, not only the first: an environment without it
    gets the error naming the extra whatever was built before (a lookup once imported).
    """
    require("langgraph.graph")
    found = _compiled.get(cls)
    if found is None:
        with _compile_lock:
            found = _compiled.get(cls)
            if found is None:
                found = _compiled[cls] = (
                    cls._compile(_build, _call, _parse),
                    cls._compile(_abuild, _acall, _aparse),
                )
    return found


def langgraph_available() -> bool:
    """Whether ``langgraph`` can be imported (the ``llm`` extra installs it)."""
    return available("langgraph.graph")


def default_cognitive_policy(
    gateway: Any,
    model: str,
    *,
    registry: ActionRegistry | None = None,
    master_seed: int | None = None,
    memory: StoreSource | None = None,
    **config: Any,
) -> SimpleCognitivePolicy | CognitiveAgentPolicy:
    """The LangGraph policy when langgraph is installed, else the plain one (same actions)."""
    cls = CognitiveAgentPolicy if langgraph_available() else SimpleCognitivePolicy
    return cls(
        gateway, {"model": model, **config}, registry, master_seed=master_seed, memory=memory
    )
