"""A reply, whatever brought it, as one ``LLMResponse``: tool calls, usage, cost, raw JSON.

litellm hands back its ``ModelResponse`` objects, the direct transport the reply's JSON
(``openai_http.WireReply``); both are read the same way, so an agent sees the same response
whichever transport made the call. Tool-call arguments are parsed leniently (small models put raw
newlines inside JSON strings) and never raise: arguments that cannot be read stay on the call
with the reason (``ToolCall.parse_error``), for the policy to record.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from vivarium.errors import squash
from vivarium.gateways.base import LLMRequest, LLMResponse, ToolCall, Usage
from vivarium.gateways.forced_schema import as_tool_call, forced_function
from vivarium.gateways.openai_http import WireReply
from vivarium.gateways.secrecy import scrub

# Cost of a reply: (reply's model, asked model, prompt tokens, completion tokens) -> USD or None.
Price = Callable[[str, str, int, int], float | None]


def parse_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """Tool-call arguments as a dict, and why not when they cannot be (never raises).

    ``strict=False`` accepts raw newlines inside JSON strings, which small models emit.
    """
    if isinstance(raw, dict):
        return raw, None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    try:
        value = _LENIENT.decode(raw) if isinstance(raw, str) else json.loads(raw, strict=False)
    except (TypeError, ValueError) as exc:
        return {}, squash(f"arguments are not valid JSON: {exc}", 200)
    if not isinstance(value, dict):
        return {}, f"arguments are JSON {type(value).__name__}, not an object"
    return value, None


# One decoder for every reply: ``json.loads(..., strict=False)`` builds a new one each call.
_LENIENT = json.JSONDecoder(strict=False)


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and math.isfinite(value) else 0


def normalize(
    reply: Any,
    request: LLMRequest,
    latency_ms: float,
    *,
    price: Price,
    secrets: Callable[[], list[str]],
    forced_tool_format: str,
) -> LLMResponse:
    """``reply`` to ``request`` as an ``LLMResponse``.

    Args:
        reply: litellm's response object, or the reply's JSON (a dict).
        request: The request it answers.
        latency_ms: How long the attempt took.
        price: The cost of the reply, when litellm has not priced it already.
        secrets: The texts a raw reply may not show (asked only when there is one to scrub).
        forced_tool_format: How a forced tool was sent: as a JSON schema, the content is the
            tool call's arguments (``forced_schema``).
    """
    choices = _get(reply, "choices") or []
    choice = choices[0] if choices else None
    message = _get(choice, "message")
    tool_calls = []
    for call in _get(message, "tool_calls") or []:
        function = _get(call, "function")
        raw = _get(function, "arguments")
        arguments, error = parse_arguments(raw)
        tool_calls.append(
            ToolCall(
                id=_get(call, "id"),
                name=str(_get(function, "name") or ""),
                arguments=arguments,
                raw_arguments=None if error is None else str(raw),
                parse_error=error,
            )
        )
    usage = _get(reply, "usage")
    prompt = _int(_get(usage, "prompt_tokens"))
    completion = _int(_get(usage, "completion_tokens"))
    total = _int(_get(usage, "total_tokens")) or prompt + completion
    hidden = getattr(reply, "_hidden_params", None) or {}
    if "response_cost" in hidden:  # litellm has priced the reply already
        priced = hidden["response_cost"]
        cost = float(priced) if isinstance(priced, int | float) and priced > 0 else None
    else:
        cost = price(str(_get(reply, "model") or request.model), request.model, prompt, completion)

    content = _get(message, "content")
    finish = _get(choice, "finish_reason")
    response = LLMResponse(
        content=content if isinstance(content, str) else None,
        tool_calls=tool_calls,
        finish_reason=None if finish is None else str(finish),
        usage=Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total),
        cost=cost,
        latency_ms=round(latency_ms, 3),
        model=request.model,
        request_hash=request.request_hash(),
        raw=raw_json(reply, secrets),
    )
    function = forced_function(request, forced_tool_format)
    if function is not None:  # sent as a JSON schema: the content is the call's arguments
        return as_tool_call(response, function["name"], parse_arguments)
    return response


def raw_json(reply: Any, secrets: Callable[[], list[str]]) -> dict[str, Any] | None:
    """The reply as plain JSON, scrubbed of ``secrets()`` (None when it cannot be dumped)."""
    if isinstance(reply, WireReply):  # plain JSON, scrubbed on arrival
        return reply
    try:
        data = reply.model_dump() if hasattr(reply, "model_dump") else dict(reply)
        text = json.dumps(data, default=str)
    except Exception:
        return None
    return json.loads(scrub(text, secrets()))
