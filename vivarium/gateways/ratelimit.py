"""The rate limit layer of a gateway stack: requests/min, tokens/min, calls at once.

One ``RateLimiter`` is shared by every agent's gateway, so a run of 1,000 agents stays inside a
provider's quota instead of collecting 429s. Windows roll over 60 seconds: each admitted call
leaves an entry (time, tokens) that counts until it is 60 s old. A call reserves its estimated
tokens when admitted; the gateway then reports what the reply actually used.

Time comes from an injectable ``clock`` and waiting from injectable ``sleep`` / ``asleep``, so
tests drive the limiter with a fake clock instead of waiting for real minutes.

``RateLimitedGateway`` sits below the retry layer, so each attempt (retries too) waits for the
limiter: the provider never sees more requests than the limit allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from vivarium.errors import ConfigError
from vivarium.gateways.base import Call, GatewayBase, LLMGateway, LLMRequest, LLMResponse
from vivarium.gateways.effects import Flow, Sleep, arun, run
from vivarium.seeding import canonical_json

WINDOW_S = 60.0


def _is_limit(value: object, *, whole: bool = False) -> bool:
    """A number > 0 (NaN compares false with everything, so ``value <= 0`` lets it through)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if whole and not isinstance(value, int):
        return False
    return value > 0


class Ticket:
    """One admitted call's entry in the rolling window (its time and counted tokens)."""

    __slots__ = ("time", "tokens")

    def __init__(self, time: float, tokens: int) -> None:
        """An entry admitted at ``time`` (the limiter's clock) counting ``tokens``."""
        self.time = time
        self.tokens = tokens

    def __repr__(self) -> str:
        """The entry's time and tokens."""
        return f"Ticket(time={self.time}, tokens={self.tokens})"


class RateLimiter:
    """Admit calls while the last 60 s stay under the request and token budgets.

    A call is admitted while the last 60 s hold fewer than ``requests_per_minute`` calls and
    ``tokens_per_minute`` tokens, and at most ``max_concurrent`` calls run at once (a provider
    quota; the run's decisions in flight are the engine's ``max_concurrency``).
    ``None`` means no limit of that kind. A single call larger than the token budget is admitted
    once the window is empty (it could never fit otherwise).
    """

    def __init__(
        self,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        max_concurrent: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] = time.sleep,
        asleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        """Set the limits, and the clock and sleeps (injectable for tests).

        Raises:
            ConfigError: A limit is not a number > 0 (``max_concurrent``: a whole one).
        """
        for name, value in (
            ("requests_per_minute", requests_per_minute),
            ("tokens_per_minute", tokens_per_minute),
            ("max_concurrent", max_concurrent),
        ):
            if value is not None and not _is_limit(value, whole=name == "max_concurrent"):
                raise ConfigError(f"{name}: {value!r} is not a limit (a number > 0, or None)")
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self.max_concurrent = max_concurrent
        self.clock = clock
        self.sleep = sleep
        self.asleep = asleep
        self._entries: deque[Ticket] = deque()
        self._lock = threading.Lock()
        self._thread_sem = threading.Semaphore(max_concurrent) if max_concurrent else None
        self._loop_sems: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]
        self._loop_sems = weakref.WeakKeyDictionary()
        self.waits = 0  # times a call had to wait for the window (for tests and progress)

    def __repr__(self) -> str:
        """The three limits."""
        return (
            f"RateLimiter(requests_per_minute={self.requests_per_minute}, "
            f"tokens_per_minute={self.tokens_per_minute}, max_concurrent={self.max_concurrent})"
        )

    # -- the window --------------------------------------------------------------------------
    def _prune(self, now: float) -> None:
        while self._entries and self._entries[0].time <= now - WINDOW_S:
            self._entries.popleft()

    def usage(self) -> tuple[int, int]:
        """(requests, tokens) counted in the current window."""
        with self._lock:
            self._prune(self.clock())
            return len(self._entries), sum(e.tokens for e in self._entries)

    def try_admit(self, estimated_tokens: int = 0) -> Ticket | float:
        """Admit a call now (its ticket) or say how many seconds to wait before trying again."""
        with self._lock:
            now = self.clock()
            self._prune(now)
            wait = self._wait_needed(now, estimated_tokens)
            if wait <= 0:
                ticket = Ticket(now, max(int(estimated_tokens), 0))
                self._entries.append(ticket)
                return ticket
            return wait

    def _wait_needed(self, now: float, tokens: int) -> float:
        entries = self._entries
        wait = 0.0
        rpm = self.requests_per_minute
        if rpm is not None:
            limit = max(1, int(rpm))
            if len(entries) >= limit:
                # the call fits once the oldest ``len - limit + 1`` entries have expired
                wait = max(wait, entries[len(entries) - limit].time + WINDOW_S - now)
        tpm = self.tokens_per_minute
        if tpm is not None and entries:
            used = sum(e.tokens for e in entries)
            if used + tokens > tpm:
                freed = 0
                for entry in entries:
                    freed += entry.tokens
                    if used - freed + tokens <= tpm or entry is entries[-1]:
                        wait = max(wait, entry.time + WINDOW_S - now)
                        break
        return wait

    def record_tokens(self, tokens: int, ticket: Ticket | None = None) -> None:
        """Count the tokens a call actually used (replacing its estimate when given its ticket)."""
        with self._lock:
            if ticket is not None:
                ticket.tokens = max(int(tokens), 0)
            else:
                self._entries.append(Ticket(self.clock(), max(int(tokens), 0)))

    # -- waiting: one flow, blocking or on the event loop (``effects``) -----------------------
    def admission(self, estimated_tokens: int = 0) -> Flow[Ticket]:
        """Wait until the window admits a call of ``estimated_tokens``; its ticket."""
        while True:
            result = self.try_admit(estimated_tokens)
            if isinstance(result, Ticket):
                return result
            self.waits += 1
            yield Sleep(result, self.sleep, self.asleep)

    def slot(self) -> Slot:
        """The effect of taking a concurrency slot (``max_concurrent``); it gives the release."""
        return Slot(self)

    def wait_sync(self, estimated_tokens: int = 0) -> Ticket:
        """Block until the window admits a call of ``estimated_tokens``; its ticket."""
        return run(self.admission(estimated_tokens))

    async def wait(self, estimated_tokens: int = 0) -> Ticket:
        """Await a place in the window for a call of ``estimated_tokens``; its ticket."""
        return await arun(self.admission(estimated_tokens))

    @contextlib.contextmanager
    def acquire_sync(self, estimated_tokens: int = 0) -> Iterator[Ticket]:
        """Hold a concurrency slot and a place in the window for one blocking call."""
        release = self.slot().run()
        try:
            yield self.wait_sync(estimated_tokens)
        finally:
            release()

    @contextlib.asynccontextmanager
    async def acquire(self, estimated_tokens: int = 0) -> AsyncIterator[Ticket]:
        """Hold a concurrency slot (per event loop) and a place in the window for one call."""
        release = await self.slot().arun()
        try:
            yield await self.wait(estimated_tokens)
        finally:
            release()

    def _loop_semaphore(self) -> asyncio.Semaphore | None:
        if not self.max_concurrent:
            return None
        loop = asyncio.get_running_loop()
        with self._lock:
            sem = self._loop_sems.get(loop)
            if sem is None:
                sem = self._loop_sems[loop] = asyncio.Semaphore(self.max_concurrent)
        return sem


