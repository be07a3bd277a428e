"""Worlds: where agents act. A world is anything with observe / apply / state_digest."""

from vivarium.worlds.channel import CHANNEL_ACTIONS, InMemoryChannel
from vivarium.worlds.docs import describe
from vivarium.worlds.observation import ObservationKey
from vivarium.worlds.registry import ActionError, ActionRegistry, ActionSpec

__all__ = [
    "CHANNEL_ACTIONS",
    "ActionError",
    "ActionRegistry",
    "ActionSpec",
    "InMemoryChannel",
    "ObservationKey",
    "describe",
]
