"""The provider of a gateway stack for real models: one attempt per call, by the right transport.

``LiteLLMGateway`` is the one gateway for real models, whatever carries the call
(``transports``): models on OpenAI-compatible servers (``openai/<name>`` with an ``api_base``:
vLLM, llama.cpp, Ollama's ``/v1``, proxies) go directly over HTTP by default
(``transport="auto"``: ``transports.direct``), for a twentieth of litellm's CPU per call;
everything else, and everything with ``transport="litellm"``, goes through litellm
(``transports.via_litellm``). Several servers (``api_base`` a list) share the calls, least busy
first, and a call a server fails moves to another: ``servers.ServerPool`` directly, litellm's
``Router`` (``transports.litellm_router``) through litellm.

Whatever the transport, an attempt is the same (``_attempt``): the clock, the reply read back
as an ``LLMResponse`` (``replies``), its call record with the body the server received
(``exchange``), and any failure turned into an ``LLMCallError`` that says what failed
(``failures.classify``: rate limits, server errors, timeouts and broken connections are
retryable, with the server's ``Retry-After``). litellm and the OpenAI client under it would
retry silently; here neither does. The retry layer above (``retry.RetryGateway``, composed by
``stack``) retries, and the rate limit layer between them admits each attempt.

``litellm`` is never imported by ``import vivarium.gateways``, and never on the event loop
(``litellm_lib``): ``prepare(models)``, called when a run's gateway is built, imports it for
models that go through it or that its price map can price, and notes the others as unpriced; a
model not prepared is prepared before its first call's clock starts (in a worker thread for
async calls).

The API key is held in a ``secrecy.Secret`` and scrubbed from every error text, record,
exception and raw reply, so it never reaches a trace, a cassette or a log.

With ``forced_tool_format="json_schema"`` a request that forces a tool goes out as a JSON
schema of the tool's parameters instead, and its reply comes back as a call of the tool
(``forced_schema``: for servers whose chat template cannot call tools); either transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

from vivarium.errors import ConfigError, squash
from vivarium.gateways.base import (
    CallRecord,
    GatewayBase,
    LLMCallError,
    LLMRequest,
    LLMResponse,
    cancelled_record,
    current_attempt,
    record_call,
)
from vivarium.gateways.effects import Do, Flow, arun, run
from vivarium.gateways.failures import classify, failure
from vivarium.gateways.forced_schema import FORCED_TOOL_FORMATS, forced_function, schema_body
from vivarium.gateways.litellm_lib import Pricing, import_litellm, in_price_map
from vivarium.gateways.openai_http import behind_proxy, wire_model
from vivarium.gateways.provenance import LITELLM_PROVIDER
from vivarium.gateways.replies import normalize, parse_arguments
from vivarium.gateways.secrecy import Secret, env_secrets, scrub
from vivarium.gateways.servers import DEFAULT_COOLDOWN_S, ServerPool
from vivarium.gateways.transports import LOCAL_API_KEY, Transport
from vivarium.gateways.transports.direct import DirectTransport, aiohttp_available
from vivarium.gateways.transports.litellm_router import RouterTransport
from vivarium.gateways.transports.via_litellm import LiteLLMTransport
from vivarium.settings import (
    DEFAULT_FORCED_TOOL_FORMAT,
    DEFAULT_TIMEOUT_S,
    DEFAULT_TRANSPORT,
    server_urls,
)

__all__ = ["LOCAL_API_KEY", "TRANSPORTS", "LiteLLMGateway", "classify", "parse_arguments", "scrub"]

TRANSPORTS = ("auto", "litellm", "direct")


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
        timeout: float = DEFAULT_TIMEOUT_S,
        custom_llm_provider: str | None = None,
        extra: dict[str, Any] | None = None,
        transport: str = DEFAULT_TRANSPORT,
        cooldown: float = DEFAULT_COOLDOWN_S,
        forced_tool_format: str = DEFAULT_FORCED_TOOL_FORMAT,
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
        bases = server_urls(api_base, check=False)  # one URL, several, or URLs with commas
        if api_base is not None and not bases:
            raise ValueError("api_base: give at least one server URL")
        if api_key is None and bases:
            api_key = LOCAL_API_KEY  # OpenAI-compatible local servers want some non-empty key
        # The first server stands for all where one URL is asked for (a proxy check, litellm
        # alone); ``api_bases`` names every one, and a pool or a router spreads the calls.
        self.api_base = bases[0] if bases else None
        self.api_bases = bases
        self.cooldown = cooldown
        several = len(bases) > 1
        self._direct = DirectTransport(ServerPool(bases, cooldown) if several else None)
        self._litellm = RouterTransport() if several else LiteLLMTransport()
        self._api_key = Secret(api_key)
        self._pricing = Pricing()
        self._prepared: set[str] = set()  # models whose imports and pricing are settled
        self._prepare_lock = threading.Lock()

        self.timeout = timeout
        self.custom_llm_provider = custom_llm_provider
        self.extra = dict(extra or {})
        self.transport = transport
        self.forced_tool_format = forced_tool_format

    def __repr__(self) -> str:
        """Where calls go, with the key hidden."""
        where = list(self.api_bases) if self.servers is not None else self.api_base
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
        return self._direct.pool

    def __getstate__(self) -> dict[str, Any]:
        """The state to pickle: the key in clear (for worker processes), nothing prepared."""
        # Pickling (e.g. to worker processes) keeps the key; __repr__ and errors never show it.
        state = dict(self.__dict__)
        state["_api_key"] = self._api_key.get()
        # Another process has imported nothing yet: it prepares its models again.
        state.pop("_prepare_lock")
        state["_prepared"] = set()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore a pickled gateway, its key hidden again."""
        state = dict(state)
        state["_api_key"] = Secret(state.get("_api_key"))
        state["_prepare_lock"] = threading.Lock()
        self.__dict__.update(state)

    # -- what the transports read (``transports.Endpoint``) ----------------------------------
    def key(self) -> str | None:
        """The API key in clear, for the request alone (never shown anywhere else)."""
        return self._api_key.get()

    def secrets(self) -> list[str]:
        """Every text no record, error or reply may show: the key, and the environment's keys."""
        key = self._api_key.get()
        return ([key] if key else []) + env_secrets()

    def wire_body(self, request: LLMRequest, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` as it goes over the wire: a forced tool as a JSON schema, if so configured."""
        function = forced_function(request, self.forced_tool_format)
        return body if function is None else schema_body(body, function)

    # -- which transport -----------------------------------------------------------------------
    def direct_model(self, model: str) -> str | None:
        """The model name to send over the direct transport, or None when litellm calls.

        Raises:
            LLMCallError: Of kind ``config``: ``transport="direct"`` and a model it cannot send.
        """
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
        if name is None or self.api_base is None or self.extra or not aiohttp_available():
            return None
        return None if any(behind_proxy(base) for base in self.api_bases) else name

    def transport_for(self, model: str) -> Transport:
        """The transport that carries calls of ``model`` (see ``direct_model``)."""
        return self._direct if self.direct_model(model) is not None else self._litellm

    # -- before the first call -----------------------------------------------------------------
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
                transport = self.transport_for(model)
            except LLMCallError:  # a model the direct transport cannot send: the call says so
                transport = self._direct
            direct = transport is self._direct
            loaded = False
            if not direct or in_price_map(model):
                with contextlib.suppress(LLMCallError):  # not installed: litellm calls say so
                    loaded = import_litellm() is not None
            if not loaded:  # cost unknown (a local model needs no litellm at all)
                self._pricing.unpriced.add(model)
            if loaded or direct:  # litellm's: the provider check, a Router, the warm-up
                transport.prepare(self, model)
            self._prepared.add(model)

    def _prepare_for_call(self, model: str) -> None:
        """``_prepare_model`` for a call: a configuration error stops the run, as a call error.

        Raises:
            LLMCallError: Of kind ``config`` (the model names no provider, ...).
        """
        try:
            self._prepare_model(model)
        except ConfigError as exc:
            raise LLMCallError(str(exc), kind="config") from None

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
                if reason is not None and self.servers is not None:
                    self.servers.cool(index, reason)  # said once (a ServerWarning), then cooled
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
    def complete(self, request: LLMRequest) -> LLMResponse:
        """Make one attempt at ``request`` (blocking) and record it.

        Raises:
            LLMCallError: The attempt failed (classified, scrubbed of secrets, on record).
        """
        return run(self._attempt(request))

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        """Make one attempt at ``request`` on the event loop and record it.

        An attempt cancelled in flight (an agent timeout, a stopping run) is recorded too.

        Raises:
            LLMCallError: The attempt failed (classified, scrubbed of secrets, on record).
        """
        return await arun(self._attempt(request))

    def _attempt(self, request: LLMRequest) -> Flow[LLMResponse]:
        """One attempt, by the model's transport: sent, timed, read back and on record."""
        model = request.model
        if model not in self._prepared:  # imports off the event loop, before the clock starts
            prepare = functools.partial(self._prepare_for_call, model)
            yield Do(prepare, functools.partial(asyncio.to_thread, prepare))
        transport = self.transport_for(model)
        sending = transport.sending(self, request)
        attempt = current_attempt()
        started = time.perf_counter()
        try:
            reply = yield sending
        except asyncio.CancelledError:  # an agent timeout, a stopping run
            record_call(cancelled_record(request, attempt, _ms_since(started), sending.sent()))
            raise
        except Exception as exc:  # every provider error is classified, none escapes raw
            raise failure(
                exc,
                request,
                attempt,
                _ms_since(started),
                sending.sent(),
                secrets=self.secrets(),
                servers=self.api_bases,
                explain=transport.explain,
            ) from None
        response = self.normalize(reply, request, _ms_since(started))
        record_call(CallRecord.from_response(response, attempt, sending.sent()))
        return response

    def normalize(self, reply: Any, request: LLMRequest, latency_ms: float) -> LLMResponse:
        """A transport's ``reply`` to ``request`` as this gateway returns it (``replies``)."""
        return normalize(
            reply,
            request,
            latency_ms,
            price=self._pricing.price,
            secrets=self.secrets,
            forced_tool_format=self.forced_tool_format,
        )


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000
