"""One representation of an LLM exchange: the request as sent and the reply as received.

The trace (``CallRecord.request`` / ``reply``, stored by ``vivarium.trace.llm_texts``) and the
cassette (the records of every attempt it keeps) hold a call's text in the same two dicts, built
here and nowhere else:

- the request is the JSON body the server receives: ``model`` (as the server is told it),
  ``messages``, then the parameters sent (``BODY_FIELDS``, in the order litellm's ``openai/``
  provider sends them), then any extra body fields. The direct transport serializes exactly
  this dict (``openai_http.chat_body``), so the record is what went over the wire; headers,
  keys and the server's address are never part of it.
- the reply is ``{"content", "tool_calls", "finish_reason"}`` of the first choice, tool calls
  in the wire format (arguments as the raw string the model produced), and ``"error"`` (the
  error body or text) for a failed attempt.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# Request fields after ``messages`` and ``model``, in the order litellm's openai provider sends them.
BODY_FIELDS = ("temperature", "max_tokens", "seed", "tools", "tool_choice")  # litellm 1.110's order
# The most of an error body a record keeps (a server may answer a 500 with a whole HTML page).
MAX_ERROR_BODY = 20_000


def request_body(
    request: Any, model: str | None = None, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The JSON body of one chat completion, as a dict (what the server receives).

    Args:
        request: An ``LLMRequest`` (anything with its fields as attributes).
        model: The model name the server is told (``fake`` for ``openai/fake``); default
            ``request.model``.
        extra: Further body fields, merged last (the direct transport's ``extra``).

    Returns:
        ``model``, ``messages``, the ``BODY_FIELDS`` that are set, then ``extra``.
    """
    body: dict[str, Any] = {
        "model": request.model if model is None else model,
        "messages": request.messages,
    }
    for name in BODY_FIELDS:
        value = getattr(request, name)
        if value is not None:
            body[name] = value
    if extra:
        body.update(extra)
    return body


def sent_body(data: Mapping[str, Any]) -> dict[str, Any]:
    """The body litellm hands the OpenAI client (its ``complete_input_dict``), as sent.

    The client merges ``extra_body`` into the JSON it posts, so it is merged here too.
    """
    body = dict(data)
    extra = body.pop("extra_body", None)
    if isinstance(extra, Mapping):
        body.update(extra)
    return body


def _plain(value: Any) -> Any:
    """A JSON value for ``value`` (pydantic objects of a litellm reply are dumped)."""
    if hasattr(value, "model_dump"):
        return value.model_dump()
    return value


def wire_reply(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The reply dict of a chat completion's JSON (``choices[0]``), as the server sent it.

    With ``cached_tokens`` when the server said it served part of the prompt from its prompt
    cache (``usage.prompt_tokens_details.cached_tokens``, the OpenAI field llama.cpp's and
    vLLM's servers fill too): how much of a shared prompt start the server reused, per call.
    """
    choices = raw.get("choices") or []
    choice = _plain(choices[0]) if choices else {}
    choice = choice if isinstance(choice, Mapping) else {}
    message = _plain(choice.get("message")) or {}
    message = message if isinstance(message, Mapping) else {}
    calls = message.get("tool_calls")
    tool_calls = [_wire_call(_plain(c)) for c in calls] if calls else None
    finish = choice.get("finish_reason")
    reply = {
        "content": message.get("content"),
        "tool_calls": tool_calls,
        "finish_reason": None if finish is None else str(finish),
    }
    if cached := cached_tokens(raw):
        reply["cached_tokens"] = cached
    return reply


def cached_tokens(raw: Mapping[str, Any]) -> int:
    """The prompt tokens a reply says came from the server's cache (0: none, or not said).

    A zero is not kept apart from a missing field: litellm fills the field with 0 or None for
    providers that never send it.
    """
    usage = _plain(raw.get("usage"))
    details = _plain(usage.get("prompt_tokens_details")) if isinstance(usage, Mapping) else None
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    return cached if type(cached) is int and cached > 0 else 0


def _wire_call(call: Any) -> Any:
    """One tool call in the wire format: ``id``, ``type``, ``function`` (``name``, ``arguments``).

    litellm's objects carry fields of their own (``provider_specific_fields``, ...) that no
    server sent; a plain JSON call is kept as it came.
    """
    if not isinstance(call, Mapping):
        return call
    function = call.get("function")
    if isinstance(function, Mapping) and set(call) - {"id", "type", "function", "index"}:
        function = {k: function.get(k) for k in ("name", "arguments")}
        return {"id": call.get("id"), "type": call.get("type"), "function": function}
    return dict(call)


def response_reply(response: Any) -> dict[str, Any]:
    """The reply dict of a normalized ``LLMResponse`` (a mock's, or one without its JSON).

    Tool calls get the wire format back: arguments as the raw text when the model's did not
    parse, else as compact JSON.
    """
    calls = None
    if response.tool_calls:
        calls = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": (
                        call.raw_arguments
                        if call.raw_arguments is not None
                        else json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":"))
                    ),
                },
            }
            for call in response.tool_calls
        ]
    return {
        "content": response.content,
        "tool_calls": calls,
        "finish_reason": response.finish_reason,
    }


def error_reply(text: str) -> dict[str, Any]:
    """The reply dict of a failed attempt: no content, and the error body or text.

    Args:
        text: The server's error body, or what went wrong when there was none (a timeout).
    """
    if len(text) > MAX_ERROR_BODY:
        text = text[:MAX_ERROR_BODY] + " ..."
    return {"content": None, "tool_calls": None, "finish_reason": None, "error": text}
