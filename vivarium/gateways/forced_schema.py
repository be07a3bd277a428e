"""A forced tool call as a JSON-schema constrained reply, for servers that cannot call tools.

A policy forces a tool with ``tools=[...]`` and ``tool_choice={"type": "function", "function":
{"name": X}}``. Servers whose chat template has no tool calls (llama.cpp's ``llama-server``
with SmolLM2's stock template) ignore the tools, and reject an object ``tool_choice``; but they
do honour ``response_format={"type": "json_schema", ...}``, decoding under a grammar built from
the schema. With ``forced_tool_format="json_schema"`` such a request is sent without ``tools``
and ``tool_choice``, asking instead for a reply that is an object of X's parameters; the reply's
content then becomes one call of X, its arguments parsed as leniently as a tool call's.

Only the wire body changes: the ``LLMRequest`` (and so its hash) is the one the policy built,
and the trace records the body actually sent and the reply as received; a cassette files these
replies under the request hash with the format (``CachingGateway(variant=...)``), so a switch of
format never replays the other format's replies. A request that forces no tool is sent as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from vivarium.gateways.base import LLMRequest, LLMResponse, ToolCall

ForcedToolFormat = Literal["tool_choice", "json_schema"]
FORCED_TOOL_FORMATS: tuple[str, ...] = ("tool_choice", "json_schema")
# Body fields that name tools: a server that cannot call tools rejects or ignores them.
_TOOL_FIELDS = frozenset({"tools", "tool_choice"})

ArgumentParser = Callable[[Any], tuple[dict[str, Any], str | None]]


def forced_function(request: LLMRequest, forced_tool_format: str) -> dict[str, Any] | None:
    """The ``function`` of the tool ``request`` forces, when it is sent as a JSON schema.

    Args:
        request: The request as the policy built it.
        forced_tool_format: ``"tool_choice"`` (sent as it is) or ``"json_schema"``.

    Returns:
        The forced tool's ``function`` dict (name, parameters), or None: the format is
        ``tool_choice``, the request forces no tool, or it forces one it does not offer
        (then the server says what is wrong, as it would have without this format).
    """
    if forced_tool_format != "json_schema" or not isinstance(request.tool_choice, Mapping):
        return None
    chosen = request.tool_choice.get("function")
    name = chosen.get("name") if isinstance(chosen, Mapping) else None
    if not isinstance(name, str):
        return None
    for tool in request.tools or ():
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and function.get("name") == name:
            return dict(function)
    return None


def schema_body(body: Mapping[str, Any], function: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` with ``function`` forced through ``response_format`` instead of tools.

    Args:
        body: The request body (``exchange.request_body``), or litellm's keyword arguments.
        function: The forced tool's ``function`` dict (``forced_function``).

    Returns:
        A new dict: ``body`` without ``tools`` and ``tool_choice``, with a ``response_format``
        of type ``json_schema`` named after the tool, its schema the tool's parameters (an
        empty object's when it has none).
    """
    schema = function.get("parameters") or {"type": "object", "properties": {}}
    sent = {key: value for key, value in body.items() if key not in _TOOL_FIELDS}
    sent["response_format"] = {
        "type": "json_schema",
        "json_schema": {"name": function["name"], "schema": schema},
    }
    return sent


def as_tool_call(response: LLMResponse, name: str, parse: ArgumentParser) -> LLMResponse:
    """``response`` with its content read as the arguments of one call of ``name``.

    The content is what the model decoded under the schema: the call's arguments. It is
    parsed as tool-call arguments are (``parse``: raw newlines in strings accepted); when it
    does not parse (cut off at ``max_tokens``, not an object), the call keeps the raw text and
    the reason, as a tool call with bad arguments does, and the policy's fallback applies. A
    reply with no content is left as it is (an empty reply, not a call with no arguments), as
    is one that has tool calls of its own. The raw reply is never changed: the trace records
    it as received.

    Args:
        response: The normalized reply.
        name: The forced tool's name.
        parse: Reads tool-call arguments: ``(arguments, None)`` or ``({}, why not)``.

    Returns:
        A new response: no content, one tool call of ``name``.
    """
    content = response.content
    if response.tool_calls or content is None or not content.strip():
        return response
    arguments, error = parse(content)
    call = ToolCall(
        name=name,
        arguments=arguments,
        raw_arguments=None if error is None else content,
        parse_error=error,
    )
    return response.model_copy(update={"content": None, "tool_calls": [call]})
