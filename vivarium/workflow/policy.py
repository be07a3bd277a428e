"""WorkflowPolicy: an agent as a state machine of steps, with every bit of its state explicit.

Per decision, starting in the state carried in ``observation["agent_state"]`` (the initial state
the first time), the policy runs the steps of the current state in order, skipping those whose
``in_state`` excludes it or whose ``run_if`` is false:

- ``code`` steps run safe-eval statements; the names they assign become context variables,
  kept in the agent state from one decision to the next;
- ``llm`` steps ask the model for an action through one forced tool, ``act`` (JSON in the text is
  accepted too); the action must be one the observation offers, with valid arguments. As in the
  agent ecology's runner, every llm step asks for an action and the result is kept for the later
  steps of the same turn: under the step's name, ``{"reasoning", "action": {"action_type",
  "name", "arguments"}}``, and, when the step has ``output`` (the original's ``output_key``), its
  reasoning text under that variable, so "analyse, then decide" chains read ``{audit_result}``.
  These results live for the turn only (they are not variables; see deferral below);
- ``transition`` steps ask the model to pick a key of ``transition_map`` through a forced tool
  ``choose``; the state machine must allow the move (a refused choice is a failure, retried
  with the reason told; the agent ecology's runner kept the state instead). The prompt
  labels the options ``A)``, ``B)``... in listed order, and answers are read the way models give
  them (``Ship.``, ``B``, ``B)``, ``Option C``, ``**pivot**``, ``I choose B) PIVOT``:
  ``match_option``). The model's stated reason is kept in the step's entry (``reason``), in the
  transition record (``reason``) and, with the choice, under the step's name
  (``{"decision", "reasoning"}``). A transition step without a prompt asks
  ``DEFAULT_TRANSITION_PROMPT`` (the original's continue / pivot / ship evaluation, our words);
- ``code`` steps with ``action:`` run a named code action (``vivarium.workflow.code_actions``):
  ``execute_decision`` makes the action decided so far the turn's action and ends the walk (the
  step's ``transition_to`` still applies; with no action decided yet the step fails), ``noop``
  makes it ``noop`` without a model call.

A step's ``transition_to`` moves the state after it succeeds, if the state machine allows it (a
transition whose condition is false leaves the state as it is: conditions are guards). A change of
state ends the old state's steps; the decision goes on with the new state's steps until an action
has been produced or no step is left to run. Each step is considered at most once per decision
(a step without ``in_state`` runs once, in the first state the decision is in), so every walk
ends; the next decision starts in the state this one ended in. No action means ``noop``. If more
than one llm step produces an action, the last one counts. Within a state, the steps after an llm
step still run in the same turn (the original runs its whole list each turn). After a change of
state the walk goes on with the new state's steps, from the top of the list, only while no
action has been produced (the original goes on down its list, past the step that moved).

Model calls per turn: ``workflow.llm_calls_per_turn`` (unset: no limit, as the original's runner;
its design document states one call per turn, for cost and predictability: set it to 1). Once a
turn has made that many calls, the next step that needs the model (an llm or transition step
whose ``run_if`` holds, or a retry) is not run: its entry says ``status: "deferred"``, the walk
stops there, and the turn acts on the action decided so far (``noop`` when none). The next turn
goes on at that step, in the same state, with the deferred turn's step results (and a retry's
attempt count and error) carried over in the agent state (``resume``): the steps listed before it
do not run again, the steps after it run as usual. A chain of N llm steps thus takes N turns,
each acting on the action its own step chose.

A failed step (model error, unusable reply, safe-eval error, refused choice) follows its
``on_failure``: ``retry`` (up to ``max_retries`` more attempts, the model told what was wrong; when
they run out the step fails), ``skip`` (the same retries, then go on with the next step, as the
original's design document has it; its runner never retried a ``skip`` step) or ``fail`` (end the
decision at once: ``noop`` with the reason). Nothing raises out of a decision, except a
``RunStoppingError`` (a replay with no recorded reply) and an LLM outage that outlasted the
retries (``LLMUnavailable``, unless ``on_llm_error="fallback"``): both must stop the run, the
outage resumably.

The actions an agent may take, and their arguments, come from the registry of the world it acts
in: the engine hands it over (``use_world_actions``) when the run is built. A policy used alone
without a ``registry`` names actions without arguments and leaves the checks to the world.

``ActionRequest.metadata``: ``agent_state`` (taken out of the record by the engine),
``transitions`` (``{"from_state", "to_state", "trigger", "routine"}``, plus ``reason`` when the
model gave one), ``workflow_state``, ``steps`` (one entry per step considered: step, state,
status (``ok``, ``not_run``, ``skipped``, ``failed``, ``deferred``), attempts, error, reason),
``action_step``, ``parse_path`` (``tool_call``, ``json_text``, ``text``, ``code_action``,
``fallback``), ``fallback_reason`` when the action is a fallback ``noop``, ``model``,
``llm_calls``, ``llm_tokens``, ``deferred`` (``{step, state, attempt}``) when a step waits for the
next turn, ``stopped_by`` when a code action ended the walk, and ``agent_state_reset`` when the
state that came in could not be used. The agent state also carries ``tally`` (counts over the
agent's life for ``actions_taken``, ``revenue_earned``...: ``vivarium.workflow.prompt``).
"""

