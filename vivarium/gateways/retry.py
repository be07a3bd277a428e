"""The retry layer of a gateway stack, and the backoff rule it waits by.

``RetryGateway`` is the only place a call is retried: providers make one attempt and raise an
``LLMCallError`` that says whether trying again may help (``retryable``) and how long the
server asked to wait (``retry_after``). Each attempt runs under its attempt number
(``attempt_number``), so the provider's call record says which try it was; an attempt that failed
without a record of its own (a third-party gateway) is recorded here. Placed above the rate
limit layer, every attempt waits for the limiter again: retries count against the limit.
"""

from __future__ import annotations

from vivarium.errors import squash
from vivarium.gateways.base import (
    Call,
    CallRecord,
    GatewayBase,
    LLMCallError,
    LLMGateway,
    LLMRequest,
    LLMResponse,
    record_call,
    reset_attempt,
    set_attempt,
    start_collecting,
    stop_collecting,
)
from vivarium.gateways.effects import Flow, Sleep, SleepFn, arun, run
from vivarium.gateways.exchange import error_reply, request_body
from vivarium.seeding import digest
from vivarium.settings import DEFAULT_NUM_RETRIES

# How long the message of a call that failed after its retries may get (the provider's error
# text is cut to half of it).
MAX_GIVE_UP_CHARS = 600


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

    Args:
        attempt: The attempt that just failed, from 1.
        backoff: The wait after the first failure, in seconds; doubled after each one.
        max_backoff: The cap on the exponential part.
        key: What the jitter is derived from (the request hash).
        retry_after: Seconds the server asked to wait, if it did.
        max_retry_after: The most a server's ``Retry-After`` is honoured for.

    Returns:
        The delay in seconds (never negative).
    """
    base = min(max_backoff, backoff * 2 ** max(attempt - 1, 0))
    jitter = int(digest(f"{key}:{attempt}")[:4], 16) / 0xFFFF * 0.25
    delay = min(max_backoff, base * (1.0 + jitter))
    if retry_after is not None and retry_after > 0:
        delay = max(delay, min(retry_after, max_retry_after))
    return max(delay, 0.0)


def is_attempt_failure(exc: LLMCallError) -> bool:
    """Whether ``exc`` is a failed attempt at a call, which the retry layer retries and records.

    Two kinds of error are not, and pass through the layer as they are: a call that could not
    be made at all (kind ``"config"``: litellm missing, a model the transport cannot send), and
    the errors of the layers' own types (a cassette error, a replay miss, an outage that stops
    the run), whose type is what their catchers look at.

    Args:
        exc: An error raised by the layer below.

    Returns:
        True for a plain ``LLMCallError`` of any other kind.
    """
    return type(exc) is LLMCallError and exc.kind != "config"


def _failed_record(request: LLMRequest, attempt: int, exc: LLMCallError) -> CallRecord:
    """The record of a failed attempt the gateway below left none of (a third-party gateway).

    Its request is the one asked (that gateway's body is unknown), its reply the error.
    """
    error = f"{type(exc).__name__}: {exc}"
    return CallRecord(
        attempt=attempt,
        model=request.model,
        request_hash=request.request_hash(),
        error=error,
        request=request_body(request),
        reply=error_reply(error),
    )


def _pass_on(records: list[CallRecord]) -> None:
    for record in records:
        record_call(record)


class RetryGateway(GatewayBase):
    """Retry the gateway below on ``LLMCallError(retryable=True)``, with a deterministic backoff.

    A call that still fails after ``retries`` retries (or fails with an error that is not
    retryable) raises one ``LLMCallError`` of the same kind, status and ``retry_after``, whose
    message names the model and the number of attempts:
    ``openai/x: ServiceUnavailableError: ... (after 3 attempts)``.

    Attributes:
        inner: The gateway below (the rate limit layer, or a provider).
        retries: Retries after the first attempt.
        backoff: The first wait in seconds, doubled after each failure (see ``backoff_delay``).
        max_backoff: The cap on that wait.
        max_retry_after: The most a server's ``Retry-After`` is honoured for.
        sleep: An injected sleep (tests); None waits for real.
    """

    def __init__(
        self,
        inner: LLMGateway | GatewayBase,
        retries: int = DEFAULT_NUM_RETRIES,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        sleep: SleepFn | None = None,
        max_retry_after: float = 60.0,
    ) -> None:
        """Wrap ``inner``; see the class attributes for the arguments.

        Raises:
            ValueError: ``retries`` is negative.
        """
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self.inner = inner
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_retry_after = max_retry_after
        self.sleep = sleep

    def __repr__(self) -> str:
        """The layer and the stack below it (no secrets: each layer hides its own)."""
        return f"RetryGateway({self.inner!r}, retries={self.retries}, backoff={self.backoff})"

    def _delay(self, request_hash: str, attempt: int, exc: LLMCallError) -> float:
        return backoff_delay(
            attempt,
            backoff=self.backoff,
            max_backoff=self.max_backoff,
            key=request_hash,
            retry_after=exc.retry_after,
            max_retry_after=self.max_retry_after,
        )

    @staticmethod
    def _settle(
        request: LLMRequest, attempt: int, records: list[CallRecord], exc: LLMCallError
    ) -> None:
        """Pass a failed attempt's records on; add one when the layer below left none."""
        _pass_on(records)
        if not any(r.error for r in records):
            record_call(_failed_record(request, attempt, exc))

    @staticmethod
    def _give_up(error: LLMCallError, request: LLMRequest, attempts: int) -> LLMCallError:
        tries = "1 attempt" if attempts == 1 else f"{attempts} attempts"
        message = squash(f"{request.model}: {error} (after {tries})", MAX_GIVE_UP_CHARS)
        return LLMCallError(
            message,
            kind=error.kind,
            retryable=error.retryable,
            status_code=error.status_code,
            retry_after=error.retry_after,
        )

    def _after_failure(
        self, request: LLMRequest, attempt: int, records: list[CallRecord], exc: LLMCallError
    ) -> float:
        """Record a failed attempt and say how long to wait before the next one.

        Raises:
            LLMCallError: ``exc`` itself when it is not an attempt failure, else the give-up
                error when it is not retryable or was the last attempt.
        """
        if not is_attempt_failure(exc):
            _pass_on(records)
            raise exc
        self._settle(request, attempt, records, exc)
        if not exc.retryable or attempt > self.retries:
            raise self._give_up(exc, request, attempt) from None
        return self._delay(request.request_hash(), attempt, exc)

    def complete(self, request: LLMRequest) -> LLMResponse:
        """Send ``request`` down, again after each retryable failure (blocking waits).

        Raises:
            LLMCallError: The call failed on its last attempt, or with an error that is not
                retryable.
        """
        return run(self._attempts(request))

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        """``complete`` for the event loop: the waits between attempts are awaited.

        Raises:
            LLMCallError: As ``complete``.
        """
        return await arun(self._attempts(request))

    def _attempts(self, request: LLMRequest) -> Flow[LLMResponse]:
        """The attempt loop: send, and after a retryable failure wait and send again."""
        attempt = 1
        while True:
            # Each attempt's records are collected apart, to see whether the layer below
            # recorded its failure (the context managers' work, spelled out: a hot path).
            records, collecting = start_collecting()
            numbered = set_attempt(attempt)
            try:
                response = yield Call(self.inner, request)
            except LLMCallError as exc:
                failure: LLMCallError | None = exc
            except BaseException:  # interrupted, cancelled: the attempt made is on record
                reset_attempt(numbered)
                stop_collecting(collecting)
                _pass_on(records)
                raise
            else:
                failure = None
            reset_attempt(numbered)
            stop_collecting(collecting)
            if failure is None:
                _pass_on(records)
                return response
            yield Sleep(self._after_failure(request, attempt, records, failure), self.sleep)
            attempt += 1
