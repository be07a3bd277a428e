"""WorkflowPolicy: an agent as a state machine of steps, with every bit of its state explicit.

Per decision, starting in the state carried in ``observation["agent_state"]`` (the initial state
the first time), the policy runs the steps of the current state in order, skipping those whose
``in_state`` excludes it or whose ``run_if`` is false:

- ``code`` steps run safe-eval statements; the names they assign become context variables,
  kept in the agent state from one decision to the next;
- ``llm`` steps ask the model for an action through one forced tool, ``act`` (JSON in the text is
  accepted too); the action must be one the observation offers, with valid arguments;
- ``transition`` steps ask the model to pick a key of ``transition_map`` through a forced tool
  ``choose``; the state machine must allow the move (a refused choice is a failure).

A step's ``transition_to`` moves the state after it succeeds, if the state machine allows it (a
transition whose condition is false leaves the state as it is: conditions are guards). A change of
state ends the old state's steps; the decision goes on with the new state's steps until an action
has been produced or no step is left to run. Each step is considered at most once per decision
(a step without ``in_state`` runs once, in the first state the decision is in), so every walk
ends; the next decision starts in the state this one ended in. No action means ``noop``. If more
than one llm step produces an action, the last one counts.

A failed step (model error, unusable reply, safe-eval error, refused choice) follows its
``on_failure``: ``retry`` (up to ``max_retries`` more attempts, the model told what was wrong; when
they run out the step fails), ``skip`` (go on with the next step) or ``fail`` (end the decision:
``noop`` with the reason). Nothing raises out of a decision, except a ``RunStoppingError`` (a
replay with no recorded reply) and an LLM outage that outlasted the retries (``LLMUnavailable``,
unless ``on_llm_error="fallback"``): both must stop the run, the outage resumably.

The actions an agent may take, and their arguments, come from the registry of the world it acts
in: the engine hands it over (``use_world_actions``) when the run is built. A policy used alone
without a ``registry`` names actions without arguments and leaves the checks to the world.

``ActionRequest.metadata``: ``agent_state`` (taken out of the record by the engine),
``transitions`` (``{"from_state", "to_state", "trigger"}``), ``workflow_state``, ``steps`` (one
entry per step considered: step, state, status, attempts, error), ``action_step``, ``parse_path``
(``tool_call``, ``json_text``, ``fallback``), ``fallback_reason`` when the action is a fallback
``noop``, ``model``, ``llm_calls``, ``llm_tokens``, and ``agent_state_reset`` when the state that
came in could not be used.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel

from vivarium import sandbox
from vivarium.errors import RunStoppingError
from vivarium.gateways.base import LLMResponse, stop_if_unavailable
from vivarium.memory import relevant_memories
from vivarium.policies.parsing import (
    FALLBACK_ACTION,
    MAX_REASON_CHARS,
    MAX_REASONING_CHARS,
    check_arguments,
    json_values,
    parse_action,
    truncate,
)
from vivarium.policies.prompting import arg_models_for, available_tools, describe_tool
from vivarium.seeding import canonical_json, workflow_request_seed
from vivarium.types import ActionRequest
from vivarium.workflow.config import AgentSpec, StepConfig
from vivarium.workflow.names import RESERVED_NAMES
from vivarium.workflow.prompt import (
    build_context,
    build_prompt,
    format_memories,
    format_working_memory,
    render_template,
)
from vivarium.workflow.state_machine import StateMachine

ACT_TOOL = "act"
CHOOSE_TOOL = "choose"
DEFAULT_MAX_TOKENS = 384
MAX_VARIABLES_CHARS = 65_536  # canonical JSON of all variables: agent state stays small
STATE_VERSION = 1
DEFAULT_SYSTEM_PROMPT = (
    "You are {agent_id}, an agent in a shared world of artifacts and scrip. "
    "Act by calling the tool you are given, exactly once."
)

Request = dict[str, Any]
Reply = tuple[LLMResponse | None, str | None]
Flow = Generator[Request, Reply, Any]


class ActionCatalog(Protocol):
    """What a workflow reads of the world's action registry (``ActionRegistry`` is one).

    The engine hands the world's registry to the policy (``use_world_actions``); the workflow
    only looks actions up, to describe them to the model and to check the arguments it returns.
    """

    def get(self, name: str) -> Any:
        """The action's spec (``tool_spec()``, ``arguments``, ``description``), or None."""
        ...

    def __contains__(self, name: object) -> bool:
        """Whether the world has an action called ``name``."""
        ...


