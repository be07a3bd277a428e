"""Chat messages from an observation: the text an LLM agent sees, and the tools it may call.

The text is a pure function of the observation and the settings (no clock, no randomness), so the
same step gives the same request, and a record/replay cache hits on a rerun.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from vivarium.policies.sections import (
    OWN_SECTIONS,
    SECTION_SOURCES,
    SHARED_SECTIONS,
    prompt_sections,
)
from vivarium.worlds.registry import ActionRegistry

# The system prompts name no agent: every agent's request then begins with the same tokens, which
# a server's prompt cache serves once for all (the agent's id is in the user message, after what
# all agents share). A ``{agent_id}`` in a system prompt of one's own is still filled in.
DEFAULT_SYSTEM_PROMPT = (
    "You are one of several agents in a shared message channel. "
    "Each step you see the recent messages and act by calling exactly one of the available "
    "tools. Keep your messages short."
)
# Worlds richer than the channel (balances, artifacts, ...): the agent is told where it is.
DEFAULT_WORLD_SYSTEM_PROMPT = (
    "You are one of several agents in a shared world. "
    "Each step you see your state and the recent messages, and act by calling exactly one of "
    "the available tools."
)
# What every observation has; anything else is the world's own state, shown to the agent.
BASE_OBSERVATION_KEYS = frozenset({"time_step", "agent_id", "messages", "tools", "agent_state"})
MAX_STATE_VALUE_CHARS = 1500  # one state field in a prompt: a long artifact list is clipped
JSON_HINT = (
    "If you cannot call tools, reply with only a JSON object: "
    '{"action": "<tool name>", "arguments": {...}}.'
)


def default_registry() -> ActionRegistry:
    """The channel world's actions: what a policy describes when it is given no registry."""
    from vivarium.worlds.channel import CHANNEL_ACTIONS

    return CHANNEL_ACTIONS


def system_prompt_for(
    agent_id: str, template: str | None = None, *, world_state: bool = False
) -> str:
    """The system prompt with ``{agent_id}`` filled in (replace, not format: other braces stay).

    The default speaks of a message channel, or of a shared world when the observation carries
    the world's own state (``world_state``).
    """
    default = DEFAULT_WORLD_SYSTEM_PROMPT if world_state else DEFAULT_SYSTEM_PROMPT
    return (template or default).replace("{agent_id}", agent_id)


def world_state_lines(observation: Mapping[str, Any]) -> list[str]:
    """A ``key: value`` line for each observation field beyond the channel's.

    The channel has none, so its prompts stay as they were. Values are compact JSON, each
    clipped to ``MAX_STATE_VALUE_CHARS``.
    """
    lines = []
    for key, value in observation.items():
        if key in BASE_OBSERVATION_KEYS:
            continue
        text = value if isinstance(value, str) else _compact(value)
        if len(text) > MAX_STATE_VALUE_CHARS:
            text = text[: MAX_STATE_VALUE_CHARS - 1] + "…"
        lines.append(f"{key}: {text}")
    return lines


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def available_tools(
    observation: Mapping[str, Any], allowed: Iterable[str] | None = None
) -> list[str]:
    """The observation's tool names, in its order, limited to ``allowed`` when given."""
    names = [str(n) for n in observation.get("tools") or ()]
    if allowed is None:
        return names
    keep = set(allowed)
    return [n for n in names if n in keep]


def tool_specs_for(
    observation: Mapping[str, Any],
    registry: ActionRegistry | None = None,
    allowed: Iterable[str] | None = None,
) -> list[dict[str, Any]]:
    """OpenAI tool specs for the tools the observation offers (those the registry describes)."""
    registry = registry or default_registry()
    return registry.tool_specs([n for n in available_tools(observation, allowed) if n in registry])


def arg_models_for(
    names: Iterable[str], registry: ActionRegistry | None = None
) -> dict[str, type[BaseModel]]:
    """Argument models by action name, for the names the registry knows."""
    registry = registry or default_registry()
    return {n: spec.arguments for n in names if (spec := registry.get(n)) is not None}


def format_message(message: Mapping[str, Any] | Any) -> str:
    """One channel message as a line: ``[t=3] agent_001: hello``."""
    if type(message) is dict:  # the common case, without the ABC check (per message a call)
        get = message.get
        return f"[t={get('time_step')}] {get('author_id')}: {get('content')}"
    get = message.get if isinstance(message, Mapping) else lambda k: getattr(message, k, None)
    return f"[t={get('time_step')}] {get('author_id')}: {get('content')}"


def describe_tool(name: str, registry: ActionRegistry) -> str:
    """``- post_message(content): Post a message...``; optional arguments end in ``?``."""
    spec = registry.get(name)
    if spec is None:
        return f"- {name}"
    schema = spec.tool_spec()["function"]["parameters"]  # cached: no schema built per call
    required = set(schema.get("required", ()))

    params = ", ".join(p if p in required else f"{p}?" for p in schema.get("properties", {}))
    return f"- {name}({params}): {spec.description}"


