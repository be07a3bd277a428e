"""Vivarium: reproducible multi-agent simulations, from notebooks, scripts and the command line.

The public face, in the order a newcomer meets it:

- ``Experiment`` configures a run (``Experiment(world="channel", agents=5, steps=100, seed=42)``)
  and ``Experiment.run()`` returns a ``Run``: the trace, read as pandas or polars frames.
- ``ExperimentConfig`` is the same thing as a pydantic model (loadable from YAML or JSON), its
  ``llm`` section an ``LLMConfig``; the same config and seed give a byte-identical trace. The way
  from a config to a run is one package, ``vivarium.experiment``, read in the order of the flow.
- ``register_world`` and ``register_policy`` name your own world or policy factory, so a config
  can name it (an object passed to ``Experiment`` needs no name).
- ``WorldEngine`` steps a world with its agents and writes the ``TraceDb``; policies
  (``AgentPolicy``, ``RandomAgentPolicy``) map an ``Observation`` to an ``ActionRequest``, and the
  world answers with an ``ActionResult``.
- ``World`` and ``AgentPolicy`` are the contracts your own world and policy are written against:
  the methods every one has. What else one may do is a capability, one small protocol each
  (``CheckpointableWorld``, ``AgentReportingWorld``, ``StatefulPolicy``, ...), checked once when
  a run is built (``vivarium.protocols``); ``LLMGateway`` is the contract of a model client.
- ``stable_agent_seed`` is the seed of one agent's own generators.
- ``VivariumError`` is the base of every error the user can fix, reported as one line.

``import vivarium`` stays light: pandas, polars, litellm, langgraph, ray, matplotlib and
ipywidgets are imported where they are first used (the names above load on first access).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vivarium import _moved
from vivarium._version import __version__
from vivarium.errors import ConfigError, TraceError, VivariumError
from vivarium.lazy import lazy_names
from vivarium.seeding import stable_agent_seed
from vivarium.types import ActionRequest, ActionResult, Message, Observation, RunMetadata

_moved.install()  # older module paths (``vivarium.config``, ``vivarium.build``, ...) keep working

if TYPE_CHECKING:
    from vivarium.engine import WorldEngine, WorldEngineConfig
    from vivarium.experiment.build import register_policy, register_world
    from vivarium.experiment.config import ExperimentConfig, LLMConfig
    from vivarium.facade import Experiment, Run
    from vivarium.gateways.base import (
        AsyncGateway,
        AsyncGatewayLayer,
        ClosableGateway,
        GatewayLayer,
        LLMGateway,
        ModelGateway,
        ProvidedGateway,
        WrappingGateway,
    )
    from vivarium.policies import AgentPolicy, RandomAgentPolicy
    from vivarium.policies.base import (
        AgentSeedPolicy,
        AsyncAgentPolicy,
        BatchDecider,
        BatchPolicy,
        CallsLLM,
        NamedPolicy,
        SeededPolicy,
        StatefulPolicy,
        UsesAgentState,
        UsesWorldActions,
    )
    from vivarium.trace import TraceDb
    from vivarium.worlds import InMemoryChannel
    from vivarium.worlds.base import (
        ActionWorld,
        AgentListWorld,
        AgentReportingWorld,
        BatchWorld,
        CheckpointableWorld,
        DocumentedWorld,
        GridWorld,
        LLMQuotaWorld,
        MessagingWorld,
        ModelReportingWorld,
        NamedWorld,
        PositionedWorld,
        SizedWorld,
        World,
    )

# The contracts (``typing.Protocol``s): the world's, the policy's and the gateway's.
_WORLD_PROTOCOLS = (
    "World",
    "NamedWorld",
    "ActionWorld",
    "MessagingWorld",
    "CheckpointableWorld",
    "LLMQuotaWorld",
    "BatchWorld",
    "ModelReportingWorld",
    "AgentReportingWorld",
    "AgentListWorld",
    "GridWorld",
    "PositionedWorld",
    "SizedWorld",
    "DocumentedWorld",
)
_POLICY_PROTOCOLS = (
    "AsyncAgentPolicy",
    "UsesAgentState",
    "StatefulPolicy",
    "UsesWorldActions",
    "CallsLLM",
    "BatchPolicy",
    "BatchDecider",
    "NamedPolicy",
    "SeededPolicy",
    "AgentSeedPolicy",
)
_GATEWAY_PROTOCOLS = (
    "LLMGateway",
    "AsyncGateway",
    "GatewayLayer",
    "AsyncGatewayLayer",
    "WrappingGateway",
    "ProvidedGateway",
    "ModelGateway",
    "ClosableGateway",
)

_LAZY = {
    "Experiment": "vivarium.facade",
    "Run": "vivarium.facade",
    "ExperimentConfig": "vivarium.experiment.config",
    "LLMConfig": "vivarium.experiment.config",
    "register_world": "vivarium.experiment.build",
    "register_policy": "vivarium.experiment.build",
    "WorldEngine": "vivarium.engine",
    "WorldEngineConfig": "vivarium.engine",
    "AgentPolicy": "vivarium.policies",
    "RandomAgentPolicy": "vivarium.policies",
    "TraceDb": "vivarium.trace",
    "InMemoryChannel": "vivarium.worlds",
    "Inspector": "vivarium.inspector",
    **dict.fromkeys(_WORLD_PROTOCOLS, "vivarium.worlds.base"),
    **dict.fromkeys(_POLICY_PROTOCOLS, "vivarium.policies.base"),
    **dict.fromkeys(_GATEWAY_PROTOCOLS, "vivarium.gateways.base"),
}

__all__ = [
    "ActionRequest",
    "ActionResult",
    "ActionWorld",
    "AgentListWorld",
    "AgentPolicy",
    "AgentReportingWorld",
    "AgentSeedPolicy",
    "AsyncAgentPolicy",
    "AsyncGateway",
    "AsyncGatewayLayer",
    "BatchDecider",
    "BatchPolicy",
    "BatchWorld",
    "CallsLLM",
    "CheckpointableWorld",
    "ClosableGateway",
    "ConfigError",
    "DocumentedWorld",
    "Experiment",
    "ExperimentConfig",
    "GatewayLayer",
    "GridWorld",
    "InMemoryChannel",
    "Inspector",
    "LLMConfig",
    "LLMGateway",
    "LLMQuotaWorld",
    "Message",
    "MessagingWorld",
    "ModelGateway",
    "ModelReportingWorld",
    "NamedPolicy",
    "NamedWorld",
    "Observation",
    "PositionedWorld",
    "ProvidedGateway",
    "RandomAgentPolicy",
    "Run",
    "RunMetadata",
    "SeededPolicy",
    "SizedWorld",
    "StatefulPolicy",
    "TraceDb",
    "TraceError",
    "UsesAgentState",
    "UsesWorldActions",
    "VivariumError",
    "World",
    "WorldEngine",
    "WorldEngineConfig",
    "WrappingGateway",
    "__version__",
    "register_policy",
    "register_world",
    "stable_agent_seed",
]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, __all__)
