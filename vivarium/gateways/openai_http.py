"""OpenAI-compatible chat completions over plain HTTP: the fast transport of ``LiteLLMGateway``.

litellm spends about 4 ms of CPU on every call (request rewriting, logging objects, its own
cost bookkeeping). With 64 agents deciding at once on one event loop, that CPU, not the
server's latency, sets the length of a step. Servers that speak the OpenAI wire format (vLLM,
llama.cpp, Ollama's ``/v1``, LM Studio, LiteLLM's proxy) need none of it: this module sends the
body litellm's ``openai/`` provider sends and hands back the reply's JSON, through aiohttp
(async, ~0.2 ms per call) or ``http.client`` (blocking). Every failure becomes a ``WireError``
named like the OpenAI client's exceptions, so call records read the same whichever transport
made them.
"""

from __future__ import annotations

import asyncio
import atexit
import http.client
import json
import os
import threading
import urllib.request
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from vivarium._version import __version__
from vivarium.errors import squash
from vivarium.gateways.exchange import request_body
from vivarium.optional import require

# Model prefixes (litellm provider names) whose servers speak OpenAI's wire format.
OPENAI_COMPATIBLE = ("openai", "hosted_vllm")
_STATUS_NAMES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    409: "ConflictError",
    413: "RequestTooLargeError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    500: "InternalServerError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
}
_MAX_MESSAGE = 300


class WireError(Exception):
    """A failed HTTP exchange, already classified.

    ``kind`` and ``retryable`` are as the gateway's ``classify`` gives them, ``description``
    the text a call record shows, ``body`` the server's error body (secrets scrubbed) when it
    sent one. ``servers``: the servers that failed so, when a pool of several says which (for
    the error a user reads; never in a record).
    """

    def __init__(
        self,
        description: str,
        *,
        kind: str,
        retryable: bool,
        status_code: int | None = None,
        headers: Mapping[str, str] | None = None,
        body: str | None = None,
    ) -> None:
        """Classify one failure (``headers``: the reply's, for ``Retry-After``)."""
        super().__init__(description)
        self.description = description
        self.body = body
        self.kind = kind
        self.retryable = retryable
        self.status_code = status_code
        self.headers = {k.lower(): v for k, v in (headers or {}).items()}
        self.servers: tuple[str, ...] = ()


def wire_model(model: str, custom_llm_provider: str | None = None) -> str | None:
    """The model name to send when ``model`` is served over OpenAI's wire format, else None."""
    if custom_llm_provider is not None:
        return model if custom_llm_provider in OPENAI_COMPATIBLE else None
    provider, sep, name = model.partition("/")
    return name if sep and provider in OPENAI_COMPATIBLE and name else None


def chat_body(request: Any, model: str, extra: Mapping[str, Any] | None = None) -> bytes:
    """The JSON body of one chat completion: the fields litellm would send, in its order.

    It is ``exchange.request_body`` serialized, so the request a call record keeps is the
    body sent, field for field.
    """
    return encode_body(request_body(request, model, extra))


def encode_body(body: Mapping[str, Any]) -> bytes:
    """The bytes posted for a request body (``exchange.request_body``)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def chat_url(api_base: str) -> str:
    """The chat-completions endpoint under ``api_base``."""
    return api_base.rstrip("/") + "/chat/completions"


def behind_proxy(url: str) -> bool:
    """Whether the environment routes ``url`` through a proxy (HTTP(S)_PROXY, NO_PROXY).

    ``auto`` leaves such calls to litellm: the blocking client here does not speak to proxies.
    """
    if not _proxy_configured():  # the common case, checked cheaply on every call
        return False
    proxies = urllib.request.getproxies_environment()
    parts = urlsplit(url)

    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass_environment(parts.hostname or "", proxies)


def headers_for(api_key: str | None) -> dict[str, str]:
    """The request headers: JSON, and the key as a bearer token when there is one."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "User-Agent": f"vivarium/{__version__}",
    }
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


