"""Observation keys declared as data: what a world's ``observe()`` returns, key by key.

A policy author needs the keys of an observation, their types and what they mean. A world
states them once, as ``OBSERVATION_KEYS`` on its class, next to the ``observe`` that builds
them (``vivarium.worlds.base.DocumentedWorld``); ``vivarium.worlds.docs.describe`` and the docs
site read that declaration, and the
built-in worlds' tests check that ``observe()`` returns exactly those keys, so the page cannot
drift from the code.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ObservationKey:
    """One key of a world's observations.

    Attributes:
        name: The key, as ``observe()`` returns it.
        type: Its type as a reader writes it (``"int"``, ``"list[dict]"``, ``"str | None"``).
        description: What the value means, in one or two sentences.
    """

    name: str
    type: str
    description: str
