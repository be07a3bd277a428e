"""Named code actions: a code step may run ``action: NAME`` instead of ``code:``.

The agent ecology's workflow documentation (ADR-0013, its agents.md) shows a code step written
``{type: code, action: execute_decision}``: a predefined action rather than code, run after the
LLM steps that decided. Its runner never implemented the field (a code step there needs
``code``); this is the small registry that gives such names a meaning. The loader refuses any
other name in one line; the workflow runner (``vivarium.workflow.policy``) performs them.
"""

from __future__ import annotations

__all__ = ["CODE_ACTIONS", "EXECUTE_DECISION", "NOOP", "describe_unknown"]

EXECUTE_DECISION = "execute_decision"
NOOP = "noop"

# name -> what the runner does when a code step with ``action: name`` runs
CODE_ACTIONS: dict[str, str] = {
    EXECUTE_DECISION: (
        "the action the latest llm step of this decision chose becomes the decision's action "
        "now: the step's transition_to still applies, later steps of the decision do not run; "
        "with no action chosen yet in this decision the step fails (its on_failure applies)"
    ),
    NOOP: (
        "the decision's action is noop, without a model call: the step's transition_to still "
        "applies, later steps of the decision do not run"
    ),
}


def describe_unknown(name: str) -> str:
    """The one-line refusal of an unknown name, listing the known ones."""
    return f"unknown code action {name!r} (known: {', '.join(sorted(CODE_ACTIONS))})"