# -- replies and failures (shared by both clients) ----------------------------------------------
class WireReply(dict):  # type: ignore[type-arg]
    """A reply's JSON object as it came over the wire, the caller's secrets already scrubbed."""


def _scrubbed(data: bytes, secrets: Sequence[str]) -> bytes:
    """``data`` with every secret replaced by ``***`` (a server may echo the key it got)."""
    for secret in secrets:
        if secret and (raw := secret.encode()) in data:
            data = data.replace(raw, b"***")
    return data


def status_error(
    status: int, data: bytes, headers: Mapping[str, str], secrets: Sequence[str] = ()
) -> WireError:
    """An error reply, named and classified as the OpenAI client would name it.

    Its ``body`` is the reply's text with ``secrets`` scrubbed (a server may echo the key).
    """
    text = _scrubbed(data, secrets).decode("utf-8", "replace")
    try:
        payload = json.loads(text)
        error = payload.get("error") if isinstance(payload, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        if not isinstance(message, str):
            message = error if isinstance(error, str) else text
    except ValueError:
        message = text
    name = _STATUS_NAMES.get(status, "InternalServerError" if status >= 500 else "APIStatusError")
    description = f"{name}: {squash(message, _MAX_MESSAGE) or f'HTTP {status}'}"
    if status == 429:
        kind, retryable = "rate_limit", True
    elif status in (401, 403):
        kind, retryable = "auth", False
    elif status == 404:
        kind, retryable = "not_found", False
    elif status == 408:
        kind, retryable = "timeout", True
    elif 400 <= status < 500:
        kind, retryable = "bad_request", False
    else:
        kind, retryable = "server_error", True
    return WireError(
        description,
        kind=kind,
        retryable=retryable,
        status_code=status,
        headers=headers,
        body=text,
    )


def decode_reply(
    status: int, data: bytes, headers: Mapping[str, str], secrets: Sequence[str] = ()
) -> WireReply:
    """The reply's JSON object, or the ``WireError`` that says why there is none."""
    if status >= 400:
        raise status_error(status, data, headers, secrets)
    data = _scrubbed(data, secrets)
    try:
        reply = json.loads(data)
    except ValueError as exc:
        raise WireError(
            f"APIError (reply is not JSON): {exc}",
            kind="bad_response",
            retryable=True,
            status_code=status,
            body=data.decode("utf-8", "replace"),
        ) from None
    if not isinstance(reply, dict):
        raise WireError(
            f"APIError (reply is not JSON): a JSON {type(reply).__name__}, not an object",
            kind="bad_response",
            retryable=True,
            status_code=status,
        )
    return WireReply(reply)


def timeout_error(timeout: float) -> WireError:
    """The error of an attempt that got no reply within ``timeout`` seconds (retryable)."""
    return WireError(
        f"Timeout: Request timed out after {timeout:g} s",
        kind="timeout",
        retryable=True,
        status_code=408,
    )


def connection_error(exc: BaseException) -> WireError:
    """The error of a connection refused, reset or dropped (``exc``; retryable)."""
    detail = squash(exc, _MAX_MESSAGE) or type(exc).__name__
    return WireError(
        f"APIConnectionError (connection broken): {type(exc).__name__}: {detail}",
        kind="connection",
        retryable=True,
    )


# -- async: one aiohttp session per event loop ------------------------------------------------
_sessions: dict[asyncio.AbstractEventLoop, tuple[Any, AsyncIterator[None]]] = {}
_sessions_lock = threading.Lock()


async def _closing(loop: asyncio.AbstractEventLoop, session: Any) -> AsyncIterator[None]:
    """Parked at its ``yield`` for the session's life.

    ``loop.shutdown_asyncgens()`` (which ``asyncio.run`` calls) resumes it, and it closes the
    session before the loop goes.
    """
    try:
        yield
    finally:
        with _sessions_lock:
            if _sessions.get(loop, (None,))[0] is session:
                del _sessions[loop]
        await session.close()


async def _session() -> Any:
    aiohttp = require("aiohttp")

    loop = asyncio.get_running_loop()
    entry = _sessions.get(loop)
    if entry is not None and not entry[0].closed:
        return entry[0]
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
        # Honour HTTP(S)_PROXY / NO_PROXY as the OpenAI client does, but only when one is set:
        # aiohttp then looks the proxy up in a worker thread on every request.
        trust_env=_proxy_configured(),
    )
    keeper = _closing(loop, session)
    with _sessions_lock:
        for closed in [other for other in _sessions if other.is_closed()]:
            del _sessions[closed]  # a loop closed without shutting its generators down
        _sessions[loop] = (session, keeper)

    await keeper.__anext__()  # registers it with the loop's async generators
    return session


