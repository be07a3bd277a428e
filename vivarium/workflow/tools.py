"""The tools a workflow forces the model to call: ``act`` (an action) and ``choose`` (a transition).

The action schemas come from the world's action registry (``ActionCatalog``), narrowed to the ids
and methods the observation shows, so a model constrained by the schema names things that exist.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

ACT_TOOL = "act"
CHOOSE_TOOL = "choose"


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


def argument_schemas(
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


def force_tool(name: str) -> dict[str, Any]:
    """``tool_choice`` that forces the tool called ``name``."""
    return {"type": "function", "function": {"name": name}}
