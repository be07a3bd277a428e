"""Step prompts: the step's text, then its components, then ``{variable}`` substitution.

The context is the ecology observation (``tick`` is its ``time_step``), under the workflow's own
variables: fresh observation values win at the start of a decision, and code steps may override
them for the rest of it. Rendering is a pure function of the context (lists and dicts as compact
JSON with sorted keys), so the same step gives the same prompt and a cassette hits on rerun.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from vivarium.seeding import canonical_json
from vivarium.workflow.config import AgentSpec, StepConfig
from vivarium.workflow.names import OBSERVATION_KEYS

MAX_VALUE_CHARS = 4000  # one substituted value; a huge artifact list must not flood a prompt
ELLIPSIS = "…"

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)\}")


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
) -> dict[str, Any]:
    """The names a step's prompt and code see, in three layers, each over the one before.

    Workflow variables, then the observation (``tick`` = ``time_step``), then the workflow's own
    facts (``state``, ``last_transition``, ...). Every ``OBSERVATION_KEYS`` name is present.
    """
    context: dict[str, Any] = {k: v for k, v in (variables or {}).items()}
    for key, value in observation.items():
        if key == "agent_state" or not isinstance(key, str):
            continue
        context[key] = _json_like(value)
    for key in OBSERVATION_KEYS:
        context.setdefault(key, None)
    context["tick"] = context.get("time_step")
    context.update(workflow or {})
    return context


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


def render_template(template: str, context: Mapping[str, Any]) -> str:
    """Replace ``{name}`` and ``{name.key}`` with context values.

    Unknown names stay as they are (so JSON examples in a prompt survive). One pass: substituted
    text is not re-expanded.
    """

    def sub(match: re.Match[str]) -> str:
        found, value = _lookup(context, match.group(1))
        return render_value(value) if found else match.group(0)

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
) -> str:
    """Step prompt + components injected into this step (listed order), with variables filled."""
    if components is None:
        components = spec.components_for(step.name) if spec is not None else []
    return render_template(compose_prompt(step, components), context)


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
