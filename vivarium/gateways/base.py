"""The LLM gateway protocol, its request/response models, and per-decision call records.

A gateway is anything with ``chat`` / ``achat`` (``LLMGateway``). A run's gateway is a stack of
wrappers, each one concept in its own module (cache -> retry -> rate limit -> provider, composed
in ``stack``): every layer takes and returns the same pydantic models and holds the layer below
as ``inner``, so any stack is itself a gateway. Users call ``chat`` / ``achat`` with keyword
arguments; layers implement ``complete`` / ``acomplete`` on an ``LLMRequest`` (``GatewayBase``)
and call the layer below with ``complete_via`` / ``acomplete_via``.

Call records: the engine opens ``collect_calls()`` around each agent's decision (a context
variable, so concurrent decisions never mix); gateways add one ``CallRecord`` per attempt with
``record_call``. The engine writes them to the ``llm_calls`` table.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from vivarium.errors import RunStoppingError, VivariumError
from vivarium.gateways.exchange import error_reply, request_body, response_reply, wire_reply
from vivarium.gateways.request_key import request_key
from vivarium.protocols import implements
from vivarium.settings import DEFAULT_ON_LLM_ERROR


class ToolCall(BaseModel):
    """A tool call from the model, with its arguments parsed (or the reason they could not be)."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw_arguments: str | None = None
    parse_error: str | None = None


class Usage(BaseModel):
    """Tokens one reply used, as the provider counted them (0 when it did not say)."""

    model_config = ConfigDict(extra="forbid")

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class LLMRequest(BaseModel):
    """A chat request. Its canonical hash keys the record/replay cache."""

    model_config = ConfigDict(extra="forbid")

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None

    def request_hash(self, version: int | None = None) -> str:
        """The request's key (``request_key``): the same in any process and any later version.

        The SHA-256 of the canonical JSON of the key version's fields, and of any other field
        only when it is not at its default: adding a field with a default changes no key.

        Args:
            version: The key version (None: the one this Vivarium writes); a cassette is read
                with the version it was written with.

        Returns:
            The hex digest that keys the cassette and names the request in call records.
        """
        return request_key(self, version)


class LLMResponse(BaseModel):
    """One normalized reply, whatever the provider."""

    model_config = ConfigDict(extra="forbid")

    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    cost: float | None = None
    latency_ms: float = 0.0
    model: str = ""
    request_hash: str = ""
    cache_hit: bool = False
    raw: dict[str, Any] | None = None


# Kinds of call failure that are the infrastructure's, not the agent's: the server is down or
# overloaded, refuses the credentials, does not know the model, or answers with something that
# is not a reply at all. Once the retries are spent, these stop the run (resumable) instead of
# being recorded as the agent's fallback. Every other kind (a request the server rejects as
# malformed, an unknown error) stays a recorded fallback, like a reply the policy cannot use.
INFRASTRUCTURE_KINDS = frozenset(
    {
        "connection",  # refused, reset, dropped mid-body
        "timeout",
        "server_error",  # 5xx
        "rate_limit",  # 429
        "bad_response",  # an HTTP body that is not JSON
        "auth",  # 401/403, missing credentials
        "not_found",  # a model (or endpoint) the server does not know
        "config",  # the client cannot be built (litellm missing, wrong transport)
        "cassette",  # the cassette file cannot be read or written
    }
)


class LLMCallError(VivariumError):
    """A failed LLM call.

    ``retryable`` says whether trying again may help; ``infrastructure`` whether the failure
    is the server's or the network's rather than the agent's (``kind``).

    One that is also a ``RunStoppingError`` (a replay miss, an outage past the retries) stops
    the run instead of becoming a recorded fallback.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str = "error",
        retryable: bool = False,
        status_code: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Describe one failure.

        Args:
            message: One line, free of secrets.
            kind: What failed (see ``INFRASTRUCTURE_KINDS``; ``"error"`` when unknown).
            retryable: Whether the retry layer may try again.
            status_code: The HTTP status, when there was one.
            retry_after: Seconds the server asked to wait before the next attempt.
        """
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable
        self.status_code = status_code
        self.retry_after = retry_after

    @property
    def infrastructure(self) -> bool:
        """True when the server or network failed (see ``INFRASTRUCTURE_KINDS``), not the agent."""
        return self.kind in INFRASTRUCTURE_KINDS


