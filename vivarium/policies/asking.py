"""A policy's model call, written once for ``decide`` and ``adecide``: a reply, or why not.

An LLM policy's decision is a flow (``gateways.effects``): it yields ``Chat`` where it asks the
model, and ``decide`` drives it with ``gateway.chat``, ``adecide`` with ``gateway.achat`` on
the event loop. ``ask`` is the one place a call's failure is sorted: an outage (an
infrastructure failure after the gateway's retries, a replay that cannot answer) stops the run
(``stop_if_unavailable``); any other failure is the agent's, returned for the policy to record
as its fallback.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

from vivarium.gateways.base import AsyncGateway, LLMResponse, stop_if_unavailable
from vivarium.gateways.effects import Effect
from vivarium.protocols import implements


class Chat:
    """The effect of one model call: ``gateway.chat``, or ``achat`` on the event loop.

    A gateway with ``chat`` alone is still called on the loop, in a worker thread.
    """

    __slots__ = ("gateway", "request")

    def __init__(self, gateway: Any, request: dict[str, Any]) -> None:
        """Ask ``gateway`` with ``request``'s fields as keyword arguments."""
        self.gateway = gateway
        self.request = request

    def run(self) -> Any:
        """``gateway.chat(**request)``."""
        return self.gateway.chat(**self.request)

    async def arun(self) -> Any:
        """``gateway.achat(**request)`` (``chat`` in a worker thread when it has no ``achat``)."""
        if not implements(self.gateway, AsyncGateway):  # sync-only: still works, off the loop
            return await asyncio.to_thread(self.gateway.chat, **self.request)
        return await self.gateway.achat(**self.request)


def ask(
    gateway: Any, request: dict[str, Any]
) -> Generator[Effect, Any, tuple[LLMResponse | None, Exception | None]]:
    """Ask the model: ``(reply, None)``, or ``(None, the agent's failure)``.

    Raises:
        RunStoppingError: The failure is not the agent's (see ``stop_if_unavailable``).
    """
    try:
        return checked((yield Chat(gateway, request))), None
    except Exception as exc:
        stop_if_unavailable(exc)  # an outage stops the run; it is not the agent's doing
        return None, exc


def checked(reply: Any) -> LLMResponse:
    """Gateways return ``LLMResponse``; a dict from a hand-written one is accepted too."""
    return reply if isinstance(reply, LLMResponse) else LLMResponse.model_validate(reply)
