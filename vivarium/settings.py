"""Where each setting of a run lives: its one default here, its one definition and resolution named.

A setting is defined once, as a field of the experiment config (``vivarium.experiment.config``:
``ExperimentConfig`` and its ``llm`` section, ``LLMConfig``), whose description is its
documentation. Its default is the constant below, and nothing else writes that value: the config
field, and every layer that takes the setting without a config (the engine's
``WorldEngineConfig``, the gateway stack's ``GatewaySettings``, a world or a gateway built by
hand), default to it. A setting that can be given in more than one place or shape is read by
one function, which every entry point (the constructor, ``from_file``, the ``vvm`` flags, aam's
sectioned config, a sweep axis, a resume, the panel) goes through:

| setting           | given as                                    | read by                                |
|-------------------|---------------------------------------------|----------------------------------------|
| `max_concurrency` | the run's own; `llm.max_concurrency`; aam's | `ExperimentConfig.decisions_in_flight` |
| `api_base`        | a URL, URLs separated by commas, a list     | `server_urls` (`LLMConfig.api_bases`)  |
| `llm`             | the section, or none (the mock answers)     | `ExperimentConfig.llm_in_force`        |
| an agent's seed   | derived from `seed` (`AgentSeeds`)          | `vivarium.experiment.build.recorded_seeds`        |

Formats Vivarium reads from elsewhere keep their own defaults, as their files mean them: an aam
sectioned config without ``scheduler.max_concurrency`` ran 50 decisions at once
(``vivarium.experiment.sections.AAM_MAX_CONCURRENCY``), and its translation says 50.

This module imports nothing of Vivarium, so every layer may read it (and it stays light).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_AGENTS",
    "DEFAULT_AGENT_RETRIES",
    "DEFAULT_CACHE_MODE",
    "DEFAULT_DETERMINISTIC_TIMESTAMPS",
    "DEFAULT_FORCED_TOOL_FORMAT",
    "DEFAULT_MAX_CONCURRENCY",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_MESSAGE_HISTORY_LIMIT",
    "DEFAULT_MOCK_LATENCY_MS",
    "DEFAULT_MODEL",
    "DEFAULT_NUM_RETRIES",
    "DEFAULT_ON_LLM_ERROR",
    "DEFAULT_ORDER",
    "DEFAULT_RUNS_DIR",
    "DEFAULT_SCHEDULING",
    "DEFAULT_SEED",
    "DEFAULT_STEPS",
    "DEFAULT_TEMPERATURE",
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_TRANSPORT",
    "check_server_url",
    "server_urls",
]

# -- the run ------------------------------------------------------------------------------------
DEFAULT_SEED: Final = 42
"""``seed``: the run's master seed."""

DEFAULT_STEPS: Final = 100
"""``steps``: steps a stepped run takes (``vvm phase1`` too)."""

DEFAULT_AGENTS: Final = 5
"""``agents``: agents of ``policy`` (``vvm phase1`` too)."""

DEFAULT_SCHEDULING: Final = "sequential"
"""``scheduling``: each agent sees the world after the agents before it acted this step."""

DEFAULT_ORDER: Final = "sorted"
"""``order``: agents act in sorted id order (``shuffle``: a seeded shuffle per step)."""

DEFAULT_MESSAGE_HISTORY_LIMIT: Final = 20
"""``message_history_limit``: messages an observation carries (the channel's, the ecology's)."""

DEFAULT_DETERMINISTIC_TIMESTAMPS: Final = True
"""``deterministic_timestamps``: logical timestamps, so the same config gives the same bytes."""

DEFAULT_MAX_CONCURRENCY: Final = 16
"""``max_concurrency``: async decisions of one step (LLM agents, async policies) in flight at once.

How fast a run goes, never what it records: it is left out of the run's identity.
"""

DEFAULT_RUNS_DIR: Final = Path("runs")
"""Where traces go when neither the call nor the config names a file or a folder."""

# -- the LLM section (``llm``) ------------------------------------------------------------------
DEFAULT_MODEL: Final = "mock"
"""``llm.model``: the deterministic mock answers unless a model is named."""

