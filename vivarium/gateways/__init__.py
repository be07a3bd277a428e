"""LLM gateways: a deterministic mock, LiteLLM for real providers, record/replay, rate limits.

Importing this package stays light: ``litellm`` (and with it ``openai`` and ``httpx``) is
imported on a ``LiteLLMGateway``'s first call.
"""

from vivarium.gateways.base import (
    CallRecord,
    GatewayBase,
    LLMCallError,
    LLMGateway,
    LLMRequest,
    LLMResponse,
    LLMUnavailable,
    ToolCall,
    Usage,
    collect_calls,
    record_call,
)
from vivarium.gateways.cache import (
    CacheMissError,
    CacheStats,
    CachingGateway,
    Cassette,
    CassetteError,
)
from vivarium.gateways.litellm_gateway import LiteLLMGateway
from vivarium.gateways.mock import MockLLMGateway
from vivarium.gateways.ratelimit import RateLimitedGateway, RateLimiter
from vivarium.gateways.retry import RetryGateway

__all__ = [
    "CacheMissError",
    "CacheStats",
    "CachingGateway",
    "CallRecord",
    "Cassette",
    "CassetteError",
    "GatewayBase",
    "LLMCallError",
    "LLMGateway",
    "LLMRequest",
    "LLMResponse",
    "LLMUnavailable",
    "LiteLLMGateway",
    "MockLLMGateway",
    "RateLimitedGateway",
    "RateLimiter",
    "RetryGateway",
    "ToolCall",
    "Usage",
    "collect_calls",
    "record_call",
]
