"""The run's gateway stack: cache -> retry -> rate limit -> provider, each a wrapper of its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.fake_openai import FakeOpenAIServer
from vivarium import Experiment
from vivarium.experiment.build import gateway_settings
from vivarium.gateways import (
    CachingGateway,
    GatewayBase,
    GatewaySettings,
    LiteLLMGateway,
    LLMCallError,
    LLMRequest,
    LLMResponse,
    MockLLMGateway,
    RateLimitedGateway,
    RetryGateway,
    build_gateway,
    collect_calls,
)
from vivarium.gateways.base import current_attempt
from vivarium.gateways.stack import compose, layers

from .helpers import messages

GATEWAYS = Path(__file__).resolve().parents[2] / "vivarium" / "gateways"


def kinds(gateway: object) -> list[type]:
    return [type(layer) for layer in layers(gateway)]


def test_the_stack_built_for_a_config_is_cache_retry_ratelimit_provider(tmp_path: Path) -> None:
    llm = {
        "model": "openai/fake",
        "force_tool": True,
        "num_retries": 3,
        "rate_limit_rpm": 600,
        "cache": str(tmp_path / "c.cassette"),
        "cache_mode": "record",
    }
    with FakeOpenAIServer() as server:
        config = Experiment(policy="cognitive", llm={**llm, "api_base": server.base_url}).config
        gateway = build_gateway(gateway_settings(config.llm), config.seed)
        try:
            assert kinds(gateway) == [
                CachingGateway,
                RetryGateway,
                RateLimitedGateway,
                LiteLLMGateway,
            ]
            cache, retry, limit, provider = layers(gateway)
            assert cache.mode == "record" and retry.retries == 3
            assert limit.limiter.requests_per_minute == 600
            assert provider.api_base == server.base_url
            assert gateway.chat(model="openai/fake", messages=messages()).content
        finally:
            gateway.close()


def test_the_mock_gets_the_same_stack_and_idle_layers_are_left_out(tmp_path: Path) -> None:
    full = GatewaySettings(
        model="mock", requests_per_minute=60, cache=str(tmp_path / "m.cassette"), cache_mode="auto"
    )
    stack = build_gateway(full, seed=1)
    assert kinds(stack) == [CachingGateway, RetryGateway, RateLimitedGateway, MockLLMGateway]
    stack.close()
    assert kinds(build_gateway(GatewaySettings(), seed=1)) == [RetryGateway, MockLLMGateway]
    replay = GatewaySettings(
        model="openai/x", cache=str(tmp_path / "m.cassette"), cache_mode="replay"
    )
    replaying = build_gateway(replay, seed=1)  # no provider: nothing can reach a network
    assert kinds(replaying) == [CachingGateway]
    replaying.close()


class FailsTwice(GatewayBase):
    """A provider whose first two attempts fail (retryable), then answers like the mock."""

    def __init__(self) -> None:
        self.attempts: list[int] = []
        self.mock = MockLLMGateway(seed=2)

    def complete(self, request: LLMRequest) -> LLMResponse:
        self.attempts.append(current_attempt())
        if len(self.attempts) <= 2:
            raise LLMCallError(f"down {len(self.attempts)}", kind="server_error", retryable=True)
        return self.mock.complete(request)


def test_each_retry_takes_a_limiter_slot() -> None:
    provider = FailsTwice()
    settings = GatewaySettings(retries=2, backoff=0.0, max_backoff=0.0, requests_per_minute=100)
    gateway = compose(provider, settings)
    assert kinds(gateway) == [RetryGateway, RateLimitedGateway, FailsTwice]
    limiter = layers(gateway)[1].limiter
    with collect_calls() as records:
        reply = gateway.chat(model="mock", messages=messages())
    assert reply.content is not None or reply.tool_calls
    assert provider.attempts == [1, 2, 3]
    assert limiter.usage()[0] == 3  # three admissions: retries count against the limit
    assert [(r.attempt, r.error) for r in records] == [
        (1, "LLMCallError: down 1"),
        (2, "LLMCallError: down 2"),
        (3, None),
    ]


def test_a_call_that_runs_out_of_retries_says_how_many_attempts() -> None:
    class Down(GatewayBase):
        def complete(self, request: LLMRequest) -> LLMResponse:
            raise LLMCallError("injected 503", kind="server_error", retryable=True, status_code=503)

    gateway = compose(Down(), GatewaySettings(retries=1, backoff=0.0, max_backoff=0.0))
    with pytest.raises(LLMCallError) as info:
        gateway.chat(model="openai/x", messages=messages())
    assert str(info.value) == "openai/x: injected 503 (after 2 attempts)"
    assert info.value.kind == "server_error" and info.value.status_code == 503


def test_a_call_that_cannot_be_made_is_not_an_attempt() -> None:
    """A setup error (kind ``config``) passes the retry layer as it is: no retry, no record."""

    class Misconfigured(GatewayBase):
        calls = 0

        def complete(self, request: LLMRequest) -> LLMResponse:
            Misconfigured.calls += 1
            raise LLMCallError("litellm is not installed", kind="config")

    gateway = compose(Misconfigured(), GatewaySettings(retries=3))
    with collect_calls() as records, pytest.raises(LLMCallError, match="^litellm is not"):
        gateway.chat(model="openai/x", messages=messages())
    assert Misconfigured.calls == 1 and records == []


def test_no_gateway_module_imports_the_experiment_config() -> None:
    """The stack takes plain settings: the gateways know nothing of configs or builds."""
    for path in sorted(GATEWAYS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                assert not name.startswith(
                    ("vivarium.experiment.config", "vivarium.experiment.build")
                ), path.name


def test_the_settings_never_show_the_key() -> None:
    assert "sk-hidden" not in repr(GatewaySettings(api_key="sk-hidden"))
