"""The litellm transport: ``litellm.completion`` / ``acompletion``, for any provider it knows.

litellm (and the OpenAI client under it) would retry silently; here both are told not to
(``num_retries=0``, ``max_retries=0``): one attempt per call, the retry layer above decides.
The body a call record keeps is the body litellm handed its client, caught with a
``logger_fn`` just before the request goes out; a call that fails before litellm built it sent
nothing, and keeps the request as asked. litellm is imported by ``prepare`` (or, for a model not
prepared, before the call's clock starts), never by ``import vivarium.gateways``.
"""

from __future__ import annotations

from typing import Any

from vivarium.errors import ConfigError
from vivarium.gateways.base import LLMRequest
from vivarium.gateways.exchange import request_body, sent_body
from vivarium.gateways.litellm_lib import import_litellm, loaded_litellm
from vivarium.gateways.openai_http import wire_model
from vivarium.gateways.secrecy import scrubbed_body
from vivarium.gateways.transports import LOCAL_API_KEY, Endpoint, Sending
from vivarium.gateways.transports.warm_up import CannedServer, warm_up, warm_up_request


class LiteLLMTransport:
    """Each attempt is one ``litellm.completion`` (blocking) or ``acompletion`` call."""

    def prepare(self, endpoint: Endpoint, model: str) -> None:
        """Check that litellm knows ``model``'s provider, and make its first call now.

        litellm is imported already.

        Raises:
            ConfigError: litellm knows no provider for ``model``.
        """
        check_provider(endpoint, model)
        self.warm_up(endpoint, model)

    def warm_up(self, endpoint: Endpoint, model: str) -> None:
        """Make ``model``'s first calls now, to a canned local server (``warm_up``).

        Only for OpenAI-compatible models, which honour ``api_base``: nothing leaves this
        machine.
        """
        if wire_model(model, endpoint.custom_llm_provider) is not None:
            with CannedServer() as url:
                warm_up(*self.warm_up_call(endpoint, model, url))

    def route(self, endpoint: Endpoint, request: LLMRequest) -> tuple[Any, dict[str, Any]]:
        """What to call for ``request`` (litellm itself) and with which keyword arguments."""
        caller = import_litellm()
        return caller, litellm_kwargs(endpoint, request)

    def warm_up_call(self, endpoint: Endpoint, model: str, url: str) -> tuple[Any, dict[str, Any]]:
        """What ``warm_up`` calls, and with what, to reach the canned server at ``url``."""
        kwargs = litellm_kwargs(endpoint, warm_up_request(model))
        kwargs.update(api_key=LOCAL_API_KEY, timeout=30.0, api_base=url)
        return loaded_litellm(), kwargs

    def sending(self, endpoint: Endpoint, request: LLMRequest) -> Sending:
        """The blocking and async calls of ``request``, and the body litellm sent."""
        caller, kwargs = self.route(endpoint, request)
        caught: list[Any] = []
        theirs = kwargs.get("logger_fn")

        def catch(details: dict[str, Any]) -> None:
            # litellm calls it just before posting: the body, as handed to its client
            caught.append((details.get("additional_args") or {}).get("complete_input_dict"))
            if callable(theirs):
                theirs(details)

        kwargs["logger_fn"] = catch
        # Failing before litellm built its body, the call sent nothing: the request as asked.
        asked = endpoint.wire_body(
            request, request_body(request, wire_model(request.model, endpoint.custom_llm_provider))
        )

        def sent() -> dict[str, Any]:
            found = next((c for c in reversed(caught) if isinstance(c, dict)), None)
            return asked if found is None else scrubbed_body(sent_body(found), endpoint.secrets())

        return Sending(
            lambda: caller.completion(**kwargs), lambda: caller.acompletion(**kwargs), sent
        )

    def explain(self, exc: BaseException, text: str) -> str:
        """The text as it is: litellm's exception names what failed."""
        return text


def litellm_kwargs(endpoint: Endpoint, request: LLMRequest) -> dict[str, Any]:
    """The keyword arguments of ``litellm.completion`` for ``request`` (one attempt, no retry).

    ``extra`` first, then the request body, where the call goes, and the timeout.
    """
    kwargs: dict[str, Any] = dict(endpoint.extra)
    kwargs.update(endpoint.wire_body(request, request_body(request)))
    if endpoint.api_base is not None:
        kwargs["api_base"] = endpoint.api_base
    if (key := endpoint.key()) is not None:
        kwargs["api_key"] = key
    if endpoint.custom_llm_provider is not None:
        kwargs["custom_llm_provider"] = endpoint.custom_llm_provider
    kwargs.update(timeout=endpoint.timeout, num_retries=0, max_retries=0)
    return kwargs


def check_provider(endpoint: Endpoint, model: str) -> None:
    """Fail now, in one line, when litellm cannot tell which provider serves ``model``.

    ``fake`` instead of ``openai/fake``: otherwise each call would fail as a bad request,
    recorded as the agent's fallback, or litellm's Router would not build.

    Raises:
        ConfigError: litellm knows no provider for ``model``.
    """
    try:
        loaded_litellm().get_llm_provider(
            model, custom_llm_provider=endpoint.custom_llm_provider, api_base=endpoint.api_base
        )
    except Exception:
        hint = (
            f"for an OpenAI-compatible server at api_base, 'openai/{model}'"
            if endpoint.api_base is not None
            else "e.g. 'openai/gpt-4o-mini'"
        )
        raise ConfigError(
            f"llm.model {model!r} names no provider litellm knows: prefix it with one ({hint})"
        ) from None
