"""The LLM gateway protocol, its request/response models, and per-decision call records.

Gateways stack like wrappers (cache -> rate limit -> retry -> provider). Every layer takes and
returns the same pydantic models, so any stack is itself a gateway. Users call ``chat`` /
``achat`` with keyword arguments; layers implement ``complete`` / ``acomplete`` on an
``LLMRequest``.

Call records: the engine opens ``collect_calls()`` around each agent's decision (a context
variable, so concurrent decisions never mix); gateways add one ``CallRecord`` per attempt with
``record_call``. The engine writes them to the ``llm_calls`` table.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from vivarium.errors import VivariumError
from vivarium.seeding import canonical_json, digest


class ToolCall(BaseModel):
    """A tool call from the model, with its arguments parsed (or the reason they could not be)."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw_arguments: str | None = None
    parse_error: str | None = None


class Usage(BaseModel):
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

    def request_hash(self) -> str:
        """SHA-256 of the canonical JSON of every field: same request, same key, any process."""
        return digest(canonical_json(self.model_dump(mode="json")))


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


class LLMCallError(VivariumError):
    """A failed LLM call. ``retryable`` says whether trying again may help.

    A ``fatal`` error (a replay miss) stops the run instead of becoming a recorded fallback:
    going on would silently produce a different run than the one being replayed.
    """

    fatal = False

    def __init__(
        self,
        message: str,
        *,
        kind: str = "error",
        retryable: bool = False,
        status_code: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable
        self.status_code = status_code
        self.retry_after = retry_after


@runtime_checkable
class LLMGateway(Protocol):
    """Anything with ``chat`` and ``achat`` returning an ``LLMResponse`` is a gateway."""

    def chat(self, **request: Any) -> LLMResponse: ...

    async def achat(self, **request: Any) -> LLMResponse: ...


class GatewayBase:
    """Keyword ``chat``/``achat`` on top of ``complete``/``acomplete`` (what layers implement)."""

    def complete(self, request: LLMRequest) -> LLMResponse:
        raise NotImplementedError

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        return self.complete(request)

    def chat(self, **request: Any) -> LLMResponse:
        return self.complete(LLMRequest(**request))

    async def achat(self, **request: Any) -> LLMResponse:
        return await self.acomplete(LLMRequest(**request))


# -- call records ------------------------------------------------------------------------------
@dataclass(slots=True)
class CallRecord:
    """One attempt at one LLM call, as written to the ``llm_calls`` table."""

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

    def row(self, agent_idx: int) -> tuple[Any, ...]:
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
        )

    @classmethod
    def from_response(cls, response: LLMResponse, attempt: int) -> CallRecord:
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
        )


_calls: ContextVar[list[CallRecord] | None] = ContextVar("vivarium_llm_calls", default=None)
_attempt: ContextVar[int] = ContextVar("vivarium_llm_attempt", default=1)


@contextlib.contextmanager
def collect_calls() -> Iterator[list[CallRecord]]:
    """Collect the call records made in this context (one agent's decision)."""
    records: list[CallRecord] = []
    token = _calls.set(records)
    try:
        yield records
    finally:
        _calls.reset(token)


def start_collecting() -> tuple[list[CallRecord], Any]:
    """``collect_calls`` without the context manager, for the per-decision hot path."""
    records: list[CallRecord] = []
    return records, _calls.set(records)


def stop_collecting(token: Any) -> None:
    _calls.reset(token)


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
    token = _attempt.set(n)
    try:
        yield
    finally:
        _attempt.reset(token)