class LLMUnavailable(LLMCallError, RunStoppingError):
    """The LLM infrastructure failed after every retry (``on_llm_error="stop"``).

    It stops the run: the engine stops before committing the step, with status ``interrupted``,
    so that ``Run.resume()`` redoes the step once the server is back, instead of recording the
    outage as the agent's behaviour.
    """

    @classmethod
    def from_error(cls, exc: LLMCallError) -> LLMUnavailable:
        """The stop for ``exc``: its message, kind, status and ``retry_after``, not retryable."""
        return cls(
            str(exc),
            kind=exc.kind,
            retryable=False,
            status_code=exc.status_code,
            retry_after=exc.retry_after,
        )


# What the run does when the LLM infrastructure fails after the retries: "stop" (the default)
# or "fallback" (record a fallback noop, as for an unusable reply). The engine sets it around
# each decision; policies ask ``stops_run`` when a call fails.
ON_LLM_ERROR = ("stop", "fallback")
_on_llm_error: ContextVar[str] = ContextVar("vivarium_on_llm_error", default=DEFAULT_ON_LLM_ERROR)


def set_on_llm_error(mode: str) -> Any:
    """Set the mode for the current context; returns the token for ``reset_on_llm_error``."""
    if mode not in ON_LLM_ERROR:
        raise ValueError(f"on_llm_error must be one of {', '.join(ON_LLM_ERROR)}, not {mode!r}")
    return _on_llm_error.set(mode)


def reset_on_llm_error(token: Any) -> None:
    """Restore the mode ``set_on_llm_error`` replaced."""
    _on_llm_error.reset(token)


def current_on_llm_error() -> str:
    """The mode in force (the cassette asks: a run that stops retries a stored outage)."""
    return _on_llm_error.get()


def run_stopper(exc: BaseException) -> BaseException | None:
    """The error that must stop the run for ``exc``.

    None when ``exc`` is the agent's own failure (to be recorded as its fallback).

    A ``RunStoppingError`` stops it as it is; an infrastructure failure (after the retries)
    stops it as ``LLMUnavailable``, unless the run asked for fallbacks (``on_llm_error``).
    """
    if isinstance(exc, RunStoppingError):
        return exc
    if isinstance(exc, LLMCallError) and exc.infrastructure and _on_llm_error.get() == "stop":
        return LLMUnavailable.from_error(exc)
    return None


def stop_if_unavailable(exc: BaseException) -> None:
    """Raise what must stop the run (see ``run_stopper``); return when ``exc`` is the agent's.

    Policies call this first thing in the ``except`` clause around a model call, then record
    their fallback as before.
    """
    stopper = run_stopper(exc)
    if stopper is exc:
        raise exc
    if stopper is not None:
        raise stopper from None


@runtime_checkable
class LLMGateway(Protocol):
    """The gateway contract: ``chat`` and ``achat`` return one normalized ``LLMResponse``.

    Policies call nothing else. The keyword arguments are the fields of ``LLMRequest``
    (model, messages, tools, tool_choice, temperature, max_tokens, seed). A failed call raises
    ``LLMCallError``.
    """

    def chat(self, **request: Any) -> LLMResponse:
        """Send one chat request and wait for its reply (blocking)."""
        ...

    async def achat(self, **request: Any) -> LLMResponse:
        """Send one chat request and await its reply."""
        ...


# -- what a gateway may have besides: one small protocol each (``vivarium.protocols``) ---------
@runtime_checkable
class AsyncGateway(Protocol):
    """A gateway that can be awaited (``achat``).

    One with ``chat`` alone works too: an async decision then calls ``chat`` in a worker thread
    (``vivarium.policies.asking``).
    """

    async def achat(self, **request: Any) -> LLMResponse:
        """Send one chat request and await its reply."""
        ...


@runtime_checkable
class GatewayLayer(Protocol):
    """A layer of a stack (``GatewayBase``): the layer above calls ``complete``, not ``chat``."""

    def complete(self, request: LLMRequest) -> LLMResponse:
        """Answer ``request`` (blocking)."""
        ...


