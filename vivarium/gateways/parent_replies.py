"""A fork's LLM calls answered from its parent's recording when they ask what the parent asked.

A fork (``Run.fork``) follows its own config from its fork step on; much of what its agents ask
there is often what the parent's agents asked (an agent the change has not reached yet, a
change that leaves most prompts alone). This layer, on top of the fork's gateway stack, serves
such a call from the parent's ``llm_calls``: matched by request key (the prompt, the tools, the
model, the sampling settings, the seed; ``vivarium.gateways.request_key``), each recorded call
served once, in the parent's order. Only a request the parent never made reaches the layers
below (the cassette, the retries, the model), so a fork costs calls only where it diverged.

A served call gives the parent's attempts again, failures included, as records of this run
marked ``cache_hit`` and ``source="parent"`` (the trace keeps them in ``llm_call_sources``):
the same reply, tokens and cost the parent had, so a fork whose change reaches no prompt makes
the very decisions its parent made, at no cost. A temperature or a seed the change gives is part
of the key: such a fork asks its model again, as it should.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from vivarium.gateways.base import ClosableGateway, GatewayBase, LLMRequest, LLMResponse
from vivarium.gateways.recorded import CallRow, replay_call
from vivarium.gateways.request_key import request_keys
from vivarium.protocols import implements

__all__ = ["PARENT", "ParentRepliesGateway"]

PARENT = "parent"
"""The ``source`` of a call served from a fork's parent's recording."""


class ParentRepliesGateway(GatewayBase):
    """Serves the calls a fork's parent recorded (by request key) before asking ``inner``."""

    def __init__(self, inner: Any, calls: Iterable[list[CallRow]]) -> None:
        """Keep the parent's calls (each one's attempts, in the parent's order).

        Args:
            inner: The fork's own stack, for every request the parent did not make.
            calls: The parent's recorded calls from the fork step on.
        """
        self.inner = inner
        # Read on the first request: an engine built only to re-execute recorded steps (a
        # resume, a fork's hand-over) answers from its own trace and never reads these.
        self._calls: Iterable[list[CallRow]] | None = calls
        self._left: dict[str | None, deque[list[CallRow]]] = {}
        self.served = 0
        for name in ("provider", "model"):  # what the stack below names, named here too
            if hasattr(inner, name):
                setattr(self, name, getattr(inner, name))

    def _take(self, request: LLMRequest) -> list[CallRow] | None:
        if self._calls is not None:
            calls, self._calls = self._calls, None
            for call in calls:
                self._left.setdefault(call[0].request_hash, deque()).append(call)
        for key in request_keys(request):
            queue = self._left.get(key)
            if queue:
                self.served += 1
                return queue.popleft()
        return None

    def complete(self, request: LLMRequest) -> LLMResponse:
        """The parent's reply to ``request`` if it made it, else the fork's stack's."""
        call = self._take(request)
        if call is None:
            return self.inner.complete(request)
        return replay_call(request, call, source=PARENT)

    async def acomplete(self, request: LLMRequest) -> LLMResponse:
        """``complete`` for the event loop."""
        call = self._take(request)
        if call is None:
            return await self.inner.acomplete(request)
        return replay_call(request, call, source=PARENT)

    def close(self) -> None:
        """Close the stack below (this layer holds only what it read)."""
        if implements(self.inner, ClosableGateway):
            self.inner.close()