def _proxy_configured() -> bool:
    names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
    return any(os.environ.get(name) or os.environ.get(name.lower()) for name in names)


async def apost(
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    timeout: float,
    secrets: Sequence[str] = (),
) -> WireReply:
    """POST one chat completion on the running loop; the reply's JSON or a ``WireError``."""
    aiohttp = require("aiohttp")

    session = await _session()
    try:
        async with session.post(
            url, data=body, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as reply:
            data = await reply.read()
            status, reply_headers = reply.status, dict(reply.headers)
    except TimeoutError:  # aiohttp's timeouts derive from it
        raise timeout_error(timeout) from None
    except (aiohttp.ClientError, OSError) as exc:
        raise connection_error(exc) from None
    return decode_reply(status, data, reply_headers, secrets)


def _close_sessions_at_exit() -> None:
    """Close sessions of loops still alive at exit (Vivarium's own runs in a daemon thread)."""
    with _sessions_lock:
        entries = list(_sessions.items())
    for loop, (session, _keeper) in entries:
        if session.closed or loop.is_closed():
            continue
        try:
            if loop.is_running():
                asyncio.run_coroutine_threadsafe(session.close(), loop).result(timeout=2)
            else:
                loop.run_until_complete(session.close())
        except Exception:  # exiting anyway: never turn a clean exit into a traceback
            pass


atexit.register(_close_sessions_at_exit)


# -- blocking: one keep-alive connection per thread and server --------------------------------
_local = threading.local()


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str, bool]:
    """(connection, path, reused) for ``url`` on this thread."""
    parts = urlsplit(url)
    key = (parts.scheme, parts.hostname, parts.port)
    pool: dict[tuple[Any, ...], http.client.HTTPConnection] = _local.__dict__.setdefault("pool", {})
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    conn = pool.get(key)
    if conn is not None:
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn, path, True
    host = parts.hostname or "localhost"
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(host, parts.port, timeout=timeout)
    else:
        conn = http.client.HTTPConnection(host, parts.port, timeout=timeout)
    pool[key] = conn
    return conn, path, False


def _drop(url: str) -> None:
    parts = urlsplit(url)
    conn = _local.__dict__.get("pool", {}).pop((parts.scheme, parts.hostname, parts.port), None)
    if conn is not None:
        conn.close()


def post(
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    timeout: float,
    secrets: Sequence[str] = (),
) -> WireReply:
    """POST one chat completion and wait; the reply's JSON or a ``WireError``.

    A kept-alive connection the server has since closed is retried once on a fresh one
    (nothing was answered, so nothing is lost or repeated from the server's point of view).
    """
    for _ in range(2):
        conn, path, reused = _connection(url, timeout)
        try:
            conn.request("POST", path, body=body, headers=dict(headers))
            reply = conn.getresponse()
            data = reply.read()
        except TimeoutError:
            _drop(url)
            raise timeout_error(timeout) from None
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
            _drop(url)
            if reused:
                continue
            raise connection_error(exc) from None
        except (http.client.HTTPException, OSError) as exc:
            _drop(url)
            raise connection_error(exc) from None
        if reply.will_close:
            _drop(url)
        return decode_reply(reply.status, data, dict(reply.headers), secrets)

    raise AssertionError("unreachable")  # pragma: no cover
