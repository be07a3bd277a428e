"""The provider of a gateway stack for real models: one attempt per call, through LiteLLM.

Models on OpenAI-compatible servers (``openai/<name>`` with an ``api_base``: vLLM, llama.cpp,
Ollama's ``/v1``, proxies) are called directly over HTTP by default (``transport="auto"``, see
``openai_http``): the same request body, the same normalized reply and the same error records
as through litellm, for a twentieth of its CPU per call. ``transport="litellm"`` forces litellm.
Several servers (``api_base`` a list) share the calls, least busy first, and a call a server
fails moves to another: ``servers.ServerPool`` directly, LiteLLM's ``Router`` through litellm.

LiteLLM (and the OpenAI client under it) would retry silently; here both are told not to. This
gateway makes one attempt per call, writes its call record, and turns any failure into an
``LLMCallError`` that says what failed (``classify``: rate limits, server errors, timeouts and
broken connections are retryable, with the server's ``Retry-After``); the retry layer above it
(``retry.RetryGateway``, composed by ``stack``) retries, and the rate limit layer between them
admits each attempt. ``litellm`` is never imported by ``import vivarium.gateways``, and never on the event
loop: importing it takes seconds, during which every call in flight would stall (and be
recorded as slow, or time out without reaching the server). ``prepare(models)``, called when a
run's gateway is built, imports it for models that go through litellm or that its price map can
price, and notes the others as unpriced; a model not prepared is prepared before its first
call's clock starts (in a worker thread for async calls).

The API key is held in a ``_Secret`` and scrubbed from every error text, record, exception and
raw reply, so it never reaches a trace, a cassette or a log.

Each attempt's record carries the body the server received (``exchange``): direct calls post
exactly that dict; through litellm it is the body litellm handed its client, caught with a
``logger_fn`` just before the request goes out. A failed attempt keeps the server's error body.

With ``forced_tool_format="json_schema"`` a request that forces a tool goes out as a JSON
schema of the tool's parameters instead, and its reply comes back as a call of the tool
(``forced_schema``: for servers whose chat template cannot call tools); either transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import json
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from vivarium.errors import ConfigError, MissingDependency, squash
from vivarium.gateways.base import (
    CallRecord,
    GatewayBase,
    LLMCallError,
    LLMRequest,
    LLMResponse,
    ToolCall,
    Usage,
    cancelled_record,
    current_attempt,
    record_call,
)
from vivarium.gateways.exchange import error_reply, request_body, sent_body
from vivarium.gateways.forced_schema import (
    FORCED_TOOL_FORMATS,
    as_tool_call,
    forced_function,
    schema_body,
)
from vivarium.gateways.openai_http import (
    WireError,
    WireReply,
    apost,
    behind_proxy,
    chat_url,
    encode_body,
    headers_for,
    post,
    wire_model,
)
from vivarium.gateways.provenance import LITELLM_PROVIDER
from vivarium.gateways.servers import DEFAULT_COOLDOWN_S, ServerPool, not_found_hint
from vivarium.optional import available, require

LOCAL_API_KEY = "sk-local"
OPENAI_API_BASE = "https://api.openai.com/v1"
TRANSPORTS = ("auto", "litellm", "direct")
_MAX_ERROR_CHARS = 300
_litellm: Any = None
_import_lock = threading.Lock()


def _import_litellm() -> Any:
    """Import litellm once, quietly: local cost map (no network), no telemetry, no banners."""
    global _litellm
    if _litellm is not None:
        return _litellm
    with _import_lock:
        if _litellm is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            try:
                litellm = require("litellm")
            except MissingDependency as exc:  # the run's LLM cannot be reached: say how to fix
                raise LLMCallError(str(exc), kind="config") from None
            litellm.telemetry = False
            litellm.suppress_debug_info = True
            litellm.set_verbose = False
            for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
                logging.getLogger(name).setLevel(logging.ERROR)
            _litellm = litellm
    return _litellm


@functools.cache
def _price_map_names() -> frozenset[str] | None:
    """Model names in litellm's bundled price map, read without importing litellm.

    Reading the map takes ~0.1 s against 3-4 s for the import. None when litellm or its map
    file is not there.
    """
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "model_prices_and_context_window_backup.json"
        try:
            with open(path, encoding="utf-8") as fh:
                return frozenset(json.load(fh))
        except (OSError, ValueError):
            continue
    return None


def _in_price_map(model: str) -> bool:
    """Whether litellm could price ``model`` (``openai/gpt-4o-mini`` is ``gpt-4o-mini``).

    When the map cannot be read, only litellm can tell: True if it is installed.
    """
    names = _price_map_names()
    if names is None:
        return importlib.util.find_spec("litellm") is not None
    return model in names or model.partition("/")[2] in names


class _Secret:
    """A string that never shows itself in a repr, a str or a pickle-free debug dump."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None) -> None:
        self._value = value

    def get(self) -> str | None:
        return self._value

    def __repr__(self) -> str:
        return "***" if self._value else "None"

    __str__ = __repr__


