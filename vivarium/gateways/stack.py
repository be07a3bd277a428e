"""Assemble a run's gateway from its LLMConfig: cache -> retry -> rate limit -> provider.

One stack is shared by every agent of a run, so the rate limiter and the cassette see all of
their calls. ``LiteLLMGateway`` retries inside itself and takes the limiter for each attempt, so
retries count against the limit too. In ``replay`` mode no provider is built at all: nothing can
reach the network.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vivarium.config import LLMConfig
    from vivarium.gateways.ratelimit import RateLimiter


def build_provider(llm: LLMConfig, seed: int, limiter: RateLimiter | None = None) -> Any:
    """The provider, behind ``limiter`` if given (each of its attempts waits for it)."""
    if llm.uses_mock:
        from vivarium.gateways.mock import MockLLMGateway
        from vivarium.gateways.ratelimit import RateLimitedGateway

        mock = MockLLMGateway(seed=seed, latency_ms=llm.mock_latency_ms, model=llm.model)
        return mock if limiter is None else RateLimitedGateway(mock, limiter)
    from vivarium.gateways.litellm_gateway import LiteLLMGateway

    provider = LiteLLMGateway(
        api_base=llm.api_base,
        api_key=llm.api_key.get_secret_value() if llm.api_key else None,
        timeout=llm.timeout,
        num_retries=llm.num_retries,
        limiter=limiter,
        transport=llm.transport,
    )
    if not (llm.cache and llm.cache_mode == "auto"):  # auto may need no server at all
        provider.check_reachable()
    provider.prepare([llm.model])  # heavy imports now, never on the run's event loop
    return provider


def build_gateway(llm: LLMConfig, seed: int) -> Any:
    """The full stack for one run."""
    gateway: Any = None
    if not (llm.cache and llm.cache_mode == "replay"):
        limiter = None
        if llm.rate_limit_rpm or llm.rate_limit_tpm:
            from vivarium.gateways.ratelimit import RateLimiter

            limiter = RateLimiter(
                requests_per_minute=llm.rate_limit_rpm, tokens_per_minute=llm.rate_limit_tpm
            )
        gateway = build_provider(llm, seed, limiter)
    if llm.cache:
        from vivarium.gateways.cache import CachingGateway

        # Given the path, the caching layer owns the cassette and closes it with the run.
        gateway = CachingGateway(gateway, llm.cache, mode=llm.cache_mode)

    return gateway
