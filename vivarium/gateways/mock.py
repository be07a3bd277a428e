"""A deterministic mock LLM: the reply is a pure function of (seed, request).

Everything is derived from ``digest(canonical_json({"seed": ..., "request": ...}))``, so the same
request gives the same reply in any process, whatever ``PYTHONHASHSEED`` is. Latency is the
configured value (slept, and recorded as configured, not measured), so traces stay
byte-identical while tests can still make calls overlap or finish out of order.

Its call records say ``model: mock`` whatever model name it was asked for (``mock: true`` with
``model: openai/x`` sends requests for ``openai/x``): ``llm_calls.model`` shows where a reply
came from, and a cassette row it made is the mock's (``provenance``), so no reply of the mock
ever passes for a model's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from vivarium.gateways.base import (
    CallRecord,
    GatewayBase,
    LLMRequest,
    LLMResponse,
    ToolCall,
    Usage,
    cancelled_record,
    current_attempt,
    record_call,
)
from vivarium.gateways.effects import Flow, Sleep, arun, run
from vivarium.gateways.exchange import request_body
from vivarium.gateways.provenance import MOCK_MODEL, MOCK_PROVIDER
from vivarium.gateways.request_key import key_payload
from vivarium.seeding import canonical_json, digest
from vivarium.settings import DEFAULT_MOCK_LATENCY_MS

MAX_SCHEMA_DEPTH = 8  # nested objects filled at most this deep

# 64 short, plain words: a phrase is readable and one byte picks a word.
# fmt: off
WORDS = (
    "river", "lantern", "quiet", "amber", "meadow", "signal", "copper", "harbor",
    "willow", "ember", "orbit", "cedar", "pebble", "thunder", "velvet", "marble",
    "canyon", "breeze", "falcon", "glacier", "hollow", "ivory", "juniper", "kettle",
    "lagoon", "maple", "nectar", "oasis", "prairie", "quartz", "raven", "saffron",
    "tundra", "umber", "valley", "walnut", "yonder", "zephyr", "anchor", "beacon",
    "cobalt", "dune", "echo", "fern", "garnet", "heron", "island", "jasper",
    "kelp", "lichen", "mosaic", "nimbus", "opal", "pine", "quill", "reef",
    "sable", "thistle", "upland", "vista", "wren", "yarrow", "birch", "lotus",
)
# fmt: on


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else canonical_json(content)


def _forced_function(tool_choice: str | dict[str, Any] | None) -> str | None:
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function") or {}
        name = function.get("name") if isinstance(function, dict) else None
        return name if isinstance(name, str) else None
    return None


def _tool_names(tools: list[dict[str, Any]] | None) -> list[str]:
    names = []
    for tool in tools or []:
        function = tool.get("function") or {}
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


class MockLLMGateway(GatewayBase):
    """A gateway with no model behind it: deterministic replies, tool calls and token counts."""

    provider = MOCK_PROVIDER  # where its replies come from (``provenance``)

    def __init__(
        self,
        seed: int = 0,
        latency_ms: float = DEFAULT_MOCK_LATENCY_MS,
        model: str = "mock",
        latency_fn: Callable[[LLMRequest], float] | None = None,
    ) -> None:
        """Set what replies derive from and how long they take.

        Args:
            seed: Replies are a pure function of (seed, request).
            latency_ms: Each call's latency (slept, and recorded as given).
            model: The model name used when a request names none.
            latency_fn: A latency per request instead (tests: calls that finish out of order).
        """
        self.seed = seed
        self.latency_ms = latency_ms
        self.model = model
        self.latency_fn = latency_fn
        self.calls = 0  # replies given by this instance (tests use it to see cache hits)

    def __repr__(self) -> str:
        """The mock's seed, latency and model."""
        return (
            f"MockLLMGateway(seed={self.seed}, latency_ms={self.latency_ms}, model={self.model!r})"
        )

    def request_of(self, fields: dict[str, Any]) -> LLMRequest:
        """``GatewayBase.request_of``: ``model`` may be left out, the mock's own is the default."""
        fields.setdefault("model", self.model)
        return super().request_of(fields)

    # -- the reply ---------------------------------------------------------------------------
    def latency_for(self, request: LLMRequest) -> float:
        """The latency of ``request``, in milliseconds."""
        return float(self.latency_fn(request)) if self.latency_fn is not None else self.latency_ms

    def reply(self, request: LLMRequest, latency_ms: float = 0.0) -> LLMResponse:
        """The deterministic reply to ``request`` (no sleeping, no call record)."""
        # The request as its key sees it (``request_key``): a field added to requests later,
        # left at its default, changes no reply.
        hexdigest = digest(canonical_json({"seed": self.seed, "request": key_payload(request)}))
        data = bytes.fromhex(hexdigest)
        words = _phrase_words(data, offset=1)
        phrase = f"mock note {hexdigest[:4]}: {' '.join(words)}"
        prompt_chars = sum(len(_content_text(m.get("content"))) for m in request.messages)
        prompt_tokens = prompt_chars // 4 + 1

        name = self._tool_to_call(request)
        if name is None:
            content: str | None = phrase
            tool_calls: list[ToolCall] = []
            completion_tokens = len(words) + 4
            finish = "stop"
        else:
            arguments = (
                {"content": phrase}
                if name == "post_message"
                else _arguments_from_schema(_parameters_of(request.tools, name), data)
            )
            content = None
            tool_calls = [ToolCall(id=f"call_{hexdigest[:12]}", name=name, arguments=arguments)]
            completion_tokens = len(canonical_json(arguments)) // 4 + 1
            finish = "tool_calls"
        return LLMResponse(
            content=content,
            tool_calls=tool_calls,
            finish_reason=finish,
            usage=Usage(
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                total_tokens=prompt_tokens + completion_tokens,
            ),
            cost=0.0,
            latency_ms=latency_ms,
            model=request.model,
            request_hash=request.request_hash(),
        )

    @staticmethod
    def _tool_to_call(request: LLMRequest) -> str | None:
        """The function the reply calls; ``None`` means a plain text reply.

        The forced function, else ``post_message`` when offered, else the first tool when tools
        are required.
        """
        forced = _forced_function(request.tool_choice)
        if forced is not None:
            return forced
        names = _tool_names(request.tools)
        if not names or request.tool_choice == "none":
            return None
        if "post_message" in names:
            return "post_message"
        return names[0] if request.tool_choice == "required" else None

    def _finish(self, request: LLMRequest, latency_ms: float) -> LLMResponse:
        response = self.reply(request, latency_ms)
        self.calls += 1
        # On record: the request as asked (there is no wire) and the reply as made, by the mock.
        record = CallRecord.from_response(response, current_attempt(), request_body(request))
        record.model = MOCK_MODEL
        record_call(record)
        return response

    def complete(self, request: LLMRequest) -> LLMResponse:
        """Sleep the latency (blocking), then give the deterministic reply, on record."""
        return run(self._answer(request))

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        """``complete`` for the event loop."""
        return await arun(self._answer(request))

    def _answer(self, request: LLMRequest) -> Flow[LLMResponse]:
        """Wait the latency, then the reply; a call cancelled while it waits is on record too."""
        latency = self.latency_for(request)
        if latency > 0:
            started = time.perf_counter()
            try:
                yield Sleep(latency / 1000)
            except asyncio.CancelledError:  # an agent timeout: the attempt is on record too
                elapsed = (time.perf_counter() - started) * 1000
                record = cancelled_record(request, current_attempt(), elapsed)
                record.model = MOCK_MODEL
                record_call(record)
                raise
        return self._finish(request, latency)


