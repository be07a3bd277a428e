"""The litellm transport over several servers: litellm's ``Router``, one per model.

A Router holds one deployment of the model per server: each attempt goes to the least busy,
a server that fails is cooled down for the gateway's ``cooldown``, and one attempt of ours tries
each server at most once (the Router's retries move it to another server; ours, above, retry the
whole attempt). Where a call goes (server, key, provider) is each deployment's, so the call's
own keyword arguments leave them out.

When every server is cooling down, the Router's error says only that: the last failure of a
server (kept here) says what is wrong.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from vivarium.errors import ConfigError, squash
from vivarium.gateways.base import LLMRequest
from vivarium.gateways.failures import MAX_ERROR_CHARS
from vivarium.gateways.litellm_lib import import_litellm, loaded_litellm
from vivarium.gateways.secrecy import scrub
from vivarium.gateways.transports import LOCAL_API_KEY, Endpoint
from vivarium.gateways.transports.via_litellm import LiteLLMTransport, check_provider

_DEPLOYMENT_PARAMS = frozenset({"api_base", "api_key", "custom_llm_provider"})


class RouterTransport(LiteLLMTransport):
    """Each attempt is one call of the model's ``Router`` over the gateway's servers.

    Attributes:
        routers: model -> its Router (built by ``prepare``; built at the first call if not).
    """

    def __init__(self) -> None:
        """No Router yet."""
        self.routers: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._last_failure: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        """No Router and no lock: they hold clients; another process builds its own."""
        return {"_last_failure": self._last_failure}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A transport with no Router yet."""
        self.__init__()  # type: ignore[misc]
        self._last_failure = state.get("_last_failure")

    def prepare(self, endpoint: Endpoint, model: str) -> None:
        """Check ``model``'s provider, build its Router and make its first call now.

        Raises:
            ConfigError: litellm knows no provider for ``model``, or the Router cannot be built.
        """
        check_provider(endpoint, model)
        router = make_router(endpoint, model, endpoint.api_bases)
        with self._lock:
            self.routers[model] = router
        self.warm_up(endpoint, model)

    def route(self, endpoint: Endpoint, request: LLMRequest) -> tuple[Any, dict[str, Any]]:
        """The model's Router, and the call's keyword arguments without the deployment's."""
        _, kwargs = super().route(endpoint, request)
        return self._router_for(endpoint, request.model), for_router(
            kwargs, len(endpoint.api_bases)
        )

    def warm_up_call(self, endpoint: Endpoint, model: str, url: str) -> tuple[Any, dict[str, Any]]:
        """A Router of its own over the canned server: its first call imports code too."""
        _, kwargs = super().warm_up_call(endpoint, model, url)
        router = make_router(endpoint, model, (url,), api_key=LOCAL_API_KEY)
        return router, for_router(kwargs, 1)

    def explain(self, exc: BaseException, text: str) -> str:
        """The last server's failure when the Router finds every server cooling down.

        Other agents' failures keep cooling them, so an attempt may find none to try.
        """
        if type(exc).__name__ != "RouterRateLimitError":
            self._last_failure = text
        elif self._last_failure is not None:
            text = squash(
                f"every server failed and is cooling down; the last failure: {self._last_failure}",
                MAX_ERROR_CHARS,
            )
        return text

    def _router_for(self, endpoint: Endpoint, model: str) -> Any:
        """The Router for ``model`` (built by ``prepare``; built now if it was not)."""
        router = self.routers.get(model)
        if router is None:
            with self._lock:
                router = self.routers.get(model)
                if router is None:
                    import_litellm()
                    router = self.routers[model] = make_router(endpoint, model, endpoint.api_bases)
        return router


def for_router(kwargs: dict[str, Any], servers: int) -> dict[str, Any]:
    """``kwargs`` of a litellm call, for a Router over ``servers`` servers.

    Where the call goes (server, key, provider) is each deployment's; ``num_retries`` is the
    Router's own (each server once), and the OpenAI client's ``max_retries`` stays 0.
    """
    kwargs = {k: v for k, v in kwargs.items() if k not in _DEPLOYMENT_PARAMS}
    kwargs["num_retries"] = servers - 1
    return kwargs


def make_router(
    endpoint: Endpoint, model: str, bases: Sequence[str], api_key: str | None = None
) -> Any:
    """LiteLLM's ``Router`` over ``bases``: one deployment of ``model`` per server.

    Least busy first; a server that fails once is cooled down for ``cooldown`` seconds. litellm
    is imported already.

    Raises:
        ConfigError: litellm cannot build it (its own error, in one line).
    """
    params: dict[str, Any] = {"model": model, "timeout": endpoint.timeout, "max_retries": 0}
    key = api_key or endpoint.key()
    if key is not None:
        params["api_key"] = key
    if endpoint.custom_llm_provider is not None:
        params["custom_llm_provider"] = endpoint.custom_llm_provider
    deployments = [
        {"model_name": model, "litellm_params": {**params, "api_base": base}} for base in bases
    ]
    try:
        return loaded_litellm().Router(
            model_list=deployments,
            routing_strategy="least-busy",
            num_retries=len(bases) - 1,
            allowed_fails=0,
            cooldown_time=endpoint.cooldown,
            retry_after=0,
            timeout=endpoint.timeout,
        )
    except Exception as exc:  # litellm's own error: a traceback says nothing more
        detail = squash(scrub(f"{type(exc).__name__}: {exc}", endpoint.secrets()), 300)
        raise ConfigError(
            f"cannot spread {model!r} over {len(bases)} servers with litellm's Router: {detail}"
        ) from None
