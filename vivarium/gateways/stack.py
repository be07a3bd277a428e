"""A run's gateway: cache -> retry -> rate limit -> provider, composed from plain settings.

One stack is shared by every agent of a run, so the rate limiter and the cassette see all of
their calls. Each layer wraps the gateway contract (``base.LLMGateway``) in a module of its
own and holds the layer below as ``inner`` (``layers`` lists them, top first):

- cache (``cache.CachingGateway``), on top: a replayed reply costs no attempt and no place in
  the rate limit, and a call that failed is stored after its retries, with every attempt.
- retry (``retry.RetryGateway``): the only place calls are retried.
- rate limit (``ratelimit.RateLimitedGateway``), below the retries: each attempt waits for the
  shared limiter, so retries count against the limit too.
- provider (``mock.MockLLMGateway`` or ``litellm_gateway.LiteLLMGateway``): one attempt a call.

A layer with nothing to do is left out: no cache without a cassette, no rate limit layer
without a limit. In ``replay`` mode no provider is built at all (nor the layers that only
serve it): nothing can reach the network.

The stack is built from ``GatewaySettings``, plain values: the gateways know nothing of the
experiment config, which the build step translates into them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from vivarium.gateways.base import GatewayBase, LLMGateway, WrappingGateway
from vivarium.gateways.cache import CacheMode, CachingGateway
from vivarium.gateways.mock import MockLLMGateway
from vivarium.gateways.provenance import LITELLM_PROVIDER, MOCK_PROVIDER, provider_of
from vivarium.gateways.ratelimit import RateLimitedGateway, RateLimiter
from vivarium.gateways.retry import RetryGateway
from vivarium.protocols import implements
from vivarium.settings import (
    DEFAULT_CACHE_MODE,
    DEFAULT_FORCED_TOOL_FORMAT,
    DEFAULT_MOCK_LATENCY_MS,
    DEFAULT_MODEL,
    DEFAULT_NUM_RETRIES,
    DEFAULT_TIMEOUT_S,
    DEFAULT_TRANSPORT,
    server_urls,
)

Gateway = LLMGateway | GatewayBase


@dataclasses.dataclass(frozen=True, slots=True)
class GatewaySettings:
    """Everything a run's gateway stack is built from, as plain values.

    Each is a setting of the ``llm`` config section (``vivarium.experiment.config.LLMConfig``, its one
    definition), translated by ``vivarium.experiment.build.gateway_settings``; the defaults are the same
    constants of ``vivarium.settings``, so a stack built by hand defaults as a run does.

    Attributes:
        model: The model agents call (``mock``, or a litellm name such as ``openai/smollm2``).
        mock: Answer with the deterministic ``MockLLMGateway`` instead of a real provider.
        mock_latency_ms: The mock's latency.
        api_base: The servers' base URLs, as ``vivarium.settings.server_urls`` reads them
            (``LLMConfig.api_bases``): empty for the provider's own, several for a pool (each
            call to the least busy; see ``servers.ServerPool``).
        api_key: The API key (never shown in a repr).
        transport: How ``LiteLLMGateway`` reaches the server (``auto``, ``litellm``,
            ``direct``).
        forced_tool_format: How ``LiteLLMGateway`` sends a forced tool (``tool_choice``, or
            ``json_schema`` for servers that cannot call tools: see ``forced_schema``).
        timeout: Seconds one attempt may take.
        retries: Retries after the first attempt (the retry layer).
        backoff: The first wait between attempts, in seconds (doubled after each).
        max_backoff: The cap on that wait.
        max_retry_after: The most a server's ``Retry-After`` is honoured for.
        requests_per_minute: The rate limit on requests (None: none).
        tokens_per_minute: The rate limit on tokens (None: none).
        cache: The cassette file (None: no cache layer).
        cache_mode: ``record``, ``replay`` or ``auto`` (see ``cache.CachingGateway``).
    """

    model: str = DEFAULT_MODEL
    mock: bool = False
    mock_latency_ms: float = DEFAULT_MOCK_LATENCY_MS
    api_base: tuple[str, ...] = ()
    api_key: str | None = dataclasses.field(default=None, repr=False)
    transport: str = DEFAULT_TRANSPORT
    forced_tool_format: str = DEFAULT_FORCED_TOOL_FORMAT
    timeout: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_NUM_RETRIES
    backoff: float = 0.5
    max_backoff: float = 8.0
    max_retry_after: float = 60.0
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    cache: str | None = None
    cache_mode: CacheMode = DEFAULT_CACHE_MODE

    def __post_init__(self) -> None:
        """Read ``api_base`` given as one URL (or URLs separated by commas) as the tuple."""
        if not isinstance(self.api_base, tuple):
            object.__setattr__(self, "api_base", server_urls(self.api_base))

    @property
    def uses_mock(self) -> bool:
        """Whether the mock answers (``mock`` set, or the model named ``mock``)."""
        return self.mock or self.model == "mock"

    @property
    def provider(self) -> str:
        """Where the run's replies come from (``provenance``), the same in every cache mode.

        A replay builds no provider, yet serves only the cassette's rows of this one: the
        mock's replies never pass for a model's, nor the reverse.
        """
        return MOCK_PROVIDER if self.uses_mock else LITELLM_PROVIDER

    @property
    def replays_only(self) -> bool:
        """Whether every reply comes from the cassette (no provider is built)."""
        return self.cache is not None and self.cache_mode == "replay"

    def limiter(self) -> RateLimiter | None:
        """A new limiter for these limits, or None when there are none."""
        if not (self.requests_per_minute or self.tokens_per_minute):
            return None
        return RateLimiter(
            requests_per_minute=self.requests_per_minute,
            tokens_per_minute=self.tokens_per_minute,
        )


def build_provider(settings: GatewaySettings, seed: int) -> Gateway:
    """The provider at the bottom of the stack, ready to call.

    A real provider is checked first (a server that is not listening fails now, in one line,
    unless the cassette may answer every call) and prepared (heavy imports now, never on the
    run's event loop).

    Args:
        settings: The stack's settings.
        seed: The run's seed (the mock's replies derive from it).

    Returns:
        ``MockLLMGateway`` or ``LiteLLMGateway``.

    Raises:
        ConfigError: Nothing listens at ``settings.api_base``.
    """
    if settings.uses_mock:
        return MockLLMGateway(seed=seed, latency_ms=settings.mock_latency_ms, model=settings.model)
    from vivarium.gateways.litellm_gateway import LiteLLMGateway

    provider = LiteLLMGateway(
        api_base=settings.api_base or None,
        api_key=settings.api_key,
        timeout=settings.timeout,
        transport=settings.transport,
        forced_tool_format=settings.forced_tool_format,
    )
    if not (settings.cache and settings.cache_mode == "auto"):  # auto may need no server at all
        provider.check_reachable()
    provider.prepare([settings.model])
    return provider


def compose(provider: Gateway | None, settings: GatewaySettings) -> Gateway:
    """Stack the layers ``settings`` asks for on ``provider``: cache -> retry -> rate limit.

    Args:
        provider: The bottom of the stack; None only when the cassette replays every call.
        settings: The stack's settings.

    Returns:
        The top of the stack, itself a gateway.
    """
    gateway: Any = provider
    if provider is not None:
        limiter = settings.limiter()
        if limiter is not None:
            gateway = RateLimitedGateway(gateway, limiter)
        gateway = RetryGateway(
            gateway,
            retries=settings.retries,
            backoff=settings.backoff,
            max_backoff=settings.max_backoff,
            max_retry_after=settings.max_retry_after,
        )
    if settings.cache:
        # Given the path, the cache layer owns the cassette and closes it with the run.
        variant = (
            None
            if settings.forced_tool_format == DEFAULT_FORCED_TOOL_FORMAT
            else f"forced_tool_format={settings.forced_tool_format}"
        )
        gateway = CachingGateway(
            gateway,
            settings.cache,
            mode=settings.cache_mode,
            variant=variant,
            # What answers: the provider below, or (a replay builds none) what the run names.
            provider=settings.provider if provider is None else provider_of(provider),
        )
    return gateway


def build_gateway(settings: GatewaySettings, seed: int) -> Gateway:
    """The full stack for one run (see the module docstring).

    Args:
        settings: The stack's settings.
        seed: The run's seed.

    Returns:
        The top of the stack; ``close()`` it when the run ends (it may own a cassette).
    """
    provider = None if settings.replays_only else build_provider(settings, seed)
    return compose(provider, settings)


def layers(gateway: Any) -> list[Any]:
    """The layers of a stack, top first, down to the provider (following ``inner``).

    Args:
        gateway: The top of a stack.

    Returns:
        Each layer, ``gateway`` first; a replay-only stack ends with its cache layer.
    """
    found = []
    while gateway is not None:
        found.append(gateway)
        gateway = gateway.inner if implements(gateway, WrappingGateway) else None
    return found
