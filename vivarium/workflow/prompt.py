"""Step prompts: the step's text, then its components, then ``{variable}`` substitution.

The context is the ecology observation (``tick`` is its ``time_step``), under the workflow's own
variables: fresh observation values win at the start of a decision, and code steps may override
them for the rest of it. Rendering is a pure function of the context (lists and dicts as compact
JSON with sorted keys), so the same step gives the same prompt and a cassette hits on rerun.

Placeholders: ``{name}``, ``{name.key}`` / ``{name.0}`` (dotted lookups) and ``{name:spec}`` with a
Python format spec, as ``str.format`` reads it (``{success_rate:.0%}`` -> ``75%``). A value the
spec does not fit is rendered plainly instead of failing; None under a spec, and a name the
workflow knows but has not set this turn (an llm step that did not run, see ``render_template``'s
``unset``), read ``(none)``. Other unknown names stay as written, so JSON examples survive.

Names for agents written for the agent ecology (its workflow context), derived from our ecology
observation by ``build_context`` (our own names keep their meaning; where the original had a
name we also have, ours wins and is listed with its shape):

- ``agent_id``, ``balance``, ``tick`` (= ``time_step``): as the observation has them.
- ``artifacts``: the observation's listing, each dict also given ``created_by`` (= ``owner``).
- ``my_artifacts``: ids of the agent's artifacts (as the original's).
- ``memories``: the observed memory entries as ``- [t=3] action: ...`` lines, or
  ``(No memories)``; ``memory`` keeps the entries themselves.
- ``last_action_result``: our dict ``{action, success, reason}`` (None before the first action;
  the original had a sentence).
- ``action_history``: our list of ``{time_step, action, success}`` (the original: lines of text).
- ``success_rate``: our fraction 0..1 over every action (None before the first; the original:
  ``"3/4 (75%)"``). Renders with ``{success_rate:.0%}``.
- ``time_remaining``, ``progress_percent``: steps left and percent done (the original: wall
  clock text), ``economic_context``: our dict of ledger facts (the original: a sentence).
- ``other_artifacts``: the artifacts whose ``created_by`` is not this agent.
- ``other_agents``: the ids of the other agents (agent artifacts that are not this agent).
- ``actions_taken``, ``successful_actions``, ``failed_actions``: counts over every action of
  the agent, kept by the workflow in its agent state (``tally``); from the observed history
  alone when no tally is given.
- ``revenue_earned``: balance minus the balance at the agent's first decision (``tally``).
- ``recent_failures`` / ``recent_successes``: the failed / successful actions of the observed
  history, oldest first, each ``{action_type, time_step, success}`` plus ``reason`` for
  failures (matched from ``failure_history``, both kept in the same order by the world).
- ``working_memory``: the agent's working memory (a mapping; ``{}`` when it has none).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from vivarium.policies.sections import defuse
from vivarium.seeding import canonical_json
from vivarium.workflow.config import AgentSpec, StepConfig
from vivarium.workflow.names import OBSERVATION_KEYS

MAX_FORMAT_WIDTH = 100  # widths and precisions in ``{name:spec}``, as the sandbox allows
MAX_VALUE_CHARS = 4000  # one substituted value; a huge artifact list must not flood a prompt
ELLIPSIS = "…"
UNSET_TEXT = "(none)"  # a known name with no value this turn, or None under a format spec
NO_MEMORIES = "(No memories)"

_PLACEHOLDER = re.compile(
    r"\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)(?::([^{}:\"']{0,40}))?\}"
)


def _json_like(value: Any) -> Any:
    """Tuples -> lists; anything else JSON cannot hold -> its ``str`` (observations are data)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, list | tuple):
        return [_json_like(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _json_like(v) for k, v in value.items()}
    return str(value)


def build_context(
    observation: Mapping[str, Any],
    variables: Mapping[str, Any] | None = None,
    *,
    workflow: Mapping[str, Any] | None = None,
    tally: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The names a step's prompt and code see, in three layers, each over the one before.

    Workflow variables, then the observation (``tick`` = ``time_step``) with the names derived
    from it for agents written for the agent ecology (see the module docstring), then the
    workflow's own facts (``state``, ``last_transition``, ...). Every ``OBSERVATION_KEYS`` and
    ``DERIVED_KEYS`` name is present.

    Args:
        observation: The ecology observation.
        variables: The workflow's variables (kept in the agent state).
        workflow: The workflow's own facts.
        tally: Counts the workflow keeps over the agent's whole life (``actions_taken``,
            ``successful_actions``, ``failed_actions``, ``starting_balance``); without it the
            counts come from the observed history and revenue is 0.
    """
    context: dict[str, Any] = {k: v for k, v in (variables or {}).items()}
    for key, value in observation.items():
        if key == "agent_state" or not isinstance(key, str):
            continue
        context[key] = _json_like(value)
    for key in OBSERVATION_KEYS:
        context.setdefault(key, None)
    context["tick"] = context.get("time_step")
    context.update(derived_names(context, tally))
    context.update(workflow or {})
    return context


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [dict(v) for v in value] if isinstance(value, list) else []


def derived_names(
    observed: Mapping[str, Any], tally: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The agent ecology's workflow names, from an observation (see the module docstring)."""
    agent_id = observed.get("agent_id")
    artifacts = []
    for item in observed.get("artifacts") or []:
        if isinstance(item, Mapping):
            item = {**item, "created_by": item.get("created_by", item.get("owner"))}
        artifacts.append(item)
    other_artifacts = [
        a for a in artifacts if isinstance(a, Mapping) and a.get("created_by") != agent_id
    ]
    others = sorted(
        str(a.get("id"))
        for a in artifacts
        if isinstance(a, Mapping) and a.get("kind") == "agent" and a.get("id") != agent_id
    )
    history = [h for h in _dicts(observed.get("action_history")) if "action" in h]
    failed = [h for h in history if not h.get("success")]
    reasons = [f.get("reason") for f in _dicts(observed.get("failure_history"))]
    recent_failures = []
    # The world appends to both lists in the same order: the n-th last failure of the action
    # history is the n-th last entry of the failure history (while both still hold it).
    for back, item in enumerate(reversed(failed), start=1):
        entry = {
            "action_type": item["action"],
            "time_step": item.get("time_step"),
            "success": False,
        }
        if back <= len(reasons):
            entry["reason"] = reasons[-back]
        recent_failures.append(entry)
    recent_failures.reverse()
    recent_successes = [
        {"action_type": h["action"], "time_step": h.get("time_step"), "success": True}
        for h in history
        if h.get("success")
    ]
    if tally is not None:
        taken = int(tally.get("actions_taken", 0))
        ok = int(tally.get("successful_actions", 0))
    else:
        taken, ok = len(history), len(recent_successes)
    balance = observed.get("balance")
    start = (tally or {}).get("starting_balance")
    revenue = (
        float(balance) - float(start)
        if isinstance(balance, int | float) and isinstance(start, int | float)
        else 0.0
    )
    memory = [m for m in observed.get("memory") or [] if m is not None]
    wm = observed.get("working_memory")
    return {
        "artifacts": artifacts,
        "other_agents": others,
        "other_artifacts": other_artifacts,
        "memories": format_memories(memory) if memory else NO_MEMORIES,
        "actions_taken": taken,
        "successful_actions": ok,
        "failed_actions": taken - ok,
        "revenue_earned": revenue,
        "recent_failures": recent_failures,
        "recent_successes": recent_successes,
        "working_memory": {} if wm is None else wm,
    }


def render_value(value: Any, limit: int = MAX_VALUE_CHARS) -> str:
    """Text for one value: strings as they are, numbers plainly, the rest compact JSON."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, float):
        text = json.dumps(round(value, 4)) if math.isfinite(value) else str(value)
    elif value is None or isinstance(value, bool | int):
        text = json.dumps(value)
    else:
        text = canonical_json(_json_like(value))
    text = defuse(text)  # world content cannot place prompt sections
    return text if len(text) <= limit else text[:limit] + ELLIPSIS


def _lookup(context: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    head, *rest = dotted.split(".")
    if head not in context:
        return False, None
    value = context[head]
    for part in rest:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list | tuple) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


def _formatted(value: Any, spec: str) -> str:
    """``format(value, spec)`` as ``str.format`` does it; a value the spec does not fit, plainly."""
    if value is None:
        return UNSET_TEXT
    if _too_wide(spec):
        return render_value(value)
    try:
        text = defuse(format(value, spec))
    except (TypeError, ValueError):
        return render_value(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + ELLIPSIS


_WIDTHS = re.compile(r"\d+")


def _too_wide(spec: str) -> bool:
    """A width or precision over ``MAX_FORMAT_WIDTH`` (``{x:>300000000}`` would allocate it)."""
    return any(len(n) > 3 or int(n) > MAX_FORMAT_WIDTH for n in _WIDTHS.findall(spec))


def render_template(template: str, context: Mapping[str, Any], unset: Collection[str] = ()) -> str:
    """Replace ``{name}``, ``{name.key}`` and ``{name:spec}`` with context values.

    Unknown names stay as they are (so JSON examples in a prompt survive), except those in
    ``unset``: names the workflow knows may hold a value (an llm step's name or output), which
    read ``(none)`` when they hold none this turn. One pass: substituted text is not re-expanded.
    """

    def sub(match: re.Match[str]) -> str:
        dotted, spec = match.group(1), match.group(2)
        found, value = _lookup(context, dotted)
        if not found:
            return UNSET_TEXT if dotted.split(".")[0] in unset else match.group(0)
        return render_value(value) if spec is None else _formatted(value, spec)

    return _PLACEHOLDER.sub(sub, template)


def compose_prompt(step: StepConfig, components: Sequence[Any]) -> str:
    """The step prompt, then each component's text, blank-line separated (not yet substituted)."""
    parts = [(step.prompt or "").strip()]
    parts += [str(getattr(c, "content", c)).strip() for c in components]
    return "\n\n".join(p for p in parts if p)


def build_prompt(
    step: StepConfig,
    context: Mapping[str, Any],
    spec: AgentSpec | None = None,
    components: Sequence[Any] | None = None,
    unset: Collection[str] = (),
) -> str:
    """Step prompt + components injected into this step (listed order), with variables filled.

    ``unset``: names that read ``(none)`` when the context lacks them (see ``render_template``).
    """
    if components is None:
        components = spec.components_for(step.name) if spec is not None else []
    return render_template(compose_prompt(step, components), context, unset)


def format_memories(entries: Sequence[Mapping[str, Any]]) -> str:
    """``- [t=3] observation: text`` lines for memory entries."""
    lines = []
    for entry in entries:
        if isinstance(entry, Mapping):
            kind = entry.get("kind")
            text = render_value(entry.get("text", entry.get("content", "")), 500)
            lines.append(f"- [t={entry.get('time_step')}] {kind + ': ' if kind else ''}{text}")
        else:
            lines.append(f"- {render_value(entry, 500)}")
    return "\n".join(lines)


def format_working_memory(value: Any, max_bytes: int) -> str:
    """Working memory as compact JSON, cut to ``max_bytes`` UTF-8 bytes."""
    text = value if isinstance(value, str) else canonical_json(_json_like(value))
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode("utf-8", errors="ignore") + ELLIPSIS
