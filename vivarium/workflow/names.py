"""The names a workflow decision's context holds, known before any decision runs.

Two modules need them and neither should import the other for it: loading an agent
(``vivarium.workflow.config``) refuses code and conditions that read a name the context will not
hold, and building a prompt (``vivarium.workflow.prompt``) fills the same names in.
"""

from __future__ import annotations

__all__ = ["DERIVED_KEYS", "OBSERVATION_KEYS", "RESERVED_NAMES"]

# Observation keys copied into the context (the ecology world's; others pass through too). Each
# is present in every context, None when the observation lacks it.
OBSERVATION_KEYS = (
    "agent_id",
    "balance",
    "time_step",
    "time_remaining",
    "progress_percent",
    "steps_total",
    "artifacts",
    "my_artifacts",
    "action_history",
    "failure_history",
    "last_action_result",
    "success_rate",
    "economic_context",
    "messages",
    "working_memory",
    "memory",
    "tools",
)

# Names derived from the observation for agents written for the agent ecology (its workflow
# context: ``vivarium.workflow.prompt`` says what each holds). Each is present in every context.
DERIVED_KEYS = (
    "tick",
    "memories",
    "other_agents",
    "other_artifacts",
    "actions_taken",
    "successful_actions",
    "failed_actions",
    "revenue_earned",
    "recent_failures",
    "recent_successes",
)

# Context names the workflow sets itself; code steps may read them but not assign them.
# (``context`` reads every name in scope: ``vivarium.sandbox.SCOPE_NAME``.)
RESERVED_NAMES = frozenset({"state", "last_transition", "decisions", "context"})