DEFAULT_TEMPERATURE: Final = 0.0
"""``llm.temperature``."""

DEFAULT_MAX_TOKENS: Final = 128
"""``llm.max_tokens``: the most tokens one reply may have."""

DEFAULT_TRANSPORT: Final = "auto"
"""``llm.transport``: ``openai/`` models on an ``api_base`` over plain HTTP, others via litellm."""

DEFAULT_FORCED_TOOL_FORMAT: Final = "tool_choice"
"""``llm.forced_tool_format``: a forced tool is sent as OpenAI's named ``tool_choice``.

Only another format is part of a run's identity and a cassette's key (ids stay what they were).
"""

DEFAULT_TIMEOUT_S: Final = 60.0
"""``llm.timeout``: seconds one attempt of an LLM call may take."""

DEFAULT_NUM_RETRIES: Final = 2
"""``llm.num_retries``: retries of a failed call after its first attempt (the retry layer)."""

DEFAULT_CACHE_MODE: Final = "auto"
"""``llm.cache_mode``: replay what the cassette holds, record the rest."""

DEFAULT_MOCK_LATENCY_MS: Final = 0.0
"""``llm.mock_latency_ms``: how long the mock takes to answer."""

DEFAULT_AGENT_RETRIES: Final = 0
"""``llm.agent_retries``: retries of a decision that timed out or failed (no ``agent_timeout``:
a decision has no time limit)."""

DEFAULT_ON_LLM_ERROR: Final = "stop"
"""``llm.on_llm_error``: an LLM outage past the retries stops the run (resumable)."""


# -- api_base: one URL, several, or URLs separated by commas; one tuple inside ------------------
def check_server_url(url: str) -> None:
    """One server's base URL: http(s), a host, a valid port, nothing else in it.

    Raises:
        ValueError: What is wrong, in one line.
    """
    if not url:
        raise ValueError("an empty server URL (a comma too many?)")
    if url.startswith("$"):
        raise ValueError(f"{url!r}: environment variables are not expanded here; give the URL")
    if any(c.isspace() for c in url) or ";" in url:
        raise ValueError(f"{url!r} is not one URL (separate several with commas)")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http:// or https:// URL with a host")
    try:
        parts.port  # noqa: B018 - read for its check: a port that is not a number or too large
    except ValueError:
        raise ValueError(f"{url!r} has no valid port (1-65535)") from None


def server_urls(value: str | Sequence[str] | None, *, check: bool = True) -> tuple[str, ...]:
    """The servers an ``api_base`` names, in the one shape every layer uses: a tuple of URLs.

    ``api_base`` is given as one URL, as one string of URLs separated by commas (a ``vvm``
    flag, the panel's text field), or as a list of URLs (a config file); it is recorded as
    given, one URL as a string (``LLMConfig``). Whatever the shape, this reads it: the config's
    validation, ``LLMConfig.api_bases``, the gateway stack and ``LiteLLMGateway`` all see the
    same tuple.

    Args:
        value: The ``api_base`` as given; None (or nothing in it) names no server: the
            provider's own.
        check: Refuse a URL that is not one, or one listed twice (``ValueError``, one line);
            False reads leniently (for a note about a value not yet validated).

    Returns:
        The URLs, stripped, in the order given; empty for none.

    Raises:
        ValueError: With ``check``: an entry is not an http(s) URL, or is listed twice, or
            the value names no server at all though it is given.
    """
    if value is None:
        return ()
    if not isinstance(value, str | list | tuple):  # ``api_base: true`` in a file: no URL shape
        if not check:
            return ()
        raise ValueError(
            f"expected a server URL, URLs separated by commas, or a list of URLs, not {value!r}"
        )
    given = value.split(",") if isinstance(value, str) else list(value)
    if not check:
        return tuple(url for url in (str(u).strip() for u in given) if url)
    urls = tuple(u.strip() if isinstance(u, str) else u for u in given)
    if not urls:
        raise ValueError("give at least one server URL")
    seen: set[str] = set()
    for url in urls:
        check_server_url(url)
        if (key := url.rstrip("/")) in seen:
            raise ValueError(f"{url} is listed twice")
        seen.add(key)
    return urls
