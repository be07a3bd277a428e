"""RetryGateway: retryable errors are retried with a deterministic backoff; each try recorded."""

from __future__ import annotations

import asyncio

import pytest

from vivarium.gateways import (
    GatewayBase,
    LLMCallError,
    LLMRequest,
    LLMResponse,
    MockLLMGateway,
    RetryGateway,
    collect_calls,
)
from vivarium.gateways.base import current_attempt
from vivarium.gateways.retry import backoff_delay

from .helpers import TOOLS, messages


class Flaky(GatewayBase):
    """Fails the first ``failures`` calls, then answers like the mock. Records nothing itself
    for failures, as a third-party gateway might."""

    def __init__(self, failures: int, *, retryable: bool = True, retry_after: float | None = None):
        self.failures = failures
        self.retryable = retryable
        self.retry_after = retry_after
        self.attempts_seen: list[int] = []
        self.mock = MockLLMGateway(seed=1)

    def complete(self, request: LLMRequest) -> LLMResponse:
        self.attempts_seen.append(current_attempt())
        if len(self.attempts_seen) <= self.failures:
            raise LLMCallError(
                f"boom {len(self.attempts_seen)}",
                kind="server_error",
                retryable=self.retryable,
                retry_after=self.retry_after,
            )
        return self.mock.complete(request)


def request() -> LLMRequest:
    return LLMRequest(model="mock", messages=messages(), tools=TOOLS)


def test_retries_then_succeeds_and_records_every_attempt() -> None:
    slept: list[float] = []
    inner = Flaky(failures=2)
    gw = RetryGateway(inner, retries=2, backoff=0.5, max_backoff=8.0, sleep=slept.append)
    with collect_calls() as records:
        reply = gw.complete(request())
    assert reply.tool_calls[0].name == "post_message"
    assert inner.attempts_seen == [1, 2, 3]
    assert [r.attempt for r in records] == [1, 2, 3]
    assert [r.error for r in records] == ["LLMCallError: boom 1", "LLMCallError: boom 2", None]
    assert all(r.request_hash == request().request_hash() for r in records)
    # exponential with at most +25 % jitter, the same on every run
    assert 0.5 <= slept[0] <= 0.625 and 1.0 <= slept[1] <= 1.25
    slept_again: list[float] = []
    RetryGateway(Flaky(failures=2), sleep=slept_again.append).complete(request())
    assert slept_again == slept


def test_gives_up_after_the_last_retry() -> None:
    slept: list[float] = []
    inner = Flaky(failures=10)
    gw = RetryGateway(inner, retries=3, sleep=slept.append)
    with collect_calls() as records, pytest.raises(LLMCallError, match="boom 4"):
        gw.complete(request())
    assert inner.attempts_seen == [1, 2, 3, 4]
    assert len(slept) == 3
    assert [r.attempt for r in records] == [1, 2, 3, 4]
    assert all(r.error for r in records)


def test_non_retryable_errors_pass_through_at_once() -> None:
    slept: list[float] = []
    inner = Flaky(failures=1, retryable=False)
    with pytest.raises(LLMCallError, match="boom 1") as info:
        RetryGateway(inner, retries=5, sleep=slept.append).complete(request())
    assert info.value.retryable is False
    assert inner.attempts_seen == [1]
    assert slept == []


def test_retry_after_is_honoured() -> None:
    slept: list[float] = []
    RetryGateway(Flaky(failures=1, retry_after=3.0), backoff=0.1, sleep=slept.append).complete(
        request()
    )
    assert slept == [3.0]


def test_async_path_uses_the_same_rule() -> None:
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    inner = Flaky(failures=1)
    gw = RetryGateway(inner, retries=1, sleep=fake_sleep)

    async def main() -> LLMResponse:
        with collect_calls() as records:
            reply = await gw.achat(model="mock", messages=messages(), tools=TOOLS)
        assert [r.attempt for r in records] == [1, 2]
        return reply

    reply = asyncio.run(main())
    assert reply.finish_reason == "tool_calls"
    assert inner.attempts_seen == [1, 2]
    assert len(slept) == 1


def test_inner_records_are_not_duplicated() -> None:
    # the mock records its own success: the retry layer passes it on once
    with collect_calls() as records:
        RetryGateway(MockLLMGateway()).complete(request())
    assert len(records) == 1 and records[0].error is None


def test_backoff_delay_is_capped_and_deterministic() -> None:
    delays = [backoff_delay(n, backoff=0.5, max_backoff=4.0, key="k") for n in range(1, 8)]
    assert delays == [backoff_delay(n, backoff=0.5, max_backoff=4.0, key="k") for n in range(1, 8)]
    assert max(delays) <= 4.0
    assert delays[0] < delays[1] < delays[2]
    assert backoff_delay(1, backoff=0.5, max_backoff=4.0, retry_after=120.0) == 60.0
