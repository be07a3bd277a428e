"""One flow, two drivers: how a concept with a blocking and an event-loop form is written once.

An attempt at a call, the retry loop, the cache, the rate limit, a pool of servers and a
policy's decision each have a blocking form (``complete``, ``decide``) and one for the event
loop (``acomplete``, ``adecide``). Each is written once, as a generator (a ``Flow``) that does
no I/O and never waits: it yields each thing to be done that takes time (an ``Effect``: a call
of the layer below, a sleep, a request to a server), gets its result back at the ``yield``, or
its exception raised there, and returns the answer. ``run`` drives a flow blocking, ``arun`` on
the running event loop; the logic between the waits is the same code, so the two forms cannot
drift apart (the sans-IO shape of h11 and httpx).

An effect knows its two forms: ``run()`` does it blocking, ``arun()`` returns the awaitable
that does it on the loop. ``run`` never starts an event loop, so a blocking call made from code
that runs inside one (a notebook cell) works as it always did. Both drivers run the flow in the
caller's context, so the context variables a flow sets (the attempt number, the call records
being collected) are the ones the effect sees; an exception raised by an effect, cancellation
too, is raised inside the flow at its ``yield``, where its ``try`` blocks handle it as they
would a direct call.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Effect(Protocol):
    """Something a flow waits for, in its blocking and its event-loop form."""

    def run(self) -> Any:
        """Do it, blocking this thread; its result goes back to the flow."""
        ...

    def arun(self) -> Awaitable[Any]:
        """The awaitable that does it on the running event loop."""
        ...


Flow = Generator[Effect, Any, T]


def run(flow: Flow[T]) -> T:
    """Drive ``flow`` in this thread: each effect it yields is done blocking.

    Returns:
        What the flow returns.

    Raises:
        BaseException: Whatever the flow raises (an effect's exception it does not handle).
    """
    try:
        effect = flow.send(None)
        while True:
            try:
                result = effect.run()
            except BaseException as exc:  # raised inside the flow, at its ``yield``
                effect = flow.throw(exc)
            else:
                effect = flow.send(result)
    except StopIteration as stop:
        return stop.value


async def arun(flow: Flow[T]) -> T:
    """Drive ``flow`` on the running event loop: each effect it yields is awaited.

    Returns:
        What the flow returns.

    Raises:
        BaseException: As ``run``; a cancellation is raised inside the flow first.
    """
    try:
        effect = flow.send(None)
        while True:
            try:
                result = await effect.arun()
            except BaseException as exc:  # cancelled too: the flow records what it must
                effect = flow.throw(exc)
            else:
                effect = flow.send(result)
    except StopIteration as stop:
        return stop.value


class Do:
    """An effect given by its two forms: a blocking call and a coroutine function."""

    __slots__ = ("awaiting", "blocking")

    def __init__(self, blocking: Callable[[], Any], awaiting: Callable[[], Awaitable[Any]]):
        """``blocking()`` does it in this thread; ``awaiting()`` gives the awaitable."""
        self.blocking = blocking
        self.awaiting = awaiting

    def run(self) -> Any:
        """``blocking()``."""
        return self.blocking()

    def arun(self) -> Awaitable[Any]:
        """``awaiting()``."""
        return self.awaiting()


SleepFn = Callable[[float], Any]


class Sleep:
    """Wait ``seconds``: ``time.sleep`` blocking, ``asyncio.sleep`` on the loop.

    Tests inject their own: ``sleep`` (blocking, or async: its result is awaited on the loop)
    and ``asleep`` (the loop's, when it differs).
    """

    __slots__ = ("asleep", "seconds", "sleep")

    def __init__(
        self,
        seconds: float,
        sleep: SleepFn | None = None,
        asleep: Callable[[float], Awaitable[Any]] | None = None,
    ) -> None:
        """Wait ``seconds`` with the injected sleeps, if any (None: the real ones)."""
        self.seconds = seconds
        self.sleep = sleep
        self.asleep = asleep

    def run(self) -> None:
        """Block for ``seconds``."""
        (self.sleep or time.sleep)(self.seconds)

    async def arun(self) -> None:
        """Await ``seconds``."""
        if self.asleep is not None:
            await self.asleep(self.seconds)
        else:
            await asleep_with(self.sleep, self.seconds)


async def asleep_with(sleep: SleepFn | None, seconds: float) -> None:
    """Await an injected sleep (sync or async), or ``asyncio.sleep`` when none is given.

    Args:
        sleep: A test's sleep function, blocking or async; None for the real one.
        seconds: How long to wait.
    """
    if sleep is None:
        await asyncio.sleep(seconds)
        return
    result = sleep(seconds)
    if inspect.isawaitable(result):
        await result