@runtime_checkable
class AsyncGatewayLayer(Protocol):
    """A layer of a stack that answers on the event loop (``acomplete``)."""

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        """Answer ``request`` on the event loop."""
        ...


@runtime_checkable
class WrappingGateway(Protocol):
    """A layer that wraps the gateway below it (``inner``; None: a replay-only cache)."""

    inner: Any


@runtime_checkable
class ProvidedGateway(Protocol):
    """A gateway that names the provider answering it (``"litellm"``), recorded with calls."""

    provider: str


@runtime_checkable
class ModelGateway(Protocol):
    """A gateway with a model of its own, used when a policy names none."""

    model: str


@runtime_checkable
class ClosableGateway(Protocol):
    """A gateway that holds something to let go of when the run ends (a cassette, clients)."""

    def close(self) -> None:
        """Let go of what the gateway holds."""
        ...


class GatewayBase:
    """Keyword ``chat``/``achat`` on top of ``complete``/``acomplete`` (what layers implement).

    A layer that wraps another keeps it as ``inner`` (see ``stack.layers``).
    """

    # A run's identity names a gateway by its type (``vivarium.experiment.digest``): it holds
    # connections and the process id, and what it answers is the run's ``llm`` settings.
    __identity__ = "type"

    def complete(self, request: LLMRequest) -> LLMResponse:
        """Answer ``request`` (blocking); every layer implements it."""
        raise NotImplementedError

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        """Answer ``request`` on the event loop (default: ``complete``, blocking the loop)."""
        return self.complete(request)

    def chat(self, **request: Any) -> LLMResponse:
        """``complete`` with the request's fields as keyword arguments.

        A decision a resume re-executes is answered from the trace instead (``answer_from``).
        """
        asked, recorded = self._asked(request)
        return self.complete(asked) if recorded is None else recorded()

    async def achat(self, **request: Any) -> LLMResponse:
        """``acomplete`` with the request's fields as keyword arguments (see ``chat``)."""
        asked, recorded = self._asked(request)
        return await self.acomplete(asked) if recorded is None else recorded()

    def request_of(self, fields: dict[str, Any]) -> LLMRequest:
        """The ``LLMRequest`` that ``chat``'s keyword arguments ask for (a gateway may fill in).

        Args:
            fields: ``chat``'s keyword arguments (a dict of its own, free to change).
        """
        return LLMRequest(**fields)

    def _asked(self, fields: dict[str, Any]) -> tuple[LLMRequest, Callable[[], LLMResponse] | None]:
        """The request, and its recorded outcome when a resume answers it (else None)."""
        asked = self.request_of(fields)
        answers = _recorded.get()
        return asked, None if answers is None else answers.take(asked)


class RecordedAnswers(Protocol):
    """What one decision's LLM calls answered when they were recorded (see ``answer_from``)."""

    def take(self, request: LLMRequest) -> Callable[[], LLMResponse] | None:
        """The recorded outcome of ``request`` (returns its reply or raises its error), or None.

        None: nothing of this request is left on record, and the gateway is asked.
        """
        ...


# The recorded calls of the decision being re-executed by a resume (a context variable, so
# concurrent decisions never mix): ``GatewayBase.chat``/``achat`` answer from them, so that the
# steps a run committed are re-executed with the very replies its agents had, sampled or not,
# with no server. See ``vivarium.gateways.recorded``.
_recorded: ContextVar[RecordedAnswers | None] = ContextVar("vivarium_recorded", default=None)


def answer_from(answers: RecordedAnswers | None) -> Any:
    """Answer the calls made in this context from ``answers``; returns the token to reset.

    The engine sets it around each decision of a step a resume re-executes; it is never set
    while a run records new steps.
    """
    return _recorded.set(answers)


def stop_answering(token: Any) -> None:
    """End what ``answer_from`` began (its token)."""
    _recorded.reset(token)


def complete_via(inner: LLMGateway | GatewayBase, request: LLMRequest) -> LLMResponse:
    """Call the layer below: with ``complete`` if it is a layer, else a plain ``chat`` gateway.

    Args:
        inner: The gateway a layer wraps.
        request: The request to send.

    Returns:
        The reply of ``inner``.
    """
    if implements(inner, GatewayLayer):
        return inner.complete(request)
    return inner.chat(**request.model_dump(exclude_none=True))


