"""The direct transport: OpenAI-compatible servers over plain HTTP, one or several.

Models on OpenAI-compatible servers (``openai/<name>`` or ``hosted_vllm/<name>`` with an
``api_base``: vLLM, llama.cpp, Ollama's ``/v1``, proxies) are posted the body litellm's
``openai`` provider would send (``exchange.request_body``) through ``openai_http``, for a
twentieth of litellm's CPU per call, and answer with the same normalized reply and the same
error records. Several servers share the calls through a ``servers.ServerPool`` (least busy
first; a call a server fails moves on to another). The reply is scrubbed of the one secret the
server was given, the key.
"""

from __future__ import annotations

import functools
import os

from vivarium.gateways.base import LLMRequest
from vivarium.gateways.exchange import request_body
from vivarium.gateways.openai_http import (
    apost,
    chat_url,
    encode_body,
    headers_for,
    post,
    wire_model,
)
from vivarium.gateways.servers import ServerPool
from vivarium.gateways.transports import Endpoint, Sending
from vivarium.optional import available

OPENAI_API_BASE = "https://api.openai.com/v1"


class DirectTransport:
    """Posts each attempt over HTTP: to ``api_base``, or to the least busy of ``pool``.

    Attributes:
        pool: The servers when there are several, else None.
    """

    def __init__(self, pool: ServerPool | None = None) -> None:
        """Send to one server (``pool`` None: the gateway's ``api_base``) or to a pool."""
        self.pool = pool

    def prepare(self, endpoint: Endpoint, model: str) -> None:
        """Import aiohttp (~0.5 s) now, not in the first call."""
        aiohttp_available()

    def sending(self, endpoint: Endpoint, request: LLMRequest) -> Sending:
        """The blocking and async posts of ``request``, and the body they send."""
        model = wire_model(request.model, endpoint.custom_llm_provider)
        base = endpoint.api_base or os.environ.get("OPENAI_BASE_URL") or OPENAI_API_BASE
        key = endpoint.key() or os.environ.get("OPENAI_API_KEY")
        extra = endpoint.extra if endpoint.transport == "direct" else None
        sent = endpoint.wire_body(request, request_body(request, model, extra))
        body = encode_body(sent)
        headers, timeout, secrets = headers_for(key), endpoint.timeout, (key,) if key else ()
        if (pool := self.pool) is not None:  # several servers: least busy, with failover
            return Sending(
                lambda: pool.post(body, headers, timeout, secrets),
                lambda: pool.apost(body, headers, timeout, secrets),
                lambda: sent,
            )
        url = chat_url(base)
        return Sending(
            lambda: post(url, body, headers, timeout, secrets),
            lambda: apost(url, body, headers, timeout, secrets),
            lambda: sent,
        )

    def explain(self, exc: BaseException, text: str) -> str:
        """The text as it is: a ``WireError`` says all (a pool names its servers on it)."""
        return text


@functools.cache
def aiohttp_available() -> bool:
    """Whether aiohttp imports (litellm depends on it; checked rather than assumed)."""
    return available("aiohttp")