def uses_sections(observation: Mapping[str, Any]) -> bool:
    """Whether the observation has what the prompt sections show (balances, artifacts, ...).

    The channel's observation has only messages: its prompt stays the plain message list.
    """
    return any(key in SECTION_SOURCES and key != "messages" for key in observation)


def section_blocks(
    observation: Mapping[str, Any],
    memories: Sequence[Mapping[str, Any]] | None = None,
    working_memory_bytes: int = 2000,
) -> tuple[list[str], list[str]]:
    """The non-empty prompt sections of a world observation: (shown to all, the agent's own).

    Each part in the agent ecology's order (``SHARED_SECTIONS``, ``OWN_SECTIONS``).
    """
    sections = prompt_sections(
        observation, memories=memories, working_memory_bytes=working_memory_bytes
    )
    shared = [sections[n] for n in SHARED_SECTIONS if sections[n]]
    return shared, [sections[n] for n in OWN_SECTIONS if sections[n]]


def user_prompt(
    observation: Mapping[str, Any],
    tools: Sequence[str],
    registry: ActionRegistry | None = None,
    *,
    json_hint: bool = True,
    forced: str | None = None,
    memories: Sequence[Mapping[str, Any]] | None = None,
    working_memory_bytes: int = 2000,
    agent_id: str | None = None,
) -> str:
    """The tools, the step, what the agent sees, who it is and what to do, one item a line.

    Laid out for a server's prompt cache: what all agents are shown comes first (the tools, the
    step, the recent messages or the artifacts), the agent's own part last (``You are <id>.``,
    its balances, memories and state, the instruction), so requests of one step share
    everything up to the agent's name.

    A world observation (balances, artifacts, ...) is shown as the prompt sections the workflow
    policy uses too (``vivarium.policies.sections``), with ``memories`` (retrieved by the
    caller) as its memory section, and any other state key as ``key: value``; the channel's is
    its recent messages, oldest first.
    """
    registry = registry or default_registry()
    lines: list[str] = []
    if not forced:  # a forced tool is named in the instruction at the end instead
        lines.append("Available tools:")
        lines += [describe_tool(n, registry) for n in tools] if tools else ["(none)"]
    lines.append(f"Current step: {observation.get('time_step')}.")
    own: list[str] = []
    if uses_sections(observation):
        shared, own_blocks = section_blocks(observation, memories, working_memory_bytes)
        for block in shared:
            lines += [block, ""]
        for block in own_blocks:
            own += [block, ""]
        rest = {k: v for k, v in observation.items() if k not in SECTION_SOURCES}
        state = world_state_lines(rest)
    else:
        lines.append("Recent messages (oldest first):")
        messages = observation.get("messages") or []
        lines += [format_message(m) for m in messages] if messages else ["(no messages yet)"]
        state = world_state_lines(observation)
    agent = agent_id if agent_id is not None else observation.get("agent_id")
    if agent:
        lines.append(f"You are {agent}.")
    lines += own
    if state:
        lines += ["Your state:", *state]
    if forced:
        # The model can only call this tool: listing others or a JSON fallback confuses small
        # models, which then write about tools instead of acting.
        lines.append(f"Respond with {describe_tool(forced, registry).removeprefix('- ')}")
        return "\n".join(lines)
    lines.append("Call exactly one tool.")
    if json_hint and tools:
        lines.append(JSON_HINT)
    return "\n".join(lines)


def build_messages(
    observation: Mapping[str, Any],
    *,
    agent_id: str | None = None,
    system_prompt: str | None = None,
    registry: ActionRegistry | None = None,
    tools: Sequence[str] | None = None,
    forced: str | None = None,
    memories: Sequence[Mapping[str, Any]] | None = None,
    working_memory_bytes: int = 2000,
) -> list[dict[str, str]]:
    """``[system, user]`` chat messages for one decision (``forced``: the one tool allowed).

    ``memories``: the memories retrieved for this decision, shown in a world observation's
    memory section (see ``user_prompt``).
    """
    agent = agent_id if agent_id is not None else str(observation.get("agent_id", ""))
    names = list(tools) if tools is not None else available_tools(observation)
    world_state = any(key not in BASE_OBSERVATION_KEYS for key in observation)
    return [
        {
            "role": "system",
            "content": system_prompt_for(agent, system_prompt, world_state=world_state),
        },
        {
            "role": "user",
            "content": user_prompt(
                observation,
                names,
                registry,
                forced=forced,
                memories=memories,
                working_memory_bytes=working_memory_bytes,
                agent_id=agent,
            ),
        },
    ]
