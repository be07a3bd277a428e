"""Keys that never show: the API key held hidden, and every text scrubbed of secrets.

A gateway's key goes to the server and nowhere else: not into a repr, an error, a call record,
a cassette, a trace or a log. ``Secret`` holds it; ``scrub`` takes it (and the values of
key-like environment variables, which litellm may send to a provider) out of any text that
could carry it back: an error message, a server's error body, a raw reply.
"""

from __future__ import annotations

import json
import os
from typing import Any


class Secret:
    """A string that never shows itself in a repr, a str or a pickle-free debug dump."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None) -> None:
        """Hold ``value`` (None: no key)."""
        self._value = value

    def get(self) -> str | None:
        """The value itself, for the one place it goes: the request to the server."""
        return self._value

    def __repr__(self) -> str:
        """``***`` (``None`` when there is no value)."""
        return "***" if self._value else "None"

    __str__ = __repr__


def env_secrets() -> list[str]:
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


def scrubbed_body(body: dict[str, Any], secrets: list[str]) -> dict[str, Any]:
    """``body`` without any secret (a provider's body could carry a key; none should)."""
    try:
        text = json.dumps(body, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return body
    clean = scrub(text, secrets)
    return body if clean == text else json.loads(clean)