async def acomplete_via(inner: LLMGateway | GatewayBase, request: LLMRequest) -> LLMResponse:
    """``complete_via`` for the event loop (``acomplete``, else ``achat``).

    Args:
        inner: The gateway a layer wraps.
        request: The request to send.

    Returns:
        The reply of ``inner``.
    """
    if implements(inner, AsyncGatewayLayer):
        return await inner.acomplete(request)
    return await inner.achat(**request.model_dump(exclude_none=True))


class Call:
    """The effect of calling the layer below (``effects``): ``complete_via`` or ``acomplete_via``.

    Layers written as one flow yield it where the blocking form called ``complete_via`` and the
    async form awaited ``acomplete_via``.
    """

    __slots__ = ("inner", "request")

    def __init__(self, inner: LLMGateway | GatewayBase, request: LLMRequest) -> None:
        """Call ``inner`` with ``request``."""
        self.inner = inner
        self.request = request

    def run(self) -> LLMResponse:
        """``complete_via(inner, request)``."""
        return complete_via(self.inner, self.request)

    def arun(self) -> Awaitable[LLMResponse]:
        """``acomplete_via(inner, request)``."""
        return acomplete_via(self.inner, self.request)


# -- call records ------------------------------------------------------------------------------
@dataclass(slots=True)
class CallRecord:
    """One attempt at one LLM call, as written to the ``llm_calls`` table.

    ``request`` and ``reply`` are the attempt's text (see ``exchange``): the JSON body the
    server received and the reply it sent (or ``{"error": ...}``), never a key or a header.
    The trace stores them content-addressed; the cassette keeps them with the call.
    """

    attempt: int
    model: str
    request_hash: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost: float | None = None
    latency_ms: float | None = None
    cache_hit: bool = False
    finish_reason: str | None = None
    error: str | None = None
    request: dict[str, Any] | None = None
    reply: dict[str, Any] | None = None
    source: str | None = None
    """Where the reply came from when no layer of this run's stack made it: ``parent`` (a
    fork's parent's recording, ``vivarium.gateways.parent_replies``); None otherwise."""

    def row(self, agent_idx: int) -> tuple[Any, ...]:
        """The ``llm_calls`` row of this attempt for the agent at ``agent_idx``.

        A ``source``, when there is one, follows the texts (the writer keeps it beside the
        row, in ``llm_call_sources``).
        """
        if self.source is not None:
            return (*self._row(agent_idx), self.source)
        return self._row(agent_idx)

    def _row(self, agent_idx: int) -> tuple[Any, ...]:
        return (
            agent_idx,
            self.attempt,
            self.model,
            self.request_hash,
            self.prompt_tokens,
            self.completion_tokens,
            self.cost,
            self.latency_ms,
            1 if self.cache_hit else 0,
            self.finish_reason,
            self.error,
            self.request,
            self.reply,
        )

    @classmethod
    def from_response(
        cls, response: LLMResponse, attempt: int, request: dict[str, Any] | None = None
    ) -> CallRecord:
        """The record of a successful attempt (number ``attempt``) that gave ``response``.

        Args:
            response: The reply; its wire JSON (``raw``) gives the recorded reply when it
                has one, else the normalized fields do.
            attempt: The attempt's number.
            request: The body sent (``exchange.request_body``); None when unknown.
        """
        raw = response.raw
        return cls(
            attempt=attempt,
            model=response.model,
            request_hash=response.request_hash,
            prompt_tokens=response.usage.prompt_tokens,
            completion_tokens=response.usage.completion_tokens,
            cost=response.cost,
            latency_ms=response.latency_ms,
            cache_hit=response.cache_hit,
            finish_reason=response.finish_reason,
            request=request,
            reply=wire_reply(raw) if raw is not None else response_reply(response),
        )


