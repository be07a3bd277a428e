"""Gateways that answer from a script instead of a model: what a policy sent, and what it makes
of a reply, without a server.

Two kinds, one for each way a policy can be handed a gateway:

- ``ScriptedGateway``: a layer (``GatewayBase``: ``complete``/``acomplete`` on ``LLMRequest``),
  as the cognitive policies get; the last reply repeats.
- ``ScriptedChat``: a plain gateway (keyword ``chat``/``achat``, the ``LLMGateway`` protocol), as
  a workflow is handed one; replies are used up in order, or chosen by the forced tool.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Mapping
from typing import Any

from vivarium.gateways.base import (
    CallRecord,
    GatewayBase,
    LLMRequest,
    LLMResponse,
    ToolCall,
    record_call,
)

__all__ = ["Reply", "ScriptedChat", "ScriptedGateway", "posting"]

Reply = LLMResponse | Exception | Callable[[LLMRequest], LLMResponse]


def posting(content: str) -> LLMResponse:
    """A reply calling ``post_message`` with ``content``."""
    call = ToolCall(name="post_message", arguments={"content": content})
    return LLMResponse(tool_calls=[call], finish_reason="tool_calls")


class ScriptedGateway(GatewayBase):
    """Returns canned replies in order (the last one repeats) and keeps every request."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies) or [LLMResponse(content="")]
        self.requests: list[LLMRequest] = []
        self.async_calls = 0

    def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        reply = self.replies[min(len(self.requests), len(self.replies)) - 1]
        record_call(CallRecord(attempt=1, model=request.model, request_hash="h"))
        if isinstance(reply, Exception):
            raise reply
        return reply(request) if callable(reply) else reply

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        self.async_calls += 1
        await asyncio.sleep(0)
        return self.complete(request)


class ScriptedChat:
    """Replies from a list, in order (an exception in the list is raised); records requests.
    ``by_tool`` picks replies per forced tool name instead, cycling through each list."""

    def __init__(
        self,
        replies: list[Any] | None = None,
        *,
        by_tool: Mapping[str, list[Any]] | None = None,
        model: str = "scripted",
    ) -> None:
        self.replies = list(replies or [])
        self.by_tool = {k: list(v) for k, v in (by_tool or {}).items()}
        self.counts: dict[str, int] = {}
        self.requests: list[dict[str, Any]] = []
        self.model = model

    def _next(self, request: dict[str, Any]) -> Any:
        self.requests.append(copy.deepcopy(request))
        tool = (request.get("tool_choice") or {}).get("function", {}).get("name")
        if self.by_tool and tool in self.by_tool:
            options = self.by_tool[tool]
            i = self.counts.get(tool, 0)
            self.counts[tool] = i + 1
            reply = options[i % len(options)]
        elif self.replies:
            reply = self.replies.pop(0)
        else:
            raise AssertionError("scripted gateway ran out of replies")
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def chat(self, **request: Any) -> LLMResponse:
        return self._next(request)

    async def achat(self, **request: Any) -> LLMResponse:
        return self._next(request)

    def user_prompts(self) -> list[str]:
        return [r["messages"][-1]["content"] for r in self.requests]
