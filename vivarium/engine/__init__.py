"""The stepping engine."""

from vivarium.engine.engine import WorldEngine, WorldEngineConfig

__all__ = ["WorldEngine", "WorldEngineConfig"]
