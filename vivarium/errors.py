"""Errors that name what the user should change. Each renders as one line."""

from __future__ import annotations


class VivariumError(Exception):
    """Base class: a problem the user can fix, reported as one clear line."""


class ConfigError(VivariumError, ValueError):
    """A config, flag or argument is invalid."""


class TraceError(VivariumError):
    """A trace file is missing, foreign, newer than this version, or damaged."""


class UnknownNameError(ConfigError):
    """A world, policy or action name is not registered."""
