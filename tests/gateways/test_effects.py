"""One flow, two drivers (``gateways.effects``): the blocking and the event-loop forms of every
layer are the same code, so they must agree on everything: results, errors, records, waits."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vivarium.gateways.base import (
    CallRecord,
    GatewayBase,
    LLMCallError,
    LLMRequest,
    LLMResponse,
    collect_calls,
    current_attempt,
    record_call,
)
from vivarium.gateways.cache import CachingGateway
from vivarium.gateways.effects import Do, Flow, Sleep, arun, run
from vivarium.gateways.mock import MockLLMGateway
from vivarium.gateways.ratelimit import RateLimitedGateway, RateLimiter
from vivarium.gateways.retry import RetryGateway

REQUEST = LLMRequest(model="m", messages=[{"role": "user", "content": "hi"}])


class Boom(Exception):
    """An effect's failure the flow handles."""


class Fatal(Exception):
    """An effect's failure the flow lets through."""


class Value:
    """An effect that gives ``value`` (or raises it, an exception) in either form."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def run(self) -> Any:
        if isinstance(self.value, BaseException):
            raise self.value
        return self.value

    async def arun(self) -> Any:
        await asyncio.sleep(0)
        return self.run()


def scripted(script: list[Any], seen: list[Any]) -> Flow[Any]:
    """Yields each scripted effect; notes what came back; gives up on a ``Fatal``."""
    total = 0
    for item in script:
        try:
            got = yield Value(item)
        except Boom as exc:
            seen.append(("boom", str(exc)))
            continue
        seen.append(("got", got))
        total += got
    return total


items = st.one_of(
    st.integers(-5, 5),
    st.text(max_size=3).map(Boom),
    st.text(max_size=3).map(Fatal),
)


@settings(max_examples=200, deadline=None)
@given(script=st.lists(items, max_size=8))
def test_both_drivers_run_a_flow_alike(script: list[Any]) -> None:
    outcomes = []
    for drive in (run, lambda flow: asyncio.run(arun(flow))):
        seen: list[Any] = []
        try:
            outcome: Any = ("returned", drive(scripted(script, seen)))
        except Fatal as exc:
            outcome = ("raised", str(exc))
        outcomes.append((outcome, seen))
    assert outcomes[0] == outcomes[1]
    # computed apart: what the flow should have seen, up to the first Fatal
    expected: list[Any] = []
    for item in script:
        if isinstance(item, Fatal):
            assert outcomes[0][0] == ("raised", str(item))
            break
        expected.append(("boom", str(item)) if isinstance(item, Boom) else ("got", item))
    else:
        assert outcomes[0][0] == ("returned", sum(i for i in script if isinstance(i, int)))
    assert outcomes[0][1] == expected


def test_the_blocking_driver_starts_no_loop_and_works_inside_one() -> None:
    """A notebook cell runs in a loop: a blocking call made there must not start another."""

    async def cell() -> LLMResponse:
        assert asyncio.get_running_loop()
        return RetryGateway(MockLLMGateway(seed=3)).complete(REQUEST)

    inside = asyncio.run(cell())
    assert inside == RetryGateway(MockLLMGateway(seed=3)).complete(REQUEST)


_where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="outside")


def _context_flow(seen: list[str]) -> Flow[None]:
    token = _where.set("inside")
    try:
        yield Do(lambda: seen.append(_where.get()), _note_async(seen))
    finally:
        _where.reset(token)


def _note_async(seen: list[str]) -> Any:
    async def note() -> None:
        seen.append(_where.get())

    return note


def test_effects_see_the_context_the_flow_set() -> None:
    seen: list[str] = []
    run(_context_flow(seen))
    asyncio.run(arun(_context_flow(seen)))
    assert seen == ["inside", "inside"] and _where.get() == "outside"


def test_a_cancellation_is_raised_inside_the_flow() -> None:
    handled: list[str] = []

    def flow() -> Flow[None]:
        try:
            yield Sleep(60)
        except asyncio.CancelledError:
            handled.append("cancelled")
            raise

    async def main() -> None:
        task = asyncio.ensure_future(arun(flow()))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert handled == ["cancelled"]


# -- the layers: the same records, waits and outcome either way ----------------------------------
class Scripted(GatewayBase):
    """A provider that fails as scripted (a kind, or None for a reply), one record an attempt."""

    def __init__(self, script: list[str | None]) -> None:
        self.script = itertools.cycle(script or [None])

    def complete(self, request: LLMRequest) -> LLMResponse:
        fault = next(self.script)
        record = CallRecord(attempt=current_attempt(), model=request.model, request_hash="h")
        if fault is not None:
            record.error = fault
            record_call(record)
            raise LLMCallError(fault, kind=fault, retryable=fault == "server_error")
        record_call(record)
        return LLMResponse(content=f"attempt {current_attempt()}", model=request.model)


faults = st.lists(st.sampled_from([None, "server_error", "bad_request"]), max_size=6)


def _stack(script: list[str | None], path: Path, sleeps: list[float]) -> Any:
    limiter = RateLimiter(requests_per_minute=1000, sleep=sleeps.append, asleep=_asleep(sleeps))
    limited = RateLimitedGateway(Scripted(script), limiter)
    retried = RetryGateway(limited, retries=3, backoff=0.25, sleep=sleeps.append)
    return CachingGateway(retried, path, mode="auto")


def _asleep(sleeps: list[float]) -> Any:
    async def asleep(seconds: float) -> None:
        sleeps.append(seconds)

    return asleep


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(script=faults)
def test_a_stack_answers_alike_blocking_and_on_the_loop(
    tmp_path: Path, script: list[str | None]
) -> None:
    runs = []
    for blocking in (True, False):
        folder = tmp_path / f"{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        sleeps: list[float] = []
        stack = _stack(script, folder / "c.cassette", sleeps)
        with collect_calls() as records:
            try:
                if blocking:
                    outcome: Any = stack.complete(REQUEST).content
                else:
                    outcome = asyncio.run(stack.acomplete(REQUEST)).content
            except LLMCallError as exc:
                outcome = (type(exc).__name__, str(exc), exc.kind)
        stack.close()
        runs.append((outcome, [(r.attempt, r.error) for r in records], sleeps))
    assert runs[0] == runs[1]
    # computed apart: attempts until a reply, a failure that is not retried, or the 4th try
    expected = []
    for attempt, fault in enumerate(itertools.islice(itertools.cycle(script or [None]), 4), 1):
        expected.append((attempt, fault))
        if fault != "server_error":
            break
    assert runs[0][1] == expected
    # a wait after each retryable failure but the last attempt's (the limiter never waits here)
    assert len(runs[0][2]) == sum(1 for a, f in expected if f == "server_error" and a < 4)
