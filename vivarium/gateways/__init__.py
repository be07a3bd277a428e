"""LLM gateways: one contract, and the layers a run's stack is made of.

``base`` holds the contract (``LLMGateway``) and its models; each layer is a module of its own:
``cache`` (record/replay), ``retry``, ``ratelimit``, and the providers ``mock`` (deterministic)
and ``litellm_gateway`` (real models, one attempt a call, carried by one of ``transports``:
direct HTTP, litellm, litellm's Router; its parts: ``replies``, ``failures``, ``secrecy``,
``litellm_lib``). ``stack`` composes them, cache -> retry -> rate limit -> provider, from plain
``GatewaySettings``. Each layer is written once for blocking and event-loop calls
(``effects``: one flow, two drivers). ``exchange`` gives a call's text its one shape (the
body sent, the reply received), which call records, the cassette and the trace all keep;
``provenance`` says where a cassette's replies came from (the mock, or a real model).

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
    CassetteMixError,
)
from vivarium.gateways.litellm_gateway import LiteLLMGateway
from vivarium.gateways.mock import MockLLMGateway
from vivarium.gateways.ratelimit import RateLimitedGateway, RateLimiter
from vivarium.gateways.retry import RetryGateway
from vivarium.gateways.stack import GatewaySettings, build_gateway

__all__ = [
    "CacheMissError",
    "CacheStats",
    "CachingGateway",
    "CallRecord",
    "Cassette",
    "CassetteError",
    "CassetteMixError",
    "GatewayBase",
    "GatewaySettings",
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
    "build_gateway",
    "collect_calls",
    "record_call",
]
