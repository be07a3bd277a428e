"""LLM gateways: a deterministic mock, LiteLLM for real providers, record/replay, rate limits."""

from vivarium.gateways.base import (
    CallRecord,
    GatewayBase,
    LLMCallError,
    LLMGateway,
    LLMRequest,
    LLMResponse,
    ToolCall,
    Usage,
    collect_calls,
    record_call,
)

__all__ = [
    "CallRecord",
    "GatewayBase",
    "LLMCallError",
    "LLMGateway",
    "LLMRequest",
    "LLMResponse",
    "ToolCall",
    "Usage",
    "collect_calls",
    "record_call",
]