_calls: ContextVar[list[CallRecord] | None] = ContextVar("vivarium_llm_calls", default=None)
_attempt: ContextVar[int] = ContextVar("vivarium_llm_attempt", default=1)
# How often each request hash was asked in this context: a decision that retries sends the
# same request again, and the cassette keeps each occurrence apart, so a replay sees the same
# sequence of outcomes (a timeout, then a reply) as the recording did.
_occurrences: ContextVar[dict[str, int] | None] = ContextVar("vivarium_llm_seen", default=None)
# (loop time, seconds) at which the engine cancels the current decision attempt, if it will.
_deadline: ContextVar[tuple[float, float] | None] = ContextVar("vivarium_deadline", default=None)


@contextlib.contextmanager
def collect_calls() -> Iterator[list[CallRecord]]:
    """Collect the call records made in this context (one agent's decision)."""
    records, token = start_collecting()
    try:
        yield records
    finally:
        stop_collecting(token)


def start_collecting() -> tuple[list[CallRecord], Any]:
    """``collect_calls`` without the context manager, for the per-decision hot path."""
    records: list[CallRecord] = []
    return records, (_calls.set(records), _occurrences.set({}))


def stop_collecting(token: Any) -> None:
    """End what ``start_collecting`` began (its token)."""
    calls, seen = token
    _occurrences.reset(seen)
    _calls.reset(calls)


def next_occurrence(key: str) -> int:
    """1 the first time ``key`` is asked in this decision, 2 the next, ... (1 outside one)."""
    seen = _occurrences.get()
    if seen is None:
        return 1
    n = seen[key] = seen.get(key, 0) + 1
    return n


@contextlib.contextmanager
def decision_deadline(seconds: float | None) -> Iterator[None]:
    """Say, for the calls made inside, that the engine cancels them after ``seconds``.

    ``seconds`` is the engine's agent timeout: a cancelled attempt is recorded with it as its
    reason.
    """
    if seconds is None:
        yield
        return
    token = _deadline.set((asyncio.get_running_loop().time() + seconds, seconds))
    try:
        yield
    finally:
        _deadline.reset(token)


def cancel_deadline() -> tuple[float, float] | None:
    """(loop time, seconds) of the agent timeout the current call runs under, if any."""
    return _deadline.get()


def cancel_reason() -> str | None:
    """Why the running call is being cancelled.

    Returns:
        The agent timeout when its deadline has passed, else None (the run is stopping, or
        the caller gave up).
    """
    deadline = _deadline.get()
    if deadline is None:
        return None
    at, seconds = deadline
    try:
        now = asyncio.get_running_loop().time()
    except RuntimeError:  # a blocking call in a worker thread: never cancelled by the timeout
        return None
    if now + 0.001 < at:  # asyncio may fire a timer up to its clock resolution early
        return None
    return f"cancelled: agent timeout after {seconds:g} s"


def cancelled_record(
    request: LLMRequest, attempt: int, latency_ms: float, sent: dict[str, Any] | None = None
) -> CallRecord:
    """The call record of an attempt cancelled in flight (its latency: until cancellation).

    ``sent`` is the body the provider sent (default: ``request`` as a body, its model as named).
    """
    reason = cancel_reason() or "cancelled"
    return CallRecord(
        attempt=attempt,
        model=request.model,
        request_hash=request.request_hash(),
        latency_ms=round(latency_ms, 3),
        error=reason,
        request=request_body(request) if sent is None else sent,
        reply=error_reply(reason),
    )


def record_call(record: CallRecord) -> None:
    """Add a call record to the current decision's list (a no-op outside ``collect_calls``)."""
    records = _calls.get()
    if records is not None:
        records.append(record)


def current_attempt() -> int:
    """The attempt number the retry layer is on (1 outside any retry layer)."""
    return _attempt.get()


@contextlib.contextmanager
def attempt_number(n: int) -> Iterator[None]:
    """Run the calls inside as attempt ``n`` (the retry layer sets it; records read it)."""
    token = set_attempt(n)
    try:
        yield
    finally:
        reset_attempt(token)


def set_attempt(n: int) -> Any:
    """``attempt_number`` without the context manager, for the per-call hot path.

    Returns:
        The token for ``reset_attempt``.
    """
    return _attempt.set(n)


def reset_attempt(token: Any) -> None:
    """Restore the attempt number ``set_attempt`` replaced."""
    _attempt.reset(token)
