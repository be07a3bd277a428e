"""Agent workflows, and the restricted evaluator their conditions and artifact methods run in.

The workflow names (``load_agent``, ``WorkflowPolicy``, ...) load on first use, so importing
``vivarium.workflow.safe_eval`` (as worlds do) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vivarium.workflow.safe_eval import (
    EvaluationError,
    Limits,
    UnsafeExpression,
    check,
    evaluate,
    execute,
)

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
    "EvaluationError",
    "Limits",
    "StateMachine",
    "StepConfig",
    "TransitionConfig",
    "TransitionError",
    "UnsafeExpression",
    "WorkflowConfig",
    "WorkflowPolicy",
    "check",
    "evaluate",
    "execute",
    "load_agent",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'vivarium.workflow' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
