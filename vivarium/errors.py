"""Errors that name what the user should change. Each renders as one line."""

from __future__ import annotations

import re

# Line breaks (``str.splitlines`` splits on all of these) and other control characters.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` with line breaks and control characters escaped (``\\n``), so it is one line
    even when it quotes a user's key, value or file name."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def squash(text: object, limit: int = 300) -> str:
    """``text`` with runs of whitespace (line breaks too) made one space, cut to ``limit``
    characters with ``...``: a server's or parser's message fit for a one-line record."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class VivariumError(Exception):
    """Base class: a problem the user can fix, reported as one clear line."""

    def __str__(self) -> str:
        return one_line(super().__str__())


class ConfigError(VivariumError, ValueError):
    """A config, flag or argument is invalid."""


class TraceError(VivariumError):
    """A trace file is missing, foreign, newer than this version, or damaged."""


class UnknownNameError(ConfigError):
    """A world, policy or action name is not registered."""