from __future__ import annotations

import copy
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vivarium import sandbox
from vivarium.errors import RunStoppingError
from vivarium.gateways.base import LLMResponse, ModelGateway
from vivarium.gateways.effects import Effect, arun, run
from vivarium.policies.asking import ask
from vivarium.policies.budget import DEFAULT_CONTEXT_TOKENS
from vivarium.policies.parsing import FALLBACK_ACTION, MAX_REASON_CHARS, truncate
from vivarium.policies.prompting import arg_models_for, available_tools, describe_tool
from vivarium.protocols import implements
from vivarium.seeding import canonical_json, workflow_request_seed
from vivarium.types import ActionRequest
from vivarium.workflow.code_actions import EXECUTE_DECISION, NOOP, describe_unknown
from vivarium.workflow.config import AgentSpec, StepConfig
from vivarium.workflow.names import RESERVED_NAMES
from vivarium.workflow.prompt import build_context, build_prompt, render_template
from vivarium.workflow.replies import option_letters, parse_act, parse_choice
from vivarium.workflow.state_machine import StateMachine
from vivarium.workflow.tools import (
    ACT_TOOL,
    CHOOSE_TOOL,
    ActionCatalog,
    act_tool,
    argument_schemas,
    choose_tool,
    force_tool,
)

DEFAULT_MAX_TOKENS = 384
MAX_VARIABLES_CHARS = 65_536  # canonical JSON of all variables: agent state stays small
STATE_VERSION = 1
# A transition step without a prompt asks this (the agent ecology's default continue / pivot /
# ship evaluation, in our words), with the options listed after it.
DEFAULT_TRANSITION_PROMPT = (
    "Take stock before you go on.\n"
    "Steps left: {time_remaining} | Success rate: {success_rate:.0%} | "
    "Scrip earned so far: {revenue_earned:+.0f}\n\n"
    "Your recent actions: {action_history}\n"
    "The last result: {last_action_result}\n\n"
    "Judge by that evidence. Keep going when recent actions are getting somewhere or something "
    "useful is nearly done; change course when the same failure keeps coming back or nothing "
    "moves; call it done when what you have works well enough to be used. Say why."
)
# Names no agent, so that every agent's request begins alike (a server's prompt cache serves the
# shared start once); the step prompts say who the agent is (``PROPOSE_ACTION_PROMPT`` does).
DEFAULT_SYSTEM_PROMPT = (
    "You are an agent in a shared world of artifacts and scrip. "
    "Act by calling the tool you are given, exactly once."
)

Request = dict[str, Any]
# A decision, written once: it yields each model call (``asking.Chat``) and gets its reply back;
# ``decide`` and ``adecide`` drive it (``gateways.effects``).
Flow = Generator[Effect, Any, Any]