def _phrase_words(data: bytes, offset: int) -> list[str]:
    """3 to 6 words picked by digest bytes from ``offset`` on."""
    count = 3 + data[offset - 1] % 4
    return [WORDS[data[(offset + i) % len(data)] % len(WORDS)] for i in range(count)]


def _parameters_of(tools: list[dict[str, Any]] | None, name: str) -> dict[str, Any]:
    for tool in tools or []:
        function = tool.get("function") or {}
        if isinstance(function, dict) and function.get("name") == name:
            params = function.get("parameters")
            return params if isinstance(params, dict) else {}
    return {}


def _arguments_from_schema(
    parameters: dict[str, Any], data: bytes, depth: int = 0
) -> dict[str, Any]:
    """Fill the required properties from digest bytes.

    Strings, integers, numbers, booleans, a value of an ``enum``, and nested objects (filled the
    same way, from their own bytes).
    """
    choices = parameters.get("anyOf") or parameters.get("oneOf")
    if isinstance(choices, list) and choices:
        # One of several shapes: pick a branch by the digest, then fill it.
        branch = choices[int.from_bytes(data[:2], "big") % len(choices)]
        if isinstance(branch, dict):
            return _arguments_from_schema(branch, data[2:] + data[:2], depth)
        return {}
    properties = parameters.get("properties") or {}
    required = parameters.get("required") or []
    arguments: dict[str, Any] = {}
    for i, key in enumerate(required):
        spec = properties.get(key) if isinstance(properties, dict) else None
        kind = spec.get("type") if isinstance(spec, dict) else None
        start = (4 * i + 8) % len(data)
        chunk = int.from_bytes((data * 2)[start : start + 2], "big")
        enum = spec.get("enum") if isinstance(spec, dict) else None
        nested_choices = isinstance(spec, dict) and (spec.get("anyOf") or spec.get("oneOf"))
        if isinstance(spec, dict) and "const" in spec:
            arguments[key] = spec["const"]
        elif nested_choices and depth < MAX_SCHEMA_DEPTH:
            nested = bytes.fromhex(digest(data + f"{depth}:{key}".encode()))
            arguments[key] = _arguments_from_schema(spec, nested, depth + 1)
        elif isinstance(enum, list) and enum:
            arguments[key] = enum[chunk % len(enum)]
        elif kind == "string":
            arguments[key] = " ".join(_phrase_words(data, offset=start + 1)[:3])
        elif kind == "integer":
            arguments[key] = chunk % 1000
        elif kind == "number":
            arguments[key] = (chunk % 10000) / 100
        elif kind == "boolean":
            arguments[key] = bool(chunk % 2)
        elif kind == "object" and isinstance(spec, dict) and depth < MAX_SCHEMA_DEPTH:
            nested = bytes.fromhex(digest(data + f"{depth}:{key}".encode()))
            arguments[key] = _arguments_from_schema(spec, nested, depth + 1)
    return arguments
