"""Vivarium: reproducible multi-agent simulations, from notebooks, scripts and the command line.

The public face, in the order a newcomer meets it:

- ``Experiment`` configures a run (``Experiment(world="channel", agents=5, steps=100, seed=42)``)
  and ``Experiment.run()`` returns a ``Run``: the trace, read as pandas or polars frames.
- ``ExperimentConfig`` is the same thing as a pydantic model (loadable from YAML or JSON); the
  same config and seed give a byte-identical trace.
- ``WorldEngine`` steps a world with its agents and writes the ``TraceDb``; policies
  (``AgentPolicy``, ``RandomAgentPolicy``) map an ``Observation`` to an ``ActionRequest``, and the
  world answers with an ``ActionResult``.
- ``stable_agent_seed`` is the seed of one agent's own generators.
- ``VivariumError`` is the base of every error the user can fix, reported as one line.

``import vivarium`` stays light: pandas, polars, litellm, langgraph, ray, matplotlib and
ipywidgets are imported where they are first used (the names above load on first access).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vivarium._version import __version__
from vivarium.errors import ConfigError, TraceError, VivariumError
from vivarium.seeding import stable_agent_seed
from vivarium.types import ActionRequest, ActionResult, Message, Observation, RunMetadata

if TYPE_CHECKING:
    from vivarium.config import ExperimentConfig
    from vivarium.engine import WorldEngine, WorldEngineConfig
    from vivarium.experiment import Experiment, Run
    from vivarium.policies import AgentPolicy, RandomAgentPolicy
    from vivarium.trace import TraceDb
    from vivarium.worlds import InMemoryChannel

_LAZY = {
    "Experiment": "vivarium.experiment",
    "Run": "vivarium.experiment",
    "ExperimentConfig": "vivarium.config",
    "WorldEngine": "vivarium.engine",
    "WorldEngineConfig": "vivarium.engine",
    "AgentPolicy": "vivarium.policies",
    "RandomAgentPolicy": "vivarium.policies",
    "TraceDb": "vivarium.trace",
    "InMemoryChannel": "vivarium.worlds",
    "Inspector": "vivarium.inspector",
}

__all__ = [
    "ActionRequest",
    "ActionResult",
    "AgentPolicy",
    "ConfigError",
    "Experiment",
    "ExperimentConfig",
    "InMemoryChannel",
    "Inspector",
    "Message",
    "Observation",
    "RandomAgentPolicy",
    "Run",
    "RunMetadata",
    "TraceDb",
    "TraceError",
    "VivariumError",
    "WorldEngine",
    "WorldEngineConfig",
    "__version__",
    "stable_agent_seed",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'vivarium' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