class StepFailed(Exception):
    """One attempt of a step went wrong; the reason is recorded, the decision goes on."""


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
    outputs: dict[str, Any] = field(default_factory=dict)  # step results of this turn
    resume: dict[str, Any] | None = None  # where a deferred turn goes on (from the agent state)
    assigned: dict[str, Any] = field(default_factory=dict)  # what code steps set this turn
    deferred: dict[str, Any] | None = None  # where this turn stopped for the next one
    stop: str | None = None  # a code action ended the walk


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
        memory: Any = None,
        context_tokens: int | None = DEFAULT_CONTEXT_TOKENS,
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
            memory: Where ``rag`` retrieval searches: a ``MemoryStore``, or a factory
                ``agent_id -> MemoryStore``. None: the observation's memory (in the ecology
                world, a search over all of the agent's entries, kept by the world). The policy
                only searches a plugged store, never fills it, and keeps nothing itself: what
                the store holds is the caller's state. A store derived from the world (its
                ``agent_memory(agent_id).store``) resumes and replays exactly; any other must be
                rebuilt before a resume (e.g. from ``world.memory_entries(agent_id)``), or
                retrieval, prompts and so cassette hits differ.
            context_tokens: The context budget in estimated tokens (the aam engine's 8000 by
                default; None for none): a longer request loses its oldest history lines first,
                recorded in the step's ``context_trimmed`` (``vivarium.policies.budget``).
        """
        self.memory = memory
        self.context_tokens = context_tokens
        self.spec = spec
        self.gateway = gateway
        # The agent's seed (recorded in the trace) and, from a build plan, the provider seed of
        # its requests; without one, each request's seed is derived from ``seed`` per agent.
        self.seed = seed
        self._request_seed = request_seed
        self._own_registry = registry is not None
        self.registry = registry
        self.machine = StateMachine.from_config(spec.workflow)
        own = gateway.model if implements(gateway, ModelGateway) else None  # the gateway's
        self.model = spec.llm_model or model or own or "mock"
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
        if not isinstance(state.get("tally"), Mapping):
            state.pop("tally", None)
        resume = state.get("resume")
        if resume is not None and not (
            isinstance(resume, Mapping)
            and resume.get("state") == state["state"]
            and any(s.name == resume.get("step") for s in self.spec.workflow.steps)
            and isinstance(resume.get("outputs", {}), Mapping)
        ):
            state.pop("resume")  # a deferred step that is gone: the turn starts from the top
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
        """The chat request: ``{sections.*}`` filled in, then fitted to the context budget.

        Sections come from the context (``vivarium.policies.sections``); relevant memories are
        retrieved here, where the observation (and its search over all memories) is at hand:
        the query is ``rag.query_template`` rendered with the context, else the text before
        the memory section (the step's prompt), plus the working memory with
        ``include_in_rag``. A missing working memory with ``warn_on_missing`` and a trimmed
        request are recorded in the step's entry of the decision's ``steps``.
        """
        from vivarium.memory import search_memories, store_for
        from vivarium.policies.budget import fit_messages
        from vivarium.policies.sections import (
            fill_sections,
            memories_section,
            prompt_sections,
            sections_in,
            working_memory_query_text,
        )

        entry = d.steps[-1] if d.steps else {}
        rag, wm = self.spec.rag, self.spec.working_memory
        wm_value = d.context.get("working_memory")
        notes: list[str] = []
        if wm.enabled and getattr(wm, "warn_on_missing", False) and wm_value in (None, {}, ""):
            notes.append("working memory is empty")
        names = sections_in(user)
        if names:
            values = prompt_sections(
                d.context,
                working_memory=wm.enabled and getattr(wm, "auto_inject", True),
                working_memory_bytes=getattr(wm, "max_size_bytes", None) or wm.max_bytes,
                structured=getattr(wm, "structured_format", True),
                agent_id=d.agent_id,
            )
            mark = "{sections.relevant_memories}"
            user = fill_sections(
                user, lambda n: None if n == "relevant_memories" else values.get(n)
            )
            if mark in user:
                found = None
                if rag.enabled:
                    template = getattr(rag, "query_template", None)
                    before = user.split(mark)[0].strip()
                    query = render_template(template, d.context) if template else before
                    if getattr(wm, "include_in_rag", False):
                        query += "\n" + working_memory_query_text(wm_value)
                    k = getattr(rag, "limit", None) or rag.k
                    store = store_for(self.memory, d.agent_id)
                    found = search_memories(
                        query, k, store=store, observed=d.observation.get("memory")
                    )
                user = fill_sections(user, {"relevant_memories": memories_section(found)})
        messages = [
            {"role": "system", "content": self._system(d.context)},
            {"role": "user", "content": user},
        ]
        messages, trim = fit_messages(messages, [tool], self.context_tokens)
        if trim is not None:
            entry["context_trimmed"] = trim.as_metadata()
        for note in notes:
            if note not in entry.setdefault("notes", []):
                entry["notes"].append(note)
        return {
            "model": self.model,
            "messages": messages,
            "tools": [tool],
            "tool_choice": force_tool(tool_name),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "seed": self.request_seed(d.agent_id),
        }

    def _extras(self, prompt: str, context: Mapping[str, Any]) -> list[str]:
        """Memory and working-memory sections after the step prompt, unless it places them.

        They are placeholders here, filled by ``_request`` (``vivarium.policies.sections``);
        working memory only with ``auto_inject`` (the agent ecology's default: on).
        """
        extras = []
        if self.spec.rag.enabled and "{sections.relevant_memories}" not in prompt:
            extras.append("{sections.relevant_memories}")
        wm = self.spec.working_memory
        injected = wm.enabled and getattr(wm, "auto_inject", True)
        if injected and "{sections.working_memory}" not in prompt:
            extras.append("{sections.working_memory}")
        return extras

    def _unset_names(self) -> set[str]:
        """Names an llm or transition step may set this turn: ``(none)`` in a prompt until then."""
        names = set()
        for step in self.spec.workflow.steps:
            if step.type != "code":
                names.add(step.name)
                key = _output_key(step)
                if key:
                    names.add(key)
        return names

    def _act_request(
        self, d: _Decision, step: StepConfig, actions: Sequence[str], note: str | None
    ) -> Request:
        prompt = build_prompt(step, d.context, self.spec, unset=self._unset_names())
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
            argument_schemas(actions, self.registry, d.observation, d.agent_id),
        )
        return self._request(d, "\n\n".join(parts), tool, ACT_TOOL)

    def _choose_request(self, d: _Decision, step: StepConfig, note: str | None) -> Request:
        if not (step.prompt or "").strip():
            step = step.model_copy(update={"prompt": DEFAULT_TRANSITION_PROMPT})
        prompt = build_prompt(step, d.context, self.spec, unset=self._unset_names())
        options = list(step.transition_map)
        letters = {key: letter for letter, key in option_letters(options).items()}
        lines = [f"Choose exactly one of: {', '.join(options)}."]
        lines += [
            f"{letters[key] + ')' if key in letters else '-'} {key}: go to {target}"
            for key, target in step.transition_map.items()
        ]
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
        """Yields each model call (``asking.Chat``), gets its reply back, returns the action.

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
            state["tally"] = _tally(state.get("tally"), observation)
            d.resume = state.pop("resume", None)
            d.context = build_context(
                observation,
                state["variables"],
                workflow=self._facts(state),
                tally=state["tally"],
            )
            if d.resume is not None:  # what the turn that was cut short had computed
                d.assigned = copy.deepcopy(dict(d.resume.get("values") or {}))
                d.context.update(copy.deepcopy(d.assigned))
                d.outputs = copy.deepcopy(dict(d.resume.get("outputs") or {}))
                d.context.update(copy.deepcopy(d.outputs))
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
        resume = d.resume
        if resume is not None:  # a deferred turn goes on at the step it stopped at
            for step in self.spec.workflow.steps:
                if step.name == resume["step"]:
                    break
                considered.add(step.name)
        while True:
            current = d.state["state"]
            moved: str | None = None
            for step in self.spec.workflow.steps:
                if step.name in considered:
                    continue
                if step.in_state is not None and current not in step.in_state:
                    continue
                considered.add(step.name)
                again = resume if resume is not None and resume["step"] == step.name else None
                moved = yield from self._step(d, step, current, again)
                if d.failure is not None or d.deferred is not None or d.stop is not None:
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

    def _move(
        self, d: _Decision, src: str, dst: str, trigger: str, reason: str | None = None
    ) -> str:
        record = self.machine.transition(src, dst, d.context, trigger=trigger)
        if reason:
            record["reason"] = reason
        d.transitions.append(record)
        d.state["state"] = dst
        d.state["last_transition"] = dict(record)
        d.context.update(self._facts(d.state))
        return dst

    def _call_budget_spent(self) -> int | None:
        """``workflow.llm_calls_per_turn`` (None: no limit, the original runner's behaviour)."""
        limit = getattr(self.spec.workflow, "llm_calls_per_turn", None)
        return None if limit is None else max(int(limit), 1)

    def _step(
        self,
        d: _Decision,
        step: StepConfig,
        current: str,
        resume: Mapping[str, Any] | None = None,
    ) -> Flow:
        """Run one step with its failure policy; returns the new state if it moved."""
        wf = self.spec.workflow
        entry: dict[str, Any] = {"step": step.name, "state": current}
        d.steps.append(entry)
        policy = wf.on_failure(step)
        # Code is deterministic: running it again gives the same error (the agent ecology never
        # retried a code step either); retries are for the model's replies.
        retried = policy in ("retry", "skip") and step.type != "code"
        attempts = 1 + (wf.max_retries(step) if retried else 0)
        reason: str | None = None
        first = 1
        if resume is not None:  # a retry the last turn had no model call left for
            first = min(max(int(resume.get("attempt") or 1), 1), max(attempts, 1))
            reason = (resume.get("error") or "a retry") if first > 1 else None
        if step.run_if is not None:
            try:
                go = bool(sandbox.evaluate(step.run_if, d.context))
            except Exception as exc:  # as the agent ecology: a broken condition skips the step
                if isinstance(exc, RunStoppingError):
                    raise
                entry.update(status="skipped", attempts=0, error=_error_text("run_if: ", exc))
                return None
            if not go:
                entry["status"] = "not_run"
                return None
        limit = self._call_budget_spent()
        for attempt in range(first, attempts + 1):
            if step.type != "code" and limit is not None and d.llm_calls >= limit:
                # One model call per turn (or N): this step waits for the next turn.
                entry["status"] = "deferred"
                entry["attempts"] = attempt - first
                if reason is not None:
                    entry["error"] = reason
                d.deferred = {
                    "state": current,
                    "step": step.name,
                    "attempt": attempt,
                    "error": reason,
                    "outputs": copy.deepcopy(d.outputs),
                    "values": copy.deepcopy(d.assigned),
                }
                return None
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

    def _keep_output(self, d: _Decision, step: StepConfig, value: Any, text: str) -> None:
        """A step's result, for the later steps of the turn: under its name and its output key."""
        out = {step.name: value}
        key = _output_key(step)
        if key:
            out[key] = text
        out = {k: v for k, v in out.items() if k not in RESERVED_NAMES}
        d.outputs.update(copy.deepcopy(out))
        d.context.update(out)

    def _attempt(self, d: _Decision, step: StepConfig, current: str, last: str | None) -> Flow:
        note = (
            None
            if last is None
            else f"Your previous reply could not be used ({last}). Try again, following the format."
        )
        if step.type == "code":
            if (step.code or "").strip():
                self._run_code(d, step)
            self._code_action(d, step)
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
            name, arguments = parsed.value
            action = {"action_type": name, "name": name, "arguments": copy.deepcopy(arguments)}
            self._keep_output(
                d,
                step,
                {"reasoning": parsed.reasoning or "", "action": action},
                parsed.reasoning or "",
            )
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
            if parsed.reasoning:
                d.steps[-1]["reason"] = parsed.reasoning
            self._keep_output(
                d,
                step,
                {"decision": parsed.value, "reasoning": parsed.reasoning or ""},
                parsed.value,
            )
            if target == current:
                return None
            return self._move(d, current, target, f"{step.name}: {parsed.value}", parsed.reasoning)
        if step.transition_to is None or step.transition_to == current:
            return None
        why = self.machine.why_not(current, step.transition_to, d.context)
        if why is not None:  # a guard: the state stays, the step still succeeded
            d.steps[-1]["blocked"] = why
            return None
        trigger = f"{step.name}: {step.run_if}" if step.run_if else f"{step.name}: done"
        return self._move(d, current, step.transition_to, trigger)

    def _code_action(self, d: _Decision, step: StepConfig) -> None:
        """A code step's named ``action:`` (``vivarium.workflow.code_actions``); ends the walk.

        ``execute_decision``: the action decided so far is the turn's action (none yet: the
        step fails). ``noop``: the turn's action is ``noop``, without a model call.
        """
        name = getattr(step, "action", None)
        if not name:
            return
        if name == EXECUTE_DECISION:
            if d.action is None:
                raise StepFailed(f"{EXECUTE_DECISION}: no llm step has decided an action yet")
        elif name == NOOP:
            d.action, d.reasoning, d.parse_path = (FALLBACK_ACTION, {}), None, "code_action"
            d.action_step = step.name
        else:
            raise StepFailed(describe_unknown(str(name)))
        d.stop = f"{step.name}: {name}"

    def _ask(self, d: _Decision, request: Request) -> Generator[Effect, Any, LLMResponse]:
        response, exc = yield from ask(self.gateway, request)
        d.llm_calls += 1
        if response is None:
            raise StepFailed(
                "llm error: no response" if exc is None else _error_text("llm error: ", exc)
            )
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
        declared = self.spec.workflow.variables
        kept = (
            values
            if self.spec.workflow.keep_variables == "all"
            else {k: v for k, v in values.items() if k in declared}
        )
        variables = {**d.state["variables"], **kept}
        size = len(canonical_json(variables))
        if size > MAX_VARIABLES_CHARS:
            raise StepFailed(f"code: variables too large ({size} chars > {MAX_VARIABLES_CHARS})")
        d.state["variables"] = variables
        d.assigned.update(values)
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
        if d.deferred is not None and d.failure is None:
            d.state["resume"] = d.deferred
            meta["deferred"] = {k: d.deferred[k] for k in ("step", "state", "attempt")}
        if d.stop is not None:
            meta["stopped_by"] = d.stop
        for flag in ("should_pivot", "stuck_in_loop"):
            # Flags the analysis plots (pivots) must see: the agent state itself is not recorded.
            value = d.assigned.get(flag, d.state["variables"].get(flag))
            if isinstance(value, bool):
                meta[flag] = value

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
        elif d.deferred is not None:
            reason = (
                f"no action: step {d.deferred['step']!r} deferred to the next turn "
                f"(llm_calls_per_turn {self._call_budget_spent()})"
            )
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
        return run(flow)

    async def adecide(
        self, *, run_id: str, time_step: int, agent_id: str, observation: dict[str, Any]
    ) -> ActionRequest:
        """One decision, awaiting the model with ``achat``: the same walk as ``decide``."""
        flow = self._flow(
            run_id=run_id, time_step=time_step, agent_id=agent_id, observation=observation
        )
        return await arun(flow)


def _bump(counter: dict[str, Any], key: str) -> None:
    counter[key] = int(counter.get(key, 0)) + 1


def _output_key(step: StepConfig) -> str | None:
    """The variable an llm step's text goes to (``output_key:`` / ``output:``), if any."""
    for name in ("output_key", "output"):
        value = getattr(step, name, None)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _tally(previous: Mapping[str, Any] | None, observation: Mapping[str, Any]) -> dict[str, Any]:
    """Counts over the agent's whole life, carried in its agent state from turn to turn.

    Each action of the observed history is counted once (by its ``time_step``, past the last
    one counted); ``starting_balance`` is the balance at the agent's first decision, as the
    agent ecology takes it for ``revenue_earned``.
    """
    old = dict(previous or {})

    def count(key: str) -> int:  # a count a hand-edited checkpoint spoiled starts over
        value = old.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    through = old.get("through")
    taken, ok = count("actions_taken"), count("successful_actions")
    for item in observation.get("action_history") or []:
        if not isinstance(item, Mapping):
            continue
        t = item.get("time_step")
        if not isinstance(t, int) or (isinstance(through, int) and t <= through):
            continue
        taken += 1
        ok += bool(item.get("success"))
        through = t if not isinstance(through, int) else max(through, t)
    start = old.get("starting_balance")
    if not isinstance(start, int | float):
        balance = observation.get("balance")
        start = balance if isinstance(balance, int | float) else None
    return {
        "through": through,
        "actions_taken": taken,
        "successful_actions": ok,
        "starting_balance": start,
    }
