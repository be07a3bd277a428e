"""A generic retry layer, and the backoff rule every retrying gateway shares.

``RetryGateway`` retries an inner gateway that raises ``LLMCallError(retryable=True)``. It sets
the attempt number for the inner call, so each attempt's call record says which try it was, and
records a failed attempt itself when the inner gateway did not. ``LiteLLMGateway`` retries inside
itself (it sees provider details such as ``Retry-After``) and uses the same ``backoff_delay``.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

from vivarium.gateways.base import (
    CallRecord,
    GatewayBase,
    LLMCallError,
    LLMGateway,
    LLMRequest,
    LLMResponse,
    attempt_number,
    collect_calls,
    record_call,
)
from vivarium.seeding import digest

SleepFn = Callable[[float], Any]


def backoff_delay(
    attempt: int,
    *,
    backoff: float,
    max_backoff: float,
    key: str = "",
    retry_after: float | None = None,
    max_retry_after: float = 60.0,
) -> float:
    """Seconds to wait after failed ``attempt`` (1-based): exponential, capped, jittered.

    The jitter (up to +25 %) comes from a digest of ``key`` and the attempt, not from a random
    generator: agents sending different requests spread out, and a rerun waits the same times.
    A server's ``Retry-After`` wins when it asks for longer (up to ``max_retry_after``).
    """
    base = min(max_backoff, backoff * 2 ** max(attempt - 1, 0))
    jitter = int(digest(f"{key}:{attempt}")[:4], 16) / 0xFFFF * 0.25
    delay = min(max_backoff, base * (1.0 + jitter))
    if retry_after is not None and retry_after > 0:
        delay = max(delay, min(retry_after, max_retry_after))
    return max(delay, 0.0)


def complete_via(inner: Any, request: LLMRequest) -> LLMResponse:
    """Call a layer with ``complete`` if it has one, else a plain ``chat`` gateway."""
    if hasattr(inner, "complete"):
        return inner.complete(request)
    return inner.chat(**request.model_dump(exclude_none=True))


async def acomplete_via(inner: Any, request: LLMRequest) -> LLMResponse:
    if hasattr(inner, "acomplete"):
        return await inner.acomplete(request)
    return await inner.achat(**request.model_dump(exclude_none=True))


async def asleep_with(sleep: SleepFn | None, seconds: float) -> None:
    """Await an injected sleep (sync or async), or ``asyncio.sleep``."""
    if sleep is None:
        await asyncio.sleep(seconds)
        return
    result = sleep(seconds)
    if inspect.isawaitable(result):
        await result


def _failed_record(request: LLMRequest, attempt: int, exc: LLMCallError) -> CallRecord:
    return CallRecord(
        attempt=attempt,
        model=request.model,
        request_hash=request.request_hash(),
        error=f"{type(exc).__name__}: {exc}",
    )


class RetryGateway(GatewayBase):
    """Retry an inner gateway on ``LLMCallError(retryable=True)``; other errors pass through."""

    def __init__(
        self,
        inner: LLMGateway | GatewayBase,
        retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        sleep: SleepFn | None = None,
    ) -> None:
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self.inner = inner
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.sleep = sleep

    def __repr__(self) -> str:
        return f"RetryGateway({self.inner!r}, retries={self.retries}, backoff={self.backoff})"

    def _delay(self, request_hash: str, attempt: int, exc: LLMCallError) -> float:
        return backoff_delay(
            attempt,
            backoff=self.backoff,
            max_backoff=self.max_backoff,
            key=request_hash,
            retry_after=exc.retry_after,
        )

    def _settle(self, request: LLMRequest, attempt: int, records: list[CallRecord], exc=None):
        """Pass the inner call's records on; add one for a failure the inner layer left out."""
        for record in records:
            record_call(record)
        if exc is not None and not any(r.error for r in records):
            record_call(_failed_record(request, attempt, exc))

    def complete(self, request: LLMRequest) -> LLMResponse:
        attempts = self.retries + 1
        for attempt in range(1, attempts + 1):
            with attempt_number(attempt), collect_calls() as records:
                try:
                    response = complete_via(self.inner, request)
                except LLMCallError as exc:
                    failure = exc
                else:
                    failure = None
            self._settle(request, attempt, records, failure)
            if failure is None:
                return response
            if not failure.retryable or attempt == attempts:
                raise failure
            delay = self._delay(request.request_hash(), attempt, failure)
            (self.sleep or time.sleep)(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        attempts = self.retries + 1
        for attempt in range(1, attempts + 1):
            with attempt_number(attempt), collect_calls() as records:
                try:
                    response = await acomplete_via(self.inner, request)
                except LLMCallError as exc:
                    failure = exc
                else:
                    failure = None
            self._settle(request, attempt, records, failure)
            if failure is None:
                return response
            if not failure.retryable or attempt == attempts:
                raise failure
            await asleep_with(self.sleep, self._delay(request.request_hash(), attempt, failure))
        raise AssertionError("unreachable")  # pragma: no cover
