"""RateLimiter: rolling 60 s windows for requests and tokens, and a concurrency bound.

Time is a fake clock that only moves when the limiter sleeps, so waits are exact and instant.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from vivarium.gateways import (
    GatewayBase,
    LLMRequest,
    LLMResponse,
    MockLLMGateway,
    RateLimitedGateway,
    RateLimiter,
)

from .helpers import TOOLS, messages


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)
        await asyncio.sleep(0)


def limiter(clock: FakeClock, **limits: float) -> RateLimiter:
    return RateLimiter(**limits, clock=clock, sleep=clock.sleep, asleep=clock.asleep)


def test_requests_per_minute_blocks_until_the_window_rolls() -> None:
    clock = FakeClock()
    rl = limiter(clock, requests_per_minute=2)
    starts = []
    for _ in range(5):
        with rl.acquire_sync():
            starts.append(clock.now)
    # two per rolling minute: the third waits for the first to be 60 s old
    assert starts == [0.0, 0.0, 60.0, 60.0, 120.0]
    assert rl.waits == 2


def test_window_is_rolling_not_fixed() -> None:
    clock = FakeClock()
    rl = limiter(clock, requests_per_minute=2)
    with rl.acquire_sync():
        pass
    clock.now = 30.0
    with rl.acquire_sync():
        pass
    with rl.acquire_sync():  # the t=0 call expires at t=60
        assert clock.now == 60.0
    with rl.acquire_sync():  # the t=30 call expires at t=90
        assert clock.now == 90.0


def test_tokens_per_minute_counts_estimates_then_actual_usage() -> None:
    clock = FakeClock()
    rl = limiter(clock, tokens_per_minute=1000)
    with rl.acquire_sync(600):
        pass
    with rl.acquire_sync(600):  # 1,200 > 1,000: waits for the first to expire
        assert clock.now == 60.0
    assert rl.usage() == (1, 600)

    clock2 = FakeClock()
    rl2 = limiter(clock2, tokens_per_minute=1000)
    with rl2.acquire_sync(900) as ticket:
        rl2.record_tokens(100, ticket)  # the reply used far less than estimated
    with rl2.acquire_sync(800):
        assert clock2.now == 0.0
    assert rl2.usage() == (2, 900)


def test_a_call_larger_than_the_budget_runs_alone() -> None:
    clock = FakeClock()
    rl = limiter(clock, tokens_per_minute=100)
    with rl.acquire_sync(10):
        pass
    with rl.acquire_sync(500):
        assert clock.now == 60.0
    with rl.acquire_sync(10):
        assert clock.now == 120.0


def test_async_acquire_waits_with_the_injected_sleep() -> None:
    clock = FakeClock()
    rl = limiter(clock, requests_per_minute=3)

    async def main() -> list[float]:
        starts = []
        for _ in range(7):
            async with rl.acquire():
                starts.append(clock.now)
        return starts

    assert asyncio.run(main()) == [0.0, 0.0, 0.0, 60.0, 60.0, 60.0, 120.0]


def test_rate_limited_gateway_reports_actual_tokens() -> None:
    clock = FakeClock()
    rl = limiter(clock, tokens_per_minute=10_000)
    gw = RateLimitedGateway(MockLLMGateway(), rl)
    reply = gw.chat(model="mock", messages=messages(), tools=TOOLS)
    assert rl.usage() == (1, reply.usage.total_tokens)
    reply2 = asyncio.run(gw.achat(model="mock", messages=messages("again"), tools=TOOLS))
    assert rl.usage() == (2, reply.usage.total_tokens + reply2.usage.total_tokens)


class InFlight(GatewayBase):
    """Counts calls in flight around an inner gateway."""

    def __init__(self, inner: GatewayBase) -> None:
        self.inner = inner
        self.now = 0
        self.peak = 0
        self.lock = threading.Lock()

    def _enter(self) -> None:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def _exit(self) -> None:
        with self.lock:
            self.now -= 1

    def complete(self, request: LLMRequest) -> LLMResponse:
        self._enter()
        try:
            return self.inner.complete(request)
        finally:
            self._exit()

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        self._enter()
        try:
            return await self.inner.acomplete(request)
        finally:
            self._exit()


@pytest.mark.parametrize("bound", [1, 3])
def test_max_concurrent_bounds_async_calls(bound: int) -> None:
    probe = InFlight(MockLLMGateway(latency_ms=20))
    gw = RateLimitedGateway(probe, RateLimiter(max_concurrent=bound))

    async def main() -> list[LLMResponse]:
        calls = [gw.achat(model="mock", messages=messages(str(i))) for i in range(10)]
        return await asyncio.gather(*calls)

    replies = asyncio.run(main())
    assert len(replies) == 10
    assert probe.peak == bound


def test_max_concurrent_bounds_threads() -> None:
    probe = InFlight(MockLLMGateway(latency_ms=20))
    gw = RateLimitedGateway(probe, RateLimiter(max_concurrent=2))
    with ThreadPoolExecutor(max_workers=6) as pool:
        replies = list(
            pool.map(lambda i: gw.chat(model="mock", messages=messages(str(i))), range(12))
        )
    assert len(replies) == 12
    assert probe.peak == 2


def test_limiter_works_across_event_loops() -> None:
    gw = RateLimitedGateway(MockLLMGateway(), RateLimiter(max_concurrent=2))
    for _ in range(2):  # a semaphore bound to a closed loop must not be reused
        reply = asyncio.run(gw.achat(model="mock", messages=messages()))
        assert reply.content


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="requests_per_minute"):
        RateLimiter(requests_per_minute=0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"requests_per_minute": -60},
        {"tokens_per_minute": -1.5},
        {"requests_per_minute": float("nan")},
        {"max_concurrent": -2},
        {"max_concurrent": 1.5},
    ],
)
def test_bad_limits_are_refused_in_one_line(kwargs: dict) -> None:
    from vivarium.errors import ConfigError

    ((name, value),) = kwargs.items()
    with pytest.raises(ConfigError) as info:
        RateLimiter(**kwargs)
    assert str(info.value) == f"{name}: {value!r} is not a limit (a number > 0, or None)"
