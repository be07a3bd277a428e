"""Agent workflows: an agent as a state machine of steps, written as data in an agent folder.

``load_agent`` reads a folder (``agent.yaml`` + ``system_prompt.md``) into an ``AgentSpec``;
``WorkflowPolicy`` runs it. Conditions and code steps run in the sandbox (``vivarium.sandbox``).
The names load on first use, so ``import vivarium.workflow`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vivarium.lazy import lazy_names

if TYPE_CHECKING:
    from vivarium.workflow.config import (
        AgentSpec,
        ComponentConfig,
        StepConfig,
        TransitionConfig,
        WorkflowConfig,
        load_agent,
    )
    from vivarium.workflow.policy import WorkflowPolicy
    from vivarium.workflow.state_machine import StateMachine, TransitionError

_LAZY = {
    "AgentSpec": "vivarium.workflow.config",
    "ComponentConfig": "vivarium.workflow.config",
    "StepConfig": "vivarium.workflow.config",
    "TransitionConfig": "vivarium.workflow.config",
    "WorkflowConfig": "vivarium.workflow.config",
    "load_agent": "vivarium.workflow.config",
    "WorkflowPolicy": "vivarium.workflow.policy",
    "StateMachine": "vivarium.workflow.state_machine",
    "TransitionError": "vivarium.workflow.state_machine",
}

__all__ = [
    "AgentSpec",
    "ComponentConfig",
    "StateMachine",
    "StepConfig",
    "TransitionConfig",
    "TransitionError",
    "WorkflowConfig",
    "WorkflowPolicy",
    "load_agent",
]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, __all__)
