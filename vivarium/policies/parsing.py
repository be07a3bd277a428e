"""From an LLM reply to one action: a native tool call, JSON in the text, or a recorded ``noop``.

Small local models often ignore tools and write JSON instead (fenced, inline, in a Hermes-style
``<tool_call>`` tag), or run out of tokens mid-call. A reply the parser cannot use must never end
a run, so every input becomes an allowed action or ``noop``, with the reason in ``metadata``:

- ``parse_path``: ``"tool_call"``, ``"json_text"`` or ``"fallback"``;
- ``fallback_reason`` (fallback only): ``empty reply``, ``unknown tool 'x'``,
  ``bad arguments: <tool>: <problem>``, ``truncated tool call (finish_reason length)``,
  ``no action found``;
- ``tool_call_error`` when a native tool call's arguments could not be parsed.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vivarium.gateways.base import LLMResponse
from vivarium.worlds.registry import describe_validation_error

FALLBACK_ACTION = "noop"
MAX_REASONING_CHARS = 2000
MAX_REASON_CHARS = 300
MAX_SCAN_CHARS = 16_000  # JSON is looked for in this much of the text
MAX_SCAN_STARTS = 32  # braces tried as object starts: bounds the scan on hostile text
MAX_DEPTH = 4  # nesting followed when looking for an action inside an object

TRUNCATED = "truncated tool call (finish_reason length)"
EMPTY_REPLY = "empty reply"
NO_ACTION = "no action found"

_NAME_KEYS = ("action", "tool", "name", "function", "tool_name", "action_name", "function_name")
_ARGS_KEYS = ("arguments", "args", "parameters", "params", "input", "action_input", "tool_input")
_ENVELOPE_KEYS = frozenset(
    {*_NAME_KEYS, "reasoning", "reason", "thought", "thoughts", "explanation", "rationale"}
    | {"type", "id"}
)
_FENCE = re.compile(r"```[ \t]*(?:json5?|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)
_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL | re.IGNORECASE)


class ParsedAction(BaseModel):
    """The action read from a reply, the model's text, and how it was found (or why not)."""

    model_config = ConfigDict(extra="forbid")

    action_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    reasoning: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters plus an ellipsis when it is longer."""
    return text if len(text) <= limit else text[:limit] + "…"


def _clip(reason: str) -> str:
    return truncate(reason, MAX_REASON_CHARS)


def parse_action(
    response: LLMResponse,
    allowed: Sequence[str],
    arg_models: Mapping[str, type[BaseModel]] | None = None,
) -> ParsedAction:
    """Read one action from ``response``; never raises (a parser bug becomes a fallback too)."""
    try:
        return _parse(response, tuple(allowed), arg_models or {})
    except Exception as exc:  # the last line of fail-soft: record, don't crash the run
        return ParsedAction(
            action_name=FALLBACK_ACTION,
            metadata={
                "parse_path": "fallback",
                "fallback_reason": _clip(f"parse error: {type(exc).__name__}: {exc}"),
            },
        )


def _parse(
    response: LLMResponse, allowed: tuple[str, ...], arg_models: Mapping[str, type[BaseModel]]
) -> ParsedAction:
    content = response.content if isinstance(response.content, str) else ""
    stripped = content.strip()
    reasoning = truncate(stripped, MAX_REASONING_CHARS) if stripped else None
    meta: dict[str, Any] = {}
    reasons: list[str] = []

    def done(name: str, arguments: dict[str, Any], path: str) -> ParsedAction:
        return ParsedAction(
            action_name=name,
            arguments=arguments,
            reasoning=reasoning,
            metadata={"parse_path": path, **meta},
        )

    # (A) native tool calls, in order
    truncated = False
    for call in response.tool_calls:
        if call.parse_error is not None:
            meta.setdefault("tool_call_error", _clip(call.parse_error))
            truncated = True
        checked = check_arguments(call.name, call.arguments, call.parse_error, allowed, arg_models)
        if isinstance(checked, str):
            reasons.append(checked)
        else:
            return done(call.name, checked, "tool_call")
    truncated = truncated and response.finish_reason == "length"

    # (B) JSON in the text
    text = _THINK.sub("", content)[:MAX_SCAN_CHARS]
    values, unclosed = json_values(text)
    for value in values:
        for name, arguments, error in _actions_in(value, allowed, arg_models, 0):
            checked = check_arguments(name, arguments, error, allowed, arg_models)
            if isinstance(checked, str):
                reasons.append(checked)
            else:
                return done(name, checked, "json_text")

    # (C) noop, with the most telling reason
    if truncated or (unclosed and response.finish_reason == "length"):
        reason = TRUNCATED
    elif reasons:
        reason = reasons[0]
    elif not stripped and not response.tool_calls:
        reason = EMPTY_REPLY
    else:
        reason = NO_ACTION
    meta["fallback_reason"] = _clip(reason)
    return done(FALLBACK_ACTION, {}, "fallback")


def check_arguments(
    name: Any,
    arguments: Any,
    error: str | None,
    allowed: tuple[str, ...],
    arg_models: Mapping[str, type[BaseModel]],
) -> dict[str, Any] | str:
    """The arguments to use if ``name`` is allowed and they are valid, else the reason not.

    Args:
        name: The action the reply named.
        arguments: Its arguments, as parsed.
        error: Why the arguments could not be parsed, if they could not.
        allowed: The actions the observation offers.
        arg_models: Argument models by action name (the world's registry).

    Returns:
        The arguments as a dict, or a one-line reason (``unknown tool 'x'``,
        ``bad arguments: ...``).
    """
    if not isinstance(name, str) or name not in allowed:
        shown = truncate(name, 80) if isinstance(name, str) else type(name).__name__
        return f"unknown tool {shown!r}"
    if error is not None:
        return f"bad arguments: {name}: {error}"
    if not isinstance(arguments, dict):
        return f"bad arguments: {name}: arguments must be a JSON object"
    if not _finite(arguments):  # Python's JSON reader takes NaN and Infinity; the trace must not
        return f"bad arguments: {name}: numbers must be finite (no NaN or Infinity)"
    model = arg_models.get(name)
    if model is not None:
        try:
            model.model_validate(arguments)
        except ValidationError as exc:
            return f"bad arguments: {name}: {describe_validation_error(exc)}"
        except Exception as exc:  # a user validator that raises something else
            return f"bad arguments: {name}: {exc}"
    return dict(arguments)


def _finite(value: Any, depth: int = 0) -> bool:
    """No NaN or infinity anywhere in a JSON-like value (nesting past 64 counts as bad)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict | list | tuple):
        if depth > 64:
            return False
        items = value.values() if isinstance(value, dict) else value
        return all(_finite(v, depth + 1) for v in items)
    return True