class StepFailed(Exception):
    """One attempt of a step went wrong; the reason is recorded, the decision goes on."""


# -- the tools the model is forced to call -----------------------------------------------------
def act_tool(
    actions: Sequence[str],
    schema: str = "simple",
    argument_schemas: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The ``act`` tool: reasoning fields, then ``action {name, arguments}``.

    With ``argument_schemas`` the action is one of several shapes (``anyOf``), each pairing an
    action name with the JSON schema of its arguments, so a model constrained by the schema
    (and the mock) produces arguments that fit the action it names.
    """
    action: dict[str, Any] = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "enum": list(actions), "description": "the action"},
            "arguments": {"type": "object", "description": "the action's arguments"},
        },
        "required": ["name", "arguments"],
    }
    if argument_schemas:
        action = {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "const": name},
                        "arguments": argument_schemas.get(name) or {"type": "object"},
                    },
                    "required": ["name", "arguments"],
                }
                for name in actions
            ]
        }
    if schema == "ooda":
        properties: dict[str, Any] = {
            "situation_assessment": {"type": "string", "description": "what is going on"},
            "action_rationale": {"type": "string", "description": "why this action"},
            "action": action,
        }
    else:
        properties = {
            "thought_process": {"type": "string", "description": "brief reasoning"},
            "action": action,
        }
    return {
        "type": "function",
        "function": {
            "name": ACT_TOOL,
            "description": "Take exactly one action in the world.",
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(properties),
            },
        },
    }


def _argument_schemas(
    actions: Sequence[str],
    registry: ActionCatalog | None,
    observation: Mapping[str, Any],
    agent_id: str,
) -> dict[str, dict[str, Any]]:
    """Each action's argument schema, with the ids the observation shows as choices.

    ``artifact_id`` of read/invoke may only name artifacts that exist; ``method`` only methods
    they have. Writes keep a free id (they may create an artifact).
    """
    if registry is None:
        return {}
    artifacts = [a for a in observation.get("artifacts") or [] if isinstance(a, Mapping)]
    ids = sorted({str(a.get("id")) for a in artifacts if a.get("id") is not None})
    methods = sorted(
        {str(m) for a in artifacts for m in (a.get("methods") or []) if a.get("executable")}
    )
    out: dict[str, dict[str, Any]] = {}
    for name in actions:
        spec = registry.get(name)
        if spec is None:
            continue
        params = copy.deepcopy(spec.tool_spec()["function"]["parameters"])
        props = params.get("properties") or {}
        if name in {"read_artifact", "invoke_artifact"} and ids and "artifact_id" in props:
            props["artifact_id"]["enum"] = ids
        if name == "invoke_artifact" and methods and "method" in props:
            props["method"]["enum"] = methods
        if name == "transfer_scrip" and "to" in props:
            others = sorted({str(a.get("owner")) for a in artifacts} - {agent_id, "world", "None"})
            if others:
                props["to"]["enum"] = others
        out[name] = params
    return out


def choose_tool(options: Sequence[str]) -> dict[str, Any]:
    """The ``choose`` tool: one of the transition step's options, and why."""
    return {
        "type": "function",
        "function": {
            "name": CHOOSE_TOOL,
            "description": "Choose how the workflow goes on.",
            "parameters": {
                "type": "object",
                "properties": {
                    "reason": {"type": "string", "description": "brief reasoning"},
                    "choice": {"type": "string", "enum": list(options)},
                },
                "required": ["reason", "choice"],
            },
        },
    }


def _force(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


# -- reading replies ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ParsedStep:
    """What a reply said, read: the value, the model's reasoning, and how it was found.

    Attributes:
        value: ``(action name, arguments)`` for ``act``, the chosen key for ``choose``.
        reasoning: The model's reasoning fields, joined (None when it gave none).
        path: How the value was found: ``tool_call``, ``json_text`` or ``text``.
    """

    value: Any  # (action name, arguments) for act, the key for choose
    reasoning: str | None
    path: str


def _reasoning(payload: Mapping[str, Any]) -> str | None:
    parts = []
    for key, label in (
        ("thought_process", ""),
        ("situation_assessment", "Situation: "),
        ("action_rationale", "Rationale: "),
        ("reasoning", ""),
        ("reason", ""),
    ):
        value = payload.get(key)
        if isinstance(value, str) and value.strip():
            parts.append(label + value.strip())
    return truncate("\n".join(parts), MAX_REASONING_CHARS) if parts else None


def _action_in(
    payload: Any, allowed: tuple[str, ...], arg_models: Mapping[str, type[BaseModel]]
) -> tuple[str, dict[str, Any]] | str:
    """``(name, arguments)`` from an ``act`` payload, or the reason it holds no usable action."""
    if not isinstance(payload, Mapping):
        return "act arguments must be a JSON object"
    action = payload.get("action")
    error = None
    if isinstance(action, Mapping):
        name = action.get("name", action.get("action"))
        arguments = action.get("arguments", action.get("args", {}))
    elif isinstance(action, str):
        name, arguments = action, payload.get("arguments", {})
    else:
        return "no action in the reply"
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            error = "arguments are not valid JSON"
    checked = check_arguments(name, arguments, error, allowed, arg_models)
    return checked if isinstance(checked, str) else (str(name), checked)


def parse_act(
    response: LLMResponse,
    allowed: Sequence[str],
    arg_models: Mapping[str, type[BaseModel]] | None = None,
) -> ParsedStep | str:
    """The action in a reply, or the reason there is none.

    An ``act`` tool call, else an action tool call or JSON in the text
    (``{"action": {"name", "arguments"}}`` and the shapes ``parse_action`` knows).
    """
    allowed = tuple(allowed)
    models = arg_models or {}
    reasons: list[str] = []
    others = []
    for call in response.tool_calls:
        if call.name != ACT_TOOL:
            others.append(call)
            continue
        if call.parse_error is not None:
            reasons.append(f"bad arguments: {ACT_TOOL}: {call.parse_error}")
            continue
        found = _action_in(call.arguments, allowed, models)
        if isinstance(found, str):
            reasons.append(found)
        else:
            return ParsedStep(found, _reasoning(call.arguments), "tool_call")
    content = response.content if isinstance(response.content, str) else ""
    # JSON in the text, the act payload shape first
    values, _ = json_values(content) if content.strip() else ([], False)
    for value in values:
        if isinstance(value, Mapping) and "action" in value:
            found = _action_in(value, allowed, models)
            if not isinstance(found, str):
                return ParsedStep(found, _reasoning(value), "json_text")
            reasons.append(found)
    rest = response.model_copy(update={"tool_calls": others})
    parsed = parse_action(rest, allowed, models)
    if parsed.metadata.get("parse_path") != "fallback":
        return ParsedStep(
            (parsed.action_name, parsed.arguments),
            parsed.reasoning,
            str(parsed.metadata.get("parse_path")),
        )
    if reasons:
        return truncate(reasons[0], MAX_REASON_CHARS)
    if response.tool_calls and not others:
        return "no action in the reply"
    return str(parsed.metadata.get("fallback_reason") or "no action found")


_WORDISH = re.compile(r"^[\s`'\"*]*([A-Za-z0-9_\-]+)[\s`'\".!*]*$")


def parse_choice(response: LLMResponse, options: Sequence[str]) -> ParsedStep | str:
    """One of ``options`` from a reply, or the reason there is none.

    A ``choose`` call, JSON with ``choice``, or a reply that is just the option.
    """
    shown = ", ".join(options)
    reasons = []

    def pick(value: Any) -> str | None:
        if isinstance(value, str) and value.strip() in options:
            return value.strip()
        reasons.append(f"unknown choice {truncate(str(value), 80)!r} (options: {shown})")
        return None

    for call in response.tool_calls:
        if call.parse_error is not None:
            reasons.append(f"bad arguments: {call.name}: {call.parse_error}")
            continue
        if "choice" in call.arguments:
            choice = pick(call.arguments["choice"])
            if choice is not None:
                return ParsedStep(choice, _reasoning(call.arguments), "tool_call")
        elif call.name in options:  # the model called the option itself
            return ParsedStep(call.name, _reasoning(call.arguments), "tool_call")
    content = response.content if isinstance(response.content, str) else ""
    if content.strip():
        values, _ = json_values(content)
        for value in values:
            if isinstance(value, Mapping):
                for key in ("choice", "option", "next", "transition"):
                    if key in value:
                        choice = pick(value[key])
                        if choice is not None:
                            return ParsedStep(choice, _reasoning(value), "json_text")
                        break
        match = _WORDISH.match(content)
        if match and match.group(1) in options:
            return ParsedStep(match.group(1), None, "text")
    if reasons:
        return truncate(reasons[0], MAX_REASON_CHARS)
    return f"no choice found (options: {shown})"


# -- values code steps produce -----------------------------------------------------------------
def _to_json(value: Any, path: str) -> Any:
    """Variables must be JSON-like (they are checkpointed): tuples -> lists, sets -> sorted."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise StepFailed(f"variable {path} is not a finite number")
        return value
    if isinstance(value, list | tuple):
        return [_to_json(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, set | frozenset):
        items = [_to_json(v, f"{path}[]") for v in value]
        return sorted(items, key=canonical_json)
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise StepFailed(f"variable {path} has a non-string key {key!r}")
            out[key] = _to_json(item, f"{path}.{key}")
        return out
    raise StepFailed(f"variable {path} is a {type(value).__name__}, not JSON-like")


def _error_text(prefix: str, exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return truncate(f"{prefix}{type(exc).__name__}" + (f": {text}" if text else ""), 300)


def _relevant(entries: Sequence[Any], query: str, k: int) -> list[Any]:
    """The ``k`` memory entries most relevant to ``query`` (entries without text are skipped)."""
    clean = [e for e in entries if isinstance(e, Mapping) and "text" in e and "time_step" in e]
    return relevant_memories(clean, query, k)


# -- one decision ------------------------------------------------------------------------------
@dataclass(slots=True)
class _Decision:
    """Everything one decision changes, built fresh each time (the policy holds no state)."""

    run_id: str
    time_step: int
    agent_id: str
    observation: Mapping[str, Any]
    state: dict[str, Any]
    context: dict[str, Any]
    transitions: list[dict[str, str]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    action: tuple[str, dict[str, Any]] | None = None
    reasoning: str | None = None
    parse_path: str | None = None
    action_step: str | None = None
    failure: str | None = None
    end_note: str | None = None
    llm_calls: int = 0
    llm_tokens: int = 0
    reset: str | None = None


class WorkflowPolicy:
    """A workflow agent (see the module docstring).

    Pure: the agent state goes in through the observation and comes out in the request's
    metadata; the policy object holds none of it.
    """

    name = "workflow"
    uses_agent_state = True

    def __init__(
        self,
        spec: AgentSpec,
        gateway: Any,
        *,
        seed: int | None = None,
        request_seed: int | None = None,
        registry: ActionCatalog | None = None,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> None:
        """Run ``spec``'s workflow, asking ``gateway``.

        Args:
            spec: The loaded agent (``load_agent``).
            gateway: The LLM gateway (``chat`` / ``achat``).
            seed: The agent's seed, recorded in the trace; request seeds derive from it.
            request_seed: The provider seed of every request (from a build plan), if given.
            registry: The actions to describe and check; None until the engine hands over
                the world's (``use_world_actions``), and then kept if given here.
            model: The model, unless the agent names one.
            temperature: The sampling temperature, unless the agent sets one (default 0).
            max_tokens: The reply limit, unless the agent sets one.
        """
        self.spec = spec
        self.gateway = gateway
        # The agent's seed (recorded in the trace) and, from a build plan, the provider seed of
        # its requests; without one, each request's seed is derived from ``seed`` per agent.
        self.seed = seed
        self._request_seed = request_seed
        self._own_registry = registry is not None
        self.registry = registry
        self.machine = StateMachine.from_config(spec.workflow)
        self.model = spec.llm_model or model or getattr(gateway, "model", None) or "mock"
        self.temperature = next((t for t in (spec.temperature, temperature) if t is not None), 0.0)
        self.max_tokens = spec.max_tokens or max_tokens or DEFAULT_MAX_TOKENS

    def __repr__(self) -> str:
        """``WorkflowPolicy(agent='...', model='...')``."""
        return f"WorkflowPolicy(agent={self.spec.id!r}, model={self.model!r})"

    def use_world_actions(self, registry: ActionCatalog, world: str) -> None:
        """Describe and check actions with the registry of the world the agent acts in.

        Called by the engine when a run is built; a registry given to the constructor is kept.
        """
        if not self._own_registry:
            self.registry = registry

    # -- agent state ---------------------------------------------------------------------------
    def initial_state(self) -> dict[str, Any]:
        """The agent state of a new agent: the initial state, the declared variables, no counts."""
        return {
            "version": STATE_VERSION,
            "state": self.machine.initial_state,
            "variables": copy.deepcopy(self.spec.workflow.variables),
            "decisions": 0,
            "step_runs": {},
            "failures": {},
            "retries": {},
            "last_transition": None,
        }

    def _load_state(self, raw: Any) -> tuple[dict[str, Any], str | None]:
        if raw is None:
            return self.initial_state(), None
        fresh = self.initial_state()
        if not isinstance(raw, Mapping):
            return fresh, f"agent_state is a {type(raw).__name__}, not a mapping"
        state = copy.deepcopy(dict(raw))
        if state.get("state") not in self.machine.states:
            return fresh, f"state {state.get('state')!r} is not defined; started over"
        if not isinstance(state.get("variables"), Mapping):
            return fresh, "agent_state.variables is not a mapping; started over"
        for key in ("step_runs", "failures", "retries"):
            if not isinstance(state.get(key), Mapping):
                state[key] = {}
        if not isinstance(state.get("decisions"), int):
            state["decisions"] = 0
        state.setdefault("last_transition", None)
        state["version"] = STATE_VERSION
        return state, None

    def _facts(self, state: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "state": state["state"],
            "last_transition": copy.deepcopy(state.get("last_transition")),
            "decisions": state.get("decisions", 0),
        }

    # -- requests ------------------------------------------------------------------------------
    def request_seed(self, agent_id: str) -> int | None:
        """The provider seed of ``agent_id``'s requests.

        The ``request_seed`` given to the constructor (an agent built from a config gets its
        plan's), else ``seeding.workflow_request_seed`` of ``seed`` and the agent id, else None.
        """
        if self._request_seed is not None:
            return self._request_seed
        if self.seed is None:
            return None
        return workflow_request_seed(self.seed, agent_id)

    def _system(self, context: Mapping[str, Any]) -> str:
        return render_template(self.spec.system_prompt or DEFAULT_SYSTEM_PROMPT, context)

    def _request(self, d: _Decision, user: str, tool: dict[str, Any], tool_name: str) -> Request:
        return {
            "model": self.model,
            "messages": [
                {"role": "system", "content": self._system(d.context)},
                {"role": "user", "content": user},
            ],
            "tools": [tool],
            "tool_choice": _force(tool_name),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "seed": self.request_seed(d.agent_id),
        }

    def _extras(self, prompt: str, context: Mapping[str, Any]) -> list[str]:
        extras = []
        if self.spec.rag.enabled:
            entries = context.get("memory") or []
            found = _relevant(list(entries), prompt, self.spec.rag.k) if entries else []
            if found:
                extras.append("Relevant memories:\n" + format_memories(found))
        if self.spec.working_memory.enabled:
            memory = context.get("working_memory")
            if memory:
                text = format_working_memory(memory, self.spec.working_memory.max_bytes)
                extras.append("Working memory:\n" + text)
        return extras

    def _act_request(
        self, d: _Decision, step: StepConfig, actions: Sequence[str], note: str | None
    ) -> Request:
        prompt = build_prompt(step, d.context, self.spec)
        lines = ["Available actions:"]
        for name in actions:
            lines.append(
                describe_tool(name, self.registry)
                if self.registry is not None and name in self.registry
                else f"- {name}"
            )
        fields = (
            '"situation_assessment": "...", "action_rationale": "..."'
            if self.spec.workflow.response_schema == "ooda"
            else '"thought_process": "..."'
        )
        lines.append(
            f"Call the tool `{ACT_TOOL}` exactly once. If you cannot call tools, reply with only "
            f'a JSON object: {{{fields}, "action": {{"name": "<action>", "arguments": {{...}}}}}}.'
        )
        parts = [prompt, *self._extras(prompt, d.context), "\n".join(lines)]
        if note:
            parts.append(note)
        tool = act_tool(
            actions,
            self.spec.workflow.response_schema,
            _argument_schemas(actions, self.registry, d.observation, d.agent_id),
        )
        return self._request(d, "\n\n".join(parts), tool, ACT_TOOL)

    def _choose_request(self, d: _Decision, step: StepConfig, note: str | None) -> Request:
        prompt = build_prompt(step, d.context, self.spec)
        options = list(step.transition_map)
        lines = [f"Choose exactly one of: {', '.join(options)}."]
        lines += [f"- {key}: go to {target}" for key, target in step.transition_map.items()]
        lines.append(
            f"Call the tool `{CHOOSE_TOOL}` exactly once. If you cannot call tools, reply with "
            'only a JSON object: {"reason": "...", "choice": "<option>"}.'
        )
        parts = [prompt, *self._extras(prompt, d.context), "\n".join(lines)]
        if note:
            parts.append(note)
        return self._request(d, "\n\n".join(parts), choose_tool(options), CHOOSE_TOOL)

    # -- the workflow, as a generator of model requests ----------------------------------------
    def _flow(
        self, *, run_id: str, time_step: int, agent_id: str, observation: Mapping[str, Any]
    ) -> Flow:
        """Yields each model request, gets ``(response, error)`` back, returns the action.

        ``decide`` and ``adecide`` drive the same generator, so they cannot disagree.
        """
        state, reset = self._load_state(observation.get("agent_state"))
        d = _Decision(
            run_id=run_id,
            time_step=time_step,
            agent_id=agent_id,
            observation=observation,
            state=state,
            context={},
            reset=reset,
        )
        try:
            d.context = build_context(observation, state["variables"], workflow=self._facts(state))
            yield from self._walk(d)
        except StepFailed as exc:
            d.failure = str(exc)
        except Exception as exc:  # a bug must not end the run: record it, act noop
            if isinstance(exc, RunStoppingError):
                raise
            d.failure = _error_text("workflow error: ", exc)
        return self._finish(d)

    def _walk(self, d: _Decision) -> Flow:
        """Each step is considered at most once per decision, so a walk always ends."""
        considered: set[str] = set()
        while True:
            current = d.state["state"]
            moved: str | None = None
            for step in self.spec.workflow.steps:
                if step.name in considered:
                    continue
                if step.in_state is not None and current not in step.in_state:
                    continue
                considered.add(step.name)
                moved = yield from self._step(d, step, current)
                if d.failure is not None:
                    return
                if moved is not None:
                    break
            if moved is None or d.action is not None:
                return
            if not any(
                s.name not in considered and (s.in_state is None or moved in s.in_state)
                for s in self.spec.workflow.steps
            ):
                d.end_note = f"state {moved!r} has no step left to run in this decision"
                return

    def _move(self, d: _Decision, src: str, dst: str, trigger: str) -> str:
        record = self.machine.transition(src, dst, d.context, trigger=trigger)
        d.transitions.append(record)
        d.state["state"] = dst
        d.state["last_transition"] = dict(record)
        d.context.update(self._facts(d.state))
        return dst

    def _step(self, d: _Decision, step: StepConfig, current: str) -> Flow:
        """Run one step with its failure policy; returns the new state if it moved."""
        wf = self.spec.workflow
        entry: dict[str, Any] = {"step": step.name, "state": current}
        d.steps.append(entry)
        policy = wf.on_failure(step)
        attempts = 1 + (wf.max_retries(step) if policy == "retry" else 0)
        reason: str | None = None
        if step.run_if is not None:
            try:
                go = bool(sandbox.evaluate(step.run_if, d.context))
            except Exception as exc:  # a broken condition is the step's failure; no retry
                if isinstance(exc, RunStoppingError):
                    raise
                go, reason, attempts = True, _error_text("run_if: ", exc), 0
                entry["attempts"] = 0
            if not go:
                entry["status"] = "not_run"
                return None
        for attempt in range(1, attempts + 1):
            entry["attempts"] = attempt
            if attempt == 1:
                _bump(d.state["step_runs"], step.name)
            else:
                _bump(d.state["retries"], step.name)
            try:
                moved = yield from self._attempt(d, step, current, reason)
            except StepFailed as exc:
                reason = str(exc)
                continue
            entry["status"] = "ok"
            if reason is not None:
                entry["error"] = reason
            return moved
        # every attempt failed
        assert reason is not None
        _bump(d.state["failures"], step.name)
        entry["error"] = reason
        if policy == "skip":
            entry["status"] = "skipped"
            return None
        entry["status"] = "failed"
        d.failure = f"step {step.name!r} failed: {reason}"
        return None

    def _attempt(self, d: _Decision, step: StepConfig, current: str, last: str | None) -> Flow:
        note = (
            None
            if last is None
            else f"Your previous reply could not be used ({last}). Try again, following the format."
        )
        if step.type == "code":
            self._run_code(d, step)
        elif step.type == "llm":
            actions = available_tools(d.observation)
            if not actions:
                raise StepFailed("no actions available")
            request = self._act_request(d, step, actions, note)
            response = yield from self._ask(d, request)
            registry = self.registry
            models = (
                arg_models_for([n for n in actions if n in registry], registry)
                if registry is not None
                else {}
            )
            parsed = parse_act(response, actions, models)
            if isinstance(parsed, str):
                raise StepFailed(parsed)
            d.action = parsed.value
            d.reasoning = parsed.reasoning
            d.parse_path = parsed.path
            d.action_step = step.name
        else:  # transition
            request = self._choose_request(d, step, note)
            response = yield from self._ask(d, request)
            parsed = parse_choice(response, list(step.transition_map))
            if isinstance(parsed, str):
                raise StepFailed(parsed)
            target = step.transition_map[parsed.value]
            why = self.machine.why_not(current, target, d.context)
            if why is not None:
                raise StepFailed(f"choice {parsed.value!r}: {why}")
            if target == current:
                return None
            return self._move(d, current, target, f"{step.name}: {parsed.value}")
        if step.transition_to is None or step.transition_to == current:
            return None
        why = self.machine.why_not(current, step.transition_to, d.context)
        if why is not None:  # a guard: the state stays, the step still succeeded
            d.steps[-1]["blocked"] = why
            return None
        trigger = f"{step.name}: {step.run_if}" if step.run_if else f"{step.name}: done"
        return self._move(d, current, step.transition_to, trigger)

    def _ask(self, d: _Decision, request: Request) -> Generator[Request, Reply, LLMResponse]:
        response, error = yield request
        d.llm_calls += 1
        if response is None:
            raise StepFailed(error or "llm error: no response")
        d.llm_tokens += int(response.usage.total_tokens or 0)
        if (
            response.finish_reason == "length"
            and not response.tool_calls
            and not (response.content or "").strip()
        ):
            raise StepFailed("empty reply (finish_reason length)")
        return response

    def _run_code(self, d: _Decision, step: StepConfig) -> None:
        try:
            assigned = sandbox.execute(step.code or "", d.context)
        except Exception as exc:
            if isinstance(exc, RunStoppingError):
                raise
            raise StepFailed(_error_text("code: ", exc)) from None
        reserved = sorted(RESERVED_NAMES & set(assigned))
        if reserved:
            raise StepFailed(f"code: cannot assign {reserved[0]!r} (set by the workflow)")
        values = {name: _to_json(assigned[name], name) for name in sorted(assigned)}
        variables = {**d.state["variables"], **values}
        size = len(canonical_json(variables))
        if size > MAX_VARIABLES_CHARS:
            raise StepFailed(f"code: variables too large ({size} chars > {MAX_VARIABLES_CHARS})")
        d.state["variables"] = variables
        d.context.update(copy.deepcopy(values))

    # -- the result ----------------------------------------------------------------------------
    def _finish(self, d: _Decision) -> ActionRequest:
        d.state["decisions"] = int(d.state.get("decisions", 0)) + 1
        meta: dict[str, Any] = {
            "agent_state": d.state,
            "transitions": d.transitions,
            "workflow_state": d.state["state"],
            "steps": d.steps,
            "action_step": d.action_step if d.failure is None else None,
            "model": self.model,
            "llm_calls": d.llm_calls,
            "llm_tokens": d.llm_tokens,
        }
        if d.reset is not None:
            meta["agent_state_reset"] = d.reset
        for flag in ("should_pivot", "stuck_in_loop"):
            # Flags the analysis plots (pivots) must see: the agent state itself is not recorded.
            if isinstance(d.state["variables"].get(flag), bool):
                meta[flag] = d.state["variables"][flag]

        if d.failure is None and d.action is not None:
            name, arguments = d.action
            meta["parse_path"] = d.parse_path
            return ActionRequest(
                run_id=d.run_id,
                time_step=d.time_step,
                agent_id=d.agent_id,
                action_name=name,
                arguments=arguments,
                reasoning=d.reasoning,
                metadata=meta,
            )
        if d.failure is not None:
            reason = d.failure
        else:
            reason = "no action: " + (d.end_note or "no llm step produced one")
        meta["parse_path"] = "fallback"
        meta["fallback_reason"] = truncate(reason, MAX_REASON_CHARS)
        return ActionRequest(
            run_id=d.run_id,
            time_step=d.time_step,
            agent_id=d.agent_id,
            action_name=FALLBACK_ACTION,
            metadata=meta,
        )

    # -- drivers -------------------------------------------------------------------------------
    def decide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """One decision, calling the model with ``chat`` (see the module docstring)."""
        flow = self._flow(
            run_id=run_id, time_step=time_step, agent_id=agent_id, observation=observation
        )
        try:
            request = next(flow)
            while True:
                request = flow.send(self._call(request))
        except StopIteration as stop:
            return stop.value

    async def adecide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """One decision, awaiting the model with ``achat``: the same walk as ``decide``."""
        flow = self._flow(
            run_id=run_id, time_step=time_step, agent_id=agent_id, observation=observation
        )
        try:
            request = next(flow)
            while True:
                request = flow.send(await self._acall(request))
        except StopIteration as stop:
            return stop.value

    def _call(self, request: Request) -> Reply:
        try:
            return _checked(self.gateway.chat(**request)), None
        except Exception as exc:
            stop_if_unavailable(exc)  # an outage stops the run; it is not the agent's doing
            return None, _error_text("llm error: ", exc)

    async def _acall(self, request: Request) -> Reply:
        try:
            achat = getattr(self.gateway, "achat", None)
            if achat is None:
                reply = await asyncio.to_thread(self.gateway.chat, **request)
            else:
                reply = await achat(**request)
            return _checked(reply), None
        except Exception as exc:
            stop_if_unavailable(exc)
            return None, _error_text("llm error: ", exc)


def _checked(reply: Any) -> LLMResponse:
    return reply if isinstance(reply, LLMResponse) else LLMResponse.model_validate(reply)


def _bump(counter: dict[str, Any], key: str) -> None:
    counter[key] = int(counter.get(key, 0)) + 1
