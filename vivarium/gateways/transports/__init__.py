"""How ``LiteLLMGateway``'s attempts reach a server: one module per transport.

- ``direct``: OpenAI-compatible servers over plain HTTP (``openai_http``), one server or several
  (``servers.ServerPool``: least busy first, failover). The default for ``openai/`` models with
  an ``api_base``.
- ``via_litellm``: ``litellm.completion`` for every provider litellm knows.
- ``litellm_router``: litellm's ``Router`` when several servers share the calls of a model that
  goes through litellm.

A transport prepares a model before its first call (``prepare``: imports, checks, warm-up, off
the event loop) and gives, for each request, a ``Sending``: the effect of sending it (blocking or
awaited, see ``effects``) and the body the server received. The gateway makes the one attempt
around it (the clock, the reply read back, the call record, the classified failure), the same
whichever transport sent it; ``explain`` lets a transport add what only it knows to a failure's
text. Transports hold no settings: they read the gateway's (an ``Endpoint``) at each call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from vivarium.gateways.base import LLMRequest

LOCAL_API_KEY = "sk-local"
"""The key sent to a local server when none is given (OpenAI-compatible servers want one)."""


class Sending:
    """One attempt ready to go: how to send it, and the body the server received.

    An effect (``effects.Effect``): ``run`` sends blocking, ``arun`` on the event loop.
    """

    __slots__ = ("asend", "send", "sent")

    def __init__(
        self,
        send: Callable[[], Any],
        asend: Callable[[], Awaitable[Any]],
        sent: Callable[[], dict[str, Any]],
    ) -> None:
        """``send()`` and ``asend()`` post the request; ``sent()`` gives the body that went.

        ``sent`` is asked after the send, or when it failed (litellm builds its body as it
        sends: before, the request as asked stands for it).
        """
        self.send = send
        self.asend = asend
        self.sent = sent

    def run(self) -> Any:
        """Send, blocking; the server's reply."""
        return self.send()

    def arun(self) -> Awaitable[Any]:
        """Send on the event loop; the awaitable of the server's reply."""
        return self.asend()


class Endpoint(Protocol):
    """The settings a transport reads, at each call, from its gateway (``LiteLLMGateway``)."""

    api_base: str | None
    api_bases: tuple[str, ...]
    timeout: float
    custom_llm_provider: str | None
    extra: dict[str, Any]
    transport: str
    cooldown: float

    def key(self) -> str | None:
        """The API key, in clear (for the request alone)."""
        ...

    def secrets(self) -> list[str]:
        """Every text no record, error or reply may show (the key, the environment's keys)."""
        ...

    def wire_body(self, request: LLMRequest, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` as it goes over the wire (a forced tool as a JSON schema, if so set)."""
        ...


class Transport(Protocol):
    """What the gateway asks of a transport (see the module docstring)."""

    def prepare(self, endpoint: Endpoint, model: str) -> None:
        """Do now what the first call of ``model`` would otherwise do on the event loop."""
        ...

    def sending(self, endpoint: Endpoint, request: LLMRequest) -> Sending:
        """The send of one attempt at ``request``."""
        ...

    def explain(self, exc: BaseException, text: str) -> str:
        """The text of a failure of this transport's (``text``, or what it knows better)."""
        ...