def _free() -> None:
    """The release of a slot that was never needed (no ``max_concurrent``)."""


class Slot:
    """The effect of taking one of a limiter's ``max_concurrent`` slots; its result frees it.

    Blocking calls share one thread semaphore; each event loop has a semaphore of its own.
    """

    __slots__ = ("limiter",)

    def __init__(self, limiter: RateLimiter) -> None:
        """A slot of ``limiter``."""
        self.limiter = limiter

    def run(self) -> Callable[[], None]:
        """Take a slot, blocking until one is free; the function that frees it."""
        sem = self.limiter._thread_sem
        if sem is None:
            return _free
        sem.acquire()
        return sem.release

    async def arun(self) -> Callable[[], None]:
        """Await a slot of the running loop; the function that frees it."""
        sem = self.limiter._loop_semaphore()
        if sem is None:
            return _free
        await sem.acquire()
        return sem.release


def estimate_tokens(request: LLMRequest) -> int:
    """A rough, deterministic token estimate: 4 characters a token, plus the reply budget."""
    text = canonical_json({"messages": request.messages, "tools": request.tools})
    return len(text) // 4 + 1 + (request.max_tokens or 0)


class RateLimitedGateway(GatewayBase):
    """Wait for the shared limiter before each call; then count the tokens the reply used."""

    def __init__(
        self,
        inner: LLMGateway | GatewayBase,
        limiter: RateLimiter,
        estimate: Callable[[LLMRequest], int] = estimate_tokens,
    ) -> None:
        """Wrap ``inner`` behind ``limiter``, reserving ``estimate(request)`` tokens a call."""
        self.inner = inner
        self.limiter = limiter
        self.estimate = estimate

    def __repr__(self) -> str:
        """The layer, its limiter and the stack below it."""
        return f"RateLimitedGateway({self.inner!r}, {self.limiter!r})"

    @staticmethod
    def _used(response: LLMResponse) -> int:
        usage = response.usage
        return usage.total_tokens or usage.prompt_tokens + usage.completion_tokens

    def complete(self, request: LLMRequest) -> LLMResponse:
        """Wait for the limiter (blocking), then send ``request`` to the layer below.

        A failed call keeps its estimated tokens in the window; a reply counts what it used.
        """
        return run(self._admitted(request))

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        """``complete`` for the event loop: the limiter is awaited."""
        return await arun(self._admitted(request))

    def _admitted(self, request: LLMRequest) -> Flow[LLMResponse]:
        """Hold a slot and a place in the window while the layer below answers."""
        tokens = self.estimate(request)
        release = yield self.limiter.slot()
        try:
            ticket = yield from self.limiter.admission(tokens)
            response = yield Call(self.inner, request)
            self.limiter.record_tokens(self._used(response), ticket)
            return response
        finally:
            release()