def _env_secrets() -> list[str]:
    """Values of API-key-like environment variables (providers' keys litellm may send)."""
    found = []
    for name, value in os.environ.items():
        upper = name.upper()
        if value and len(value) >= 8 and ("API_KEY" in upper or upper.endswith("_TOKEN")):
            found.append(value)
    return found


def scrub(text: str, secrets: list[str]) -> str:
    """Replace every occurrence of each secret with ``***`` (longest first)."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


# -- errors ------------------------------------------------------------------------------------
_NO_RETRY_STATUS = {400, 401, 402, 403, 404, 405, 409, 413, 422}


def _retry_after(exc: BaseException) -> float | None:
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


# -- replies -----------------------------------------------------------------------------------
def parse_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """Tool-call arguments as a dict, and why not when they cannot be (never raises).

    ``strict=False`` accepts raw newlines inside JSON strings, which small models emit.
    """
    if isinstance(raw, dict):
        return raw, None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    try:
        value = _LENIENT.decode(raw) if isinstance(raw, str) else json.loads(raw, strict=False)
    except (TypeError, ValueError) as exc:
        return {}, squash(f"arguments are not valid JSON: {exc}", 200)
    if not isinstance(value, dict):
        return {}, f"arguments are JSON {type(value).__name__}, not an object"
    return value, None


# One decoder for every reply: ``json.loads(..., strict=False)`` builds a new one each call.
_LENIENT = json.JSONDecoder(strict=False)


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and math.isfinite(value) else 0


class LiteLLMGateway(GatewayBase):
    """Any provider LiteLLM supports, e.g. ``openai/<name>`` on a local OpenAI-compatible server.

    One attempt per call: a failure raises an ``LLMCallError`` whose ``retryable`` says whether
    the retry layer should try again (rate limits, with the server's ``Retry-After``; 5xx,
    timeouts, broken connections and replies that are not JSON) or not (4xx). Used alone, a
    call is never retried; ``stack.build_gateway`` puts it under the retry layer.
    """

    provider = LITELLM_PROVIDER  # where its replies come from (``provenance``)

    def __init__(
        self,
        api_base: str | Sequence[str] | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        custom_llm_provider: str | None = None,
        extra: dict[str, Any] | None = None,
        transport: str = "auto",
        cooldown: float = DEFAULT_COOLDOWN_S,
        forced_tool_format: str = "tool_choice",
    ) -> None:
        """Say where calls go and how.

        Args:
            api_base: The server's base URL (``http://127.0.0.1:8080/v1``); None for the
                provider's own. A local server without ``api_key`` gets a placeholder key.
                Several URLs: each call goes to the least busy server, and moves on to
                another when one fails (``servers.ServerPool`` directly, LiteLLM's
                ``Router`` through litellm).
            api_key: Never shown in a repr, an error, a record or a reply.
            timeout: Seconds one attempt may take.
            custom_llm_provider: Passed to litellm as is.
            extra: Passed to ``litellm.completion`` as is (e.g. ``{"drop_params": True}``);
                with ``transport="direct"`` merged into the request body instead.
            transport: ``"auto"`` calls ``openai/`` models with an ``api_base`` (and no
                ``extra``, and no proxy configured for it) directly over HTTP and everything
                else through litellm; ``"litellm"`` always uses litellm; ``"direct"`` always
                goes direct (``openai/`` or ``hosted_vllm/`` models only; blocking calls then
                ignore proxy settings).
            cooldown: Seconds a server that failed is tried only after the others (several
                servers only).
            forced_tool_format: How a request that forces a tool is sent: ``"tool_choice"``
                as it is; ``"json_schema"`` without tools, its reply constrained to the
                tool's parameters and read back as a call of the tool (``forced_schema``:
                for servers whose chat template cannot call tools).

        Raises:
            ValueError: An unknown transport or forced tool format, or an empty list of
                servers.
        """
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, not {transport!r}")
        if forced_tool_format not in FORCED_TOOL_FORMATS:
            raise ValueError(
                f"forced_tool_format must be one of {', '.join(FORCED_TOOL_FORMATS)}, "
                f"not {forced_tool_format!r}"
            )
        bases = (api_base,) if isinstance(api_base, str) else tuple(api_base or ())
        if api_base is not None and not bases:
            raise ValueError("api_base: give at least one server URL")
        if api_key is None and bases:
            api_key = LOCAL_API_KEY  # OpenAI-compatible local servers want some non-empty key
        # The first server stands for all where one URL is asked for (a proxy check, litellm
        # alone); ``api_bases`` names every one, and a pool or a router spreads the calls.
        self.api_base = bases[0] if bases else None
        self.api_bases = bases
        self.cooldown = cooldown
        self._pool = ServerPool(bases, cooldown) if len(bases) > 1 else None
        self._routers: dict[str, Any] = {}  # model -> litellm's Router over the servers
        self._api_key = _Secret(api_key)
        self._unpriced: set[str] = set()
        self._prepared: set[str] = set()  # models whose imports and pricing are settled
        self._prepare_lock = threading.Lock()

        self.timeout = timeout
        self.custom_llm_provider = custom_llm_provider
        self.extra = dict(extra or {})
        self.transport = transport
        self.forced_tool_format = forced_tool_format
        self._last_server_failure: str | None = None  # through litellm's Router

    def __repr__(self) -> str:
        """Where calls go, with the key hidden."""
        where = list(self.api_bases) if self._pool is not None else self.api_base
        return (
            f"LiteLLMGateway(api_base={where!r}, api_key={self._api_key!r}, "
            f"timeout={self.timeout}, transport={self.transport!r})"
        )

    @property
    def servers(self) -> ServerPool | None:
        """The direct transport's servers when there are several, else None.

        The pool says how many calls each server has in flight, and counts its answers and
        failures: the trace does not say which server answered a call.
        """
        return self._pool

    def __getstate__(self) -> dict[str, Any]:
        """The state to pickle: the key in clear (for worker processes), nothing prepared."""
        # Pickling (e.g. to worker processes) keeps the key; __repr__ and errors never show it.
        state = dict(self.__dict__)
        state["_api_key"] = self._api_key.get()
        # Another process has imported nothing yet: it prepares its models again.
        state.pop("_prepare_lock")
        state["_prepared"] = set()
        state["_routers"] = {}  # they hold clients and locks: the other process builds its own
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore a pickled gateway, its key hidden again."""
        state = dict(state)
        state["_api_key"] = _Secret(state.get("_api_key"))
        state["_prepare_lock"] = threading.Lock()
        self.__dict__.update(state)

    # -- plumbing ----------------------------------------------------------------------------
    def _secrets(self) -> list[str]:
        key = self._api_key.get()
        return ([key] if key else []) + _env_secrets()

    def _wire_body(self, request: LLMRequest, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` as it goes over the wire: a forced tool as a JSON schema, if so configured."""
        function = forced_function(request, self.forced_tool_format)
        return body if function is None else schema_body(body, function)

    def _kwargs(self, request: LLMRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = dict(self.extra)
        kwargs.update(self._wire_body(request, request_body(request)))
        if self.api_base is not None:
            kwargs["api_base"] = self.api_base
        if self._api_key.get() is not None:
            kwargs["api_key"] = self._api_key.get()
        if self.custom_llm_provider is not None:
            kwargs["custom_llm_provider"] = self.custom_llm_provider
        kwargs.update(timeout=self.timeout, num_retries=0, max_retries=0)
        return kwargs

    def _direct_model(self, model: str) -> str | None:
        """The model name to send over the direct transport, or None when litellm calls."""
        if self.transport == "litellm":
            return None
        name = wire_model(model, self.custom_llm_provider)
        if self.transport == "direct":
            if name is None:
                raise LLMCallError(
                    f"transport='direct' speaks OpenAI's wire format: use an 'openai/<name>' "
                    f"model, not {model!r}",
                    kind="config",
                )
            return name
        if name is None or self.api_base is None or self.extra or not _aiohttp_available():
            return None
        return None if any(behind_proxy(base) for base in self.api_bases) else name

    def _direct_senders(self, request: LLMRequest, model: str) -> tuple[Any, Any, Any]:
        """(blocking, async) senders of a direct call, and what gives the body they send.

        They send the body litellm's openai provider sends, and scrub the reply of the one
        secret the server was given (the key).
        """
        url = chat_url(self.api_base or os.environ.get("OPENAI_BASE_URL") or OPENAI_API_BASE)
        key = self._api_key.get() or os.environ.get("OPENAI_API_KEY")
        extra = self.extra if self.transport == "direct" else None
        sent = self._wire_body(request, request_body(request, model, extra))
        body = encode_body(sent)
        headers, timeout, secrets = headers_for(key), self.timeout, (key,) if key else ()
        if (pool := self._pool) is not None:  # several servers: least busy, with failover
            return (
                lambda: pool.post(body, headers, timeout, secrets),
                lambda: pool.apost(body, headers, timeout, secrets),
                lambda: sent,
            )
        return (
            lambda: post(url, body, headers, timeout, secrets),
            lambda: apost(url, body, headers, timeout, secrets),
            lambda: sent,
        )

    def prepare(self, models: Iterable[str]) -> None:
        """Settle, before a run, what the first call of each model would do on the event loop.

        That is: import litellm (3-4 s) when the model goes through it or its price map can
        price it; otherwise note the model as unpriced, and litellm is never imported.

        Args:
            models: The models the run will call.

        Raises:
            ConfigError: A model names no provider litellm knows (``fake`` for
                ``openai/fake``), or litellm's Router over the servers cannot be built.
        """
        for model in models:
            self._prepare_model(model)

    def _prepare_model(self, model: str) -> None:
        if model in self._prepared:
            return
        with self._prepare_lock:
            if model in self._prepared:
                return
            try:
                direct = self._direct_model(model) is not None
            except LLMCallError:  # a model the direct transport cannot send: the call says so
                direct = True
            if not direct or _in_price_map(model):
                try:
                    _import_litellm()
                except LLMCallError:  # not installed: litellm calls say so; cost unknown
                    self._unpriced.add(model)
                else:
                    if not direct:
                        self._check_provider(model)
                    if not direct and len(self.api_bases) > 1:
                        self._routers[model] = self._make_router(model, self.api_bases)
                    if not direct and wire_model(model, self.custom_llm_provider) is not None:
                        self._warm_up(model)
            else:
                self._unpriced.add(model)  # a local model: no price, and no litellm needed
            if direct:
                _aiohttp_available()  # imports aiohttp (~0.5 s) now, not in the first call
            self._prepared.add(model)

    def _check_provider(self, model: str) -> None:
        """Fail now, in one line, when litellm cannot tell which provider serves ``model``.

        ``fake`` instead of ``openai/fake``: otherwise each call would fail as a bad request,
        recorded as the agent's fallback, or litellm's Router would not build.

        Raises:
            ConfigError: litellm knows no provider for ``model``.
        """
        try:
            _litellm.get_llm_provider(
                model, custom_llm_provider=self.custom_llm_provider, api_base=self.api_base
            )
        except Exception:
            hint = (
                f"for an OpenAI-compatible server at api_base, 'openai/{model}'"
                if self.api_base is not None
                else "e.g. 'openai/gpt-4o-mini'"
            )
            raise ConfigError(
                f"llm.model {model!r} names no provider litellm knows: prefix it with one ({hint})"
            ) from None

    def _warm_up(self, model: str) -> None:
        """One blocking and one async call through litellm to a throwaway local server.

        The server answers at once. On its first call litellm imports the OpenAI client and its provider
        code (~2 s, hundreds of modules): done here, that time is in no recorded latency and
        stalls no call in flight. Only for OpenAI-compatible models, which honour ``api_base``:
        nothing leaves this machine.
        """
        kwargs = self._kwargs(_warm_up_request(model))
        kwargs.update(api_key=LOCAL_API_KEY, timeout=30.0)
        with _CannedServer() as url:
            kwargs["api_base"] = url
            caller: Any = _litellm
            if model in self._routers:  # the router's own first call imports code of its own
                caller = self._make_router(model, (url,), api_key=LOCAL_API_KEY)
                kwargs = _for_router(kwargs, 1)
            with contextlib.suppress(Exception):  # a warm-up: a failure here changes nothing
                caller.completion(**kwargs)
            # A loop of its own, in a thread: the caller's thread may be running one (Jupyter).
            thread = threading.Thread(
                target=lambda: asyncio.run(_quietly(caller.acompletion(**kwargs))), daemon=True
            )
            thread.start()
            thread.join(timeout=60)

    def _make_router(self, model: str, bases: Sequence[str], api_key: str | None = None) -> Any:
        """LiteLLM's ``Router`` over ``bases``: one deployment of ``model`` per server.

        Least busy first; a server that fails once is cooled down for ``cooldown`` seconds;
        one attempt of ours tries each server at most once (the Router's retries move it to
        another server; ours, above, retry the whole attempt). litellm is imported already.
        """
        params: dict[str, Any] = {"model": model, "timeout": self.timeout, "max_retries": 0}
        key = api_key or self._api_key.get()
        if key is not None:
            params["api_key"] = key
        if self.custom_llm_provider is not None:
            params["custom_llm_provider"] = self.custom_llm_provider
        deployments = [
            {"model_name": model, "litellm_params": {**params, "api_base": base}} for base in bases
        ]
        try:
            return _litellm.Router(
                model_list=deployments,
                routing_strategy="least-busy",
                num_retries=len(bases) - 1,
                allowed_fails=0,
                cooldown_time=self.cooldown,
                retry_after=0,
                timeout=self.timeout,
            )
        except Exception as exc:  # litellm's own error: a traceback says nothing more
            detail = squash(scrub(f"{type(exc).__name__}: {exc}", self._secrets()), 300)
            raise ConfigError(
                f"cannot spread {model!r} over {len(bases)} servers with litellm's Router: {detail}"
            ) from None

    def _router_for(self, model: str) -> Any:
        """The Router for ``model`` (built by ``prepare``; built now if it was not)."""
        router = self._routers.get(model)
        if router is None:
            with self._prepare_lock:
                router = self._routers.get(model)
                if router is None:
                    _import_litellm()
                    router = self._routers[model] = self._make_router(model, self.api_bases)
        return router

    async def _aprepare_model(self, model: str) -> None:
        """``_prepare_model`` off the event loop.

        Concurrent first calls all wait for it before their clocks start, so no call is in
        flight while litellm is imported.
        """
        if model not in self._prepared:
            await asyncio.to_thread(self._prepare_for_call, model)

    def _prepare_for_call(self, model: str) -> None:
        """``_prepare_model`` for a call: a configuration error stops the run, as a call error.

        Raises:
            LLMCallError: Of kind ``config`` (the model names no provider, ...).
        """
        try:
            self._prepare_model(model)
        except ConfigError as exc:
            raise LLMCallError(str(exc), kind="config") from None

    def _price(self, reply_model: str, model: str, prompt: int, completion: int) -> float | None:
        """Cost from litellm's price map; None (unknown, not zero) for unpriced models.

        A failed look-up is remembered: litellm's price search costs about a millisecond,
        which would otherwise be paid again on every call to a local model. litellm is never
        imported here (this runs on the event loop): ``prepare`` imported it if the model
        can be priced.
        """
        names = [n for n in dict.fromkeys((model, reply_model)) if n not in self._unpriced]
        if not names:
            return None
        litellm = _litellm  # direct calls price with litellm's map too
        if litellm is None:  # the model was prepared as unpriced: cost unknown
            self._unpriced.update(names)
            return None
        for name in names:
            try:
                prompt_cost, completion_cost = litellm.cost_per_token(
                    model=name, prompt_tokens=prompt, completion_tokens=completion
                )
                return float(prompt_cost) + float(completion_cost)
            except Exception:  # unknown model or provider
                self._unpriced.add(name)
        return None

    def _normalize(self, reply: Any, request: LLMRequest, latency_ms: float) -> LLMResponse:
        choices = _get(reply, "choices") or []
        choice = choices[0] if choices else None
        message = _get(choice, "message")
        tool_calls = []
        for call in _get(message, "tool_calls") or []:
            function = _get(call, "function")
            raw = _get(function, "arguments")
            arguments, error = parse_arguments(raw)
            tool_calls.append(
                ToolCall(
                    id=_get(call, "id"),
                    name=str(_get(function, "name") or ""),
                    arguments=arguments,
                    raw_arguments=None if error is None else str(raw),
                    parse_error=error,
                )
            )
        usage = _get(reply, "usage")
        prompt = _int(_get(usage, "prompt_tokens"))
        completion = _int(_get(usage, "completion_tokens"))
        total = _int(_get(usage, "total_tokens")) or prompt + completion
        hidden = getattr(reply, "_hidden_params", None) or {}
        if "response_cost" in hidden:  # litellm has priced the reply already
            priced = hidden["response_cost"]
            cost = float(priced) if isinstance(priced, int | float) and priced > 0 else None
        else:
            cost = self._price(
                str(_get(reply, "model") or request.model), request.model, prompt, completion
            )

        content = _get(message, "content")
        finish = _get(choice, "finish_reason")
        response = LLMResponse(
            content=content if isinstance(content, str) else None,
            tool_calls=tool_calls,
            finish_reason=None if finish is None else str(finish),
            usage=Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total),
            cost=cost,
            latency_ms=round(latency_ms, 3),
            model=request.model,
            request_hash=request.request_hash(),
            raw=self._raw(reply),
        )
        function = forced_function(request, self.forced_tool_format)
        if function is not None:  # sent as a JSON schema: the content is the call's arguments
            return as_tool_call(response, function["name"], parse_arguments)
        return response

    def _raw(self, reply: Any) -> dict[str, Any] | None:
        if isinstance(reply, WireReply):  # plain JSON, scrubbed on arrival
            return reply
        try:
            data = reply.model_dump() if hasattr(reply, "model_dump") else dict(reply)
            text = json.dumps(data, default=str)
        except Exception:
            return None
        return json.loads(scrub(text, self._secrets()))

    def _failure(
        self,
        exc: BaseException,
        request: LLMRequest,
        attempt: int,
        latency_ms: float,
        sent: dict[str, Any] | None,
    ) -> LLMCallError:
        kind, retryable, status, description = classify(exc)
        secrets = self._secrets()
        text = squash(scrub(description, secrets), _MAX_ERROR_CHARS)
        if len(self.api_bases) > 1 and not isinstance(exc, WireError):  # litellm's Router
            if type(exc).__name__ != "RouterRateLimitError":
                self._last_server_failure = text
            elif self._last_server_failure is not None:
                # Every server cooling down: the servers' own failure says what is wrong (other
                # agents' failures keep cooling them, so an attempt may find none to try).
                text = squash(
                    "every server failed and is cooling down; the last failure: "
                    f"{self._last_server_failure}",
                    _MAX_ERROR_CHARS,
                )
        record_call(
            CallRecord(
                attempt=attempt,
                model=request.model,
                request_hash=request.request_hash(),
                latency_ms=round(latency_ms, 3),
                error=text,
                request=sent,
                reply=error_reply(scrub(_error_body(exc) or description, secrets)),
            )
        )
        retry_after = _retry_after(exc) if kind == "rate_limit" else None
        if kind == "not_found":  # the user's error names the server (no call record does)
            servers = (exc.servers if isinstance(exc, WireError) else ()) or self.api_bases
            text = f"{text} {not_found_hint(servers)}"
        return LLMCallError(
            text, kind=kind, retryable=retryable, status_code=status, retry_after=retry_after
        )

    def check_reachable(self) -> None:
        """Fail fast, in one line, when nothing listens at ``api_base``.

        A wrong port, a server not started yet: otherwise every call of the run would fail into
        a fallback ``noop``. Of several servers, one listening is enough: those that are not
        start the run cooled down (tried after the others, in case they come up).

        Raises:
            ConfigError: Nothing accepts a connection at ``api_base`` (at any of them).

        Warns:
            ServerWarning: A server of several accepts no connection (once per server).
        """
        found = [(i, base, self._unreachable(base)) for i, base in enumerate(self.api_bases)]
        reasons = [f"{base} ({reason})" for _, base, reason in found if reason is not None]
        if not reasons or len(reasons) < len(self.api_bases):
            for index, _, reason in found:
                if reason is not None and self._pool is not None:
                    self._pool.cool(index, reason)  # said once (a ServerWarning), then cooled
            return
        if len(reasons) == 1:
            raise ConfigError(f"cannot reach the LLM server at {reasons[0]}: is it running?")
        raise ConfigError(
            f"cannot reach any of the {len(reasons)} LLM servers: {'; '.join(reasons)}: "
            "are they running?"
        )

    def _unreachable(self, base: str) -> str | None:
        """Why nothing accepts a connection at ``base`` (None: something does, or a proxy)."""
        if behind_proxy(base):
            return None
        parts = urlsplit(base)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            with socket.create_connection((parts.hostname, port), timeout=min(self.timeout, 5)):
                return None
        except OSError as exc:
            return squash(exc.strerror or str(exc) or type(exc).__name__, 120)

    # -- calls -------------------------------------------------------------------------------
    def _sender(self, request: LLMRequest) -> tuple[Any, Any, Any]:
        """(blocking send, async send, sent body) for one request, each taking no arguments.

        The third gives the body the server received (after the send, or when it failed).
        """
        model = self._direct_model(request.model)
        if model is not None:
            return self._direct_senders(request, model)
        caller: Any = _import_litellm()
        kwargs = self._kwargs(request)
        if len(self.api_bases) > 1:  # several servers: the Router picks one, and moves on
            caller = self._router_for(request.model)
            kwargs = _for_router(kwargs, len(self.api_bases))
        caught: list[Any] = []
        theirs = kwargs.get("logger_fn")

        def catch(details: dict[str, Any]) -> None:
            # litellm calls it just before posting: the body, as handed to its client
            caught.append((details.get("additional_args") or {}).get("complete_input_dict"))
            if callable(theirs):
                theirs(details)

        kwargs["logger_fn"] = catch
        # Failing before litellm built its body, the call sent nothing: the request as asked.
        asked = self._wire_body(
            request, request_body(request, wire_model(request.model, self.custom_llm_provider))
        )

        def sent() -> dict[str, Any]:
            found = next((c for c in reversed(caught) if isinstance(c, dict)), None)
            return asked if found is None else self._scrubbed_body(sent_body(found))

        return lambda: caller.completion(**kwargs), lambda: caller.acompletion(**kwargs), sent

    def _scrubbed_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` without any secret (a provider's body could carry a key; none should)."""
        try:
            text = json.dumps(body, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            return body
        clean = scrub(text, self._secrets())
        return body if clean == text else json.loads(clean)

    def complete(self, request: LLMRequest) -> LLMResponse:
        """Make one attempt at ``request`` (blocking) and record it.

        Raises:
            LLMCallError: The attempt failed (classified, scrubbed of secrets, on record).
        """
        self._prepare_for_call(request.model)
        send, _, sent = self._sender(request)
        attempt = current_attempt()
        started = time.perf_counter()
        try:
            reply = send()
        except Exception as exc:  # every provider error is classified, none escapes raw
            raise self._failure(exc, request, attempt, _ms_since(started), sent()) from None
        response = self._normalize(reply, request, _ms_since(started))
        record_call(CallRecord.from_response(response, attempt, sent()))
        return response

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        """Make one attempt at ``request`` on the event loop and record it.

        An attempt cancelled in flight (an agent timeout, a stopping run) is recorded too.

        Raises:
            LLMCallError: The attempt failed (classified, scrubbed of secrets, on record).
        """
        await self._aprepare_model(request.model)
        _, send, sent = self._sender(request)
        attempt = current_attempt()
        started = time.perf_counter()
        try:
            reply = await send()
        except asyncio.CancelledError:  # an agent timeout, a stopping run
            record_call(cancelled_record(request, attempt, _ms_since(started), sent()))
            raise
        except Exception as exc:
            raise self._failure(exc, request, attempt, _ms_since(started), sent()) from None
        response = self._normalize(reply, request, _ms_since(started))
        record_call(CallRecord.from_response(response, attempt, sent()))
        return response


def _for_router(kwargs: dict[str, Any], servers: int) -> dict[str, Any]:
    """``kwargs`` of a litellm call, for a Router over ``servers`` servers.

    Where the call goes (server, key, provider) is each deployment's; ``num_retries`` is the
    Router's own (each server once), and the OpenAI client's ``max_retries`` stays 0.
    """
    kwargs = {k: v for k, v in kwargs.items() if k not in _DEPLOYMENT_PARAMS}
    kwargs["num_retries"] = servers - 1
    return kwargs


_DEPLOYMENT_PARAMS = frozenset({"api_base", "api_key", "custom_llm_provider"})


def _error_body(exc: BaseException) -> str | None:
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


def _warm_up_request(model: str) -> LLMRequest:
    """A request of the shape agents send (a tool, a forced choice).

    litellm imports some of its code only for requests that carry tools (~2 s more).
    """
    tool = {
        "type": "function",
        "function": {
            "name": "noop",
            "description": "Do nothing.",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    return LLMRequest(
        model=model,
        messages=[{"role": "user", "content": "."}],
        tools=[tool],
        tool_choice={"type": "function", "function": {"name": "noop"}},
        temperature=0.0,
        max_tokens=1,
        seed=0,
    )


async def _quietly(call: Any) -> None:
    with contextlib.suppress(Exception):
        await call


_CANNED_REPLY = json.dumps(
    {
        "id": "warm-up",
        "object": "chat.completion",
        "created": 0,
        "model": "warm-up",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
).encode()


class _CannedServer:
    """A chat-completions endpoint on 127.0.0.1 that answers every POST with ``_CANNED_REPLY``.

    For ``LiteLLMGateway._warm_up``; the context gives its base URL.
    """

    def __enter__(self) -> str:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(_CANNED_REPLY)))
                self.end_headers()
                self.wfile.write(_CANNED_REPLY)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000


@functools.cache
def _aiohttp_available() -> bool:
    return available("aiohttp")  # litellm depends on it; checked rather than assumed