# -- JSON in text ------------------------------------------------------------------------------
def json_values(text: str) -> tuple[list[Any], bool]:
    """The JSON values in a reply, and whether a ``{`` was left open.

    Fenced blocks come first, then every brace-balanced ``{...}`` (braces inside strings
    skipped; a span that is not JSON is retried from its next brace). An open ``{`` is a reply
    cut off mid-object.
    """
    values: list[Any] = []
    seen: set[str] = set()

    def add(candidate: str) -> bool:
        candidate = candidate.strip()
        if not candidate:
            return False
        if candidate in seen:
            return True
        seen.add(candidate)
        try:
            values.append(json.loads(candidate, strict=False))
        except Exception:  # ValueError, or RecursionError on deep nesting: not JSON for us
            return False
        return True

    for match in _FENCE.finditer(text):
        add(match.group(1))
    unclosed = False
    start = text.find("{")
    for _ in range(MAX_SCAN_STARTS):
        if start == -1:
            break
        end = _match_brace(text, start)
        if end is None:
            unclosed = True
        elif add(text[start : end + 1]):
            start = text.find("{", end + 1)
            continue
        start = text.find("{", start + 1)
    return values, unclosed


def _match_brace(text: str, start: int) -> int | None:
    depth = 0
    in_string = False
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def _actions_in(
    value: Any,
    allowed: tuple[str, ...],
    arg_models: Mapping[str, type[BaseModel]],
    depth: int,
) -> Iterator[tuple[Any, Any, str | None]]:
    """``(name, arguments, error)`` for each action-shaped object in a JSON value.

    Shapes: ``{"action"|"tool"|"name"|"function": name, "arguments"|"args"|"parameters": {...}}``
    (arguments may be a JSON string), ``{"action": name, <argument>: ...}`` (flat),
    ``{"function": {...}}`` (OpenAI), ``{"tool_calls": [...]}``, ``{name: {...}}``, and lists.
    """
    if depth > MAX_DEPTH:
        return
    if isinstance(value, list):
        for item in value[:8]:
            yield from _actions_in(item, allowed, arg_models, depth + 1)
        return
    if not isinstance(value, dict):
        return
    calls = value.get("tool_calls")
    if isinstance(calls, list):
        yield from _actions_in(calls, allowed, arg_models, depth + 1)
    for key in _NAME_KEYS:
        if key not in value:
            continue
        name = value[key]
        if isinstance(name, dict):
            yield from _actions_in(name, allowed, arg_models, depth + 1)
            continue
        if not isinstance(name, str):
            continue
        yield (name, *_arguments_of(value, name, arg_models))
        return
    for key in value:  # {"post_message": {"content": "hi"}}
        if key in allowed and isinstance(value[key], dict | None):
            yield key, value[key] or {}, None
            return


def _arguments_of(
    obj: dict[str, Any], name: str, arg_models: Mapping[str, type[BaseModel]]
) -> tuple[Any, str | None]:
    for key in _ARGS_KEYS:
        if key not in obj:
            continue
        raw = obj[key]
        if raw is None:
            return {}, None
        if isinstance(raw, str):
            if not raw.strip():
                return {}, None
            try:
                raw = json.loads(raw, strict=False)
            except Exception as exc:
                return None, f"arguments are not valid JSON: {type(exc).__name__}"
        if not isinstance(raw, dict):
            return None, "arguments must be a JSON object"
        return raw, None
    # flat: the arguments sit next to the action name
    flat = {k: v for k, v in obj.items() if k not in _ENVELOPE_KEYS}
    model = arg_models.get(name)
    if model is not None:
        flat = {k: v for k, v in flat.items() if k in model.model_fields}
    return flat, None
