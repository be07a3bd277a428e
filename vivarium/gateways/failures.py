"""A failed attempt, classified: what failed, whether to retry, its record and its one-line error.

Every transport's failure (litellm's exceptions, the OpenAI client's under it, the direct
transport's ``WireError``) becomes one ``LLMCallError`` whose ``kind`` says what failed and
whose ``retryable`` tells the retry layer whether trying again may help: rate limits (with the
server's ``Retry-After``), server errors, timeouts, broken connections and replies that are not
JSON are retryable; a request the server rejects (4xx) is not. The attempt's call record keeps
the error and the server's error body, scrubbed of every secret.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from vivarium.errors import squash
from vivarium.gateways.base import CallRecord, LLMCallError, LLMRequest, record_call
from vivarium.gateways.exchange import error_reply
from vivarium.gateways.openai_http import WireError
from vivarium.gateways.secrecy import scrub
from vivarium.gateways.servers import not_found_hint

MAX_ERROR_CHARS = 300
_NO_RETRY_STATUS = {400, 401, 402, 403, 404, 405, 409, 413, 422}


def retry_after(exc: BaseException) -> float | None:
    """Seconds from ``Retry-After`` / ``retry-after-ms`` if the provider sent them."""
    candidates: list[Any] = [getattr(exc, "litellm_response_headers", None)]
    response = getattr(exc, "response", None)
    candidates.append(getattr(response, "headers", None))
    candidates.append(getattr(exc, "headers", None))
    context = exc.__context__
    candidates.append(getattr(getattr(context, "response", None), "headers", None))
    for headers in candidates:
        if not headers:
            continue
        try:
            ms = headers.get("retry-after-ms")
            if ms is not None:
                return float(ms) / 1000
            seconds = headers.get("retry-after")
            if seconds is not None:
                return float(seconds)
        except (TypeError, ValueError, AttributeError):
            continue
    value = getattr(exc, "retry_after", None)
    if not isinstance(value, int | float):
        # litellm's Router, every server cooling down: it can answer once they are back
        value = getattr(exc, "cooldown_time", None)
    return float(value) if isinstance(value, int | float) else None


def classify(exc: BaseException) -> tuple[str, bool, int | None, str]:
    """(kind, retryable, status code, short description) for an exception from a call."""
    if isinstance(exc, WireError):  # the direct transport classified it already
        return exc.kind, exc.retryable, exc.status_code, exc.description
    name = type(exc).__name__
    message = str(exc)
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    for prefix in (f"litellm.{name}: ", f"{name}: ", "OpenAIException - "):
        message = message.replace(prefix, "", 1) if message.startswith(prefix) else message
    message = message.replace("OpenAIException - ", "")
    if name == "Timeout" or "Timeout" in name or isinstance(exc, TimeoutError):
        return "timeout", True, status, f"{name}: {message}"
    if name == "RateLimitError" or status == 429:
        return "rate_limit", True, 429, f"{name}: {message}"
    if "Expecting value" in message or "JSONDecodeError" in message:
        # a 200 reply whose body is not JSON: litellm reports it as a server error
        cut = message.split(", Received response")[0]
        return "bad_response", True, status, f"{name} (reply is not JSON): {cut}"
    if "Connection error" in message or name == "APIConnectionError":
        return "connection", True, status, f"{name} (connection broken): {message}"
    if isinstance(exc, ConnectionError | OSError) or "httpx" in type(exc).__module__:
        return "connection", True, status, f"{name}: {message}"
    if name in ("AuthenticationError", "PermissionDeniedError") or status in (401, 403):
        return "auth", False, status, f"{name}: {message}"
    if name == "NotFoundError" or status == 404:
        return "not_found", False, status, f"{name}: {message}"
    if name in ("BadRequestError", "ContextWindowExceededError", "UnsupportedParamsError"):
        return "bad_request", False, status, f"{name}: {message}"
    if status in _NO_RETRY_STATUS:
        return "bad_request", False, status, f"{name}: {message}"
    if name in ("InternalServerError", "ServiceUnavailableError", "BadGatewayError", "APIError"):
        return "server_error", True, status, f"{name}: {message}"
    if status is not None and status >= 500:
        return "server_error", True, status, f"{name}: {message}"
    return "error", False, status, f"{name}: {message}"


def error_body(exc: BaseException) -> str | None:
    """The body of the server's error reply, when the failure has one (else None)."""
    if isinstance(exc, WireError):
        return exc.body or None
    for source in (exc, exc.__context__):
        response = getattr(source, "response", None)
        try:
            text = getattr(response, "text", None)
        except Exception:  # litellm's stand-in responses may have no body to read
            text = None
        if isinstance(text, str) and text:
            return text
    return None


def failure(
    exc: BaseException,
    request: LLMRequest,
    attempt: int,
    latency_ms: float,
    sent: dict[str, Any] | None,
    *,
    secrets: list[str],
    servers: Sequence[str],
    explain: Callable[[BaseException, str], str] | None = None,
) -> LLMCallError:
    """Record the failed ``attempt`` at ``request`` and give the error to raise for it.

    Args:
        exc: What the transport raised.
        request: The request attempted.
        attempt: The attempt's number.
        latency_ms: How long it took to fail.
        sent: The body the server received (None: unknown).
        secrets: Texts no record or error may show.
        servers: The servers a 404 names, when the failure does not say which answered it.
        explain: The transport's word on the text (litellm's Router: which server failed).

    Returns:
        The classified ``LLMCallError``, scrubbed, one line.
    """
    kind, retryable, status, description = classify(exc)
    text = squash(scrub(description, secrets), MAX_ERROR_CHARS)
    if explain is not None:
        text = explain(exc, text)
    record_call(
        CallRecord(
            attempt=attempt,
            model=request.model,
            request_hash=request.request_hash(),
            latency_ms=round(latency_ms, 3),
            error=text,
            request=sent,
            reply=error_reply(scrub(error_body(exc) or description, secrets)),
        )
    )
    wait = retry_after(exc) if kind == "rate_limit" else None
    if kind == "not_found":  # the user's error names the server (no call record does)
        named = (exc.servers if isinstance(exc, WireError) else ()) or servers
        text = f"{text} {not_found_hint(named)}"
    return LLMCallError(text, kind=kind, retryable=retryable, status_code=status, retry_after=wait)
