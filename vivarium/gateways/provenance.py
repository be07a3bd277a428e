"""Where a reply came from: the provider and the model a cassette entry records.

A cassette entry is one reply (or failed call) with the two things that produced it: the model
the run asked for (``LLMRequest.model``: ``mock``, or a litellm name such as ``openai/smollm2``)
and the provider that answered:

- ``vivarium-mock``: the deterministic ``MockLLMGateway``, whatever model name it was asked
  for (``mock: true`` with ``model: openai/x`` is still the mock);
- ``litellm``: a real model, reached through ``LiteLLMGateway`` by its litellm name (whose
  prefix, ``openai/``, already says the route);
- a gateway of the user's own: its ``provider`` attribute, else its class name.

What is left out, and why: the server (``api_base``). It says where calls are sent, not what
answers them: the same model moves between servers and ports (a local server on a free port, a
pool of replicas), a replay reaches no server at all, and a URL may carry credentials
(``user:pass@host``, ``?key=``). Like every setting in ``LLM_TRANSPORT_FIELDS`` it is no part
of what a run is; what the run names (the mock or not, and the model) is what a cassette keys
on. A cassette keeps the replies of one provider (several of its models may share the file: a
workflow agent with its own ``llm_model`` calls another model in the same run), so a reply of
the mock can never be replayed as a model's, nor the reverse.

Entries written before provenance was recorded are attributed by their ``model`` column:
``mock`` to the mock, any other name to a real model whose provider was not recorded (``None``
here), which any provider but the mock may replay.
"""

from __future__ import annotations

from typing import Any

from vivarium.gateways.base import ProvidedGateway, WrappingGateway
from vivarium.protocols import implements

MOCK_PROVIDER = "vivarium-mock"
LITELLM_PROVIDER = "litellm"
MOCK_MODEL = "mock"  # the model name the mock's call records carry, whatever it was asked for


def provider_of(gateway: Any) -> str | None:
    """The provider at the bottom of a gateway stack (following ``inner``), or None for none.

    Args:
        gateway: The top of a stack, or a provider.

    Returns:
        Its ``provider`` attribute when it is a string (the built-in providers have one), else
        its class name; None when ``gateway`` is None (a replay-only stack).
    """
    bottom = gateway
    while implements(bottom, WrappingGateway) and bottom.inner is not None:
        bottom = bottom.inner
    if bottom is None:
        return None
    provider = bottom.provider if implements(bottom, ProvidedGateway) else None
    return provider if isinstance(provider, str) and provider else type(bottom).__name__


def attributed(provider: str | None, model: str | None) -> str | None:
    """The provider of an entry: as recorded, else by its model (an entry from before).

    Returns:
        ``provider``; for an entry without one, the mock's for model ``mock``, else None (a
        real model whose provider was not recorded).
    """
    if provider:
        return provider
    return MOCK_PROVIDER if model == MOCK_MODEL else None


def compatible(entry: str | None, provider: str) -> bool:
    """Whether an entry attributed to ``entry`` came from ``provider`` as far as is known.

    An entry of an unrecorded real provider (None) goes with any provider but the mock.
    """
    if entry is None:
        return provider != MOCK_PROVIDER
    return entry == provider


def describe(provider: str | None) -> str:
    """``provider`` in words, for one-line errors."""
    if provider == MOCK_PROVIDER:
        return f"the deterministic mock ({MOCK_PROVIDER})"
    if provider == LITELLM_PROVIDER:
        return f"a real model ({LITELLM_PROVIDER})"
    if provider is None:
        return "a real model (provider not recorded)"
    return provider


def describe_sources(sources: list[tuple[str, str | None]], limit: int = 3) -> str:
    """``model (provider), ...`` for the (model, provider) pairs a cassette holds."""
    shown = [
        f"{model} ({provider or 'provider not recorded'})" for model, provider in sources[:limit]
    ]
    more = f" and {len(sources) - limit} more" if len(sources) > limit else ""
    return (", ".join(shown) or "none") + more
