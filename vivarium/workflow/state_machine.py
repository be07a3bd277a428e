"""Which state changes a workflow allows, and the record of each one made.

Rules come from ``workflow.transitions``: ``from`` (a state or ``"*"``), ``to``, and an optional
safe-eval ``condition`` over the decision's context. With no rules listed, any change between
defined states is allowed. Staying in the current state is always allowed (it is not a change).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vivarium import sandbox
from vivarium.errors import VivariumError
from vivarium.workflow.config import WILDCARD, TransitionConfig, WorkflowConfig


class TransitionError(VivariumError, ValueError):
    """A state change the workflow does not allow; the message says why, in one line."""


class StateMachine:
    """States plus transition rules. Stateless: the current state is passed in, never held."""

    def __init__(
        self,
        states: Sequence[str],
        transitions: Sequence[TransitionConfig | Mapping[str, Any] | str] = (),
        initial_state: str | None = None,
    ) -> None:
        """Check the states and parse the rules.

        Args:
            states: The states, at least one.
            transitions: The rules (``TransitionConfig``, a mapping, or ``"a -> b"``).
            initial_state: Where an agent starts; the first state when None.

        Raises:
            ValueError: No states, or an initial state that is not one of them.
        """
        if not states:
            raise ValueError("a state machine needs at least one state")
        self.states: tuple[str, ...] = tuple(states)
        self.rules: tuple[TransitionConfig, ...] = tuple(
            t if isinstance(t, TransitionConfig) else TransitionConfig.model_validate(t)
            for t in transitions
        )
        self.initial_state = initial_state or self.states[0]
        if self.initial_state not in self.states:
            raise ValueError(f"initial state {self.initial_state!r} is not defined")

    @classmethod
    def from_config(cls, workflow: WorkflowConfig) -> StateMachine:
        """The machine of a workflow's states, transitions and start state."""
        return cls(workflow.states, workflow.transitions, workflow.start)

    def why_not(self, src: str, dst: str, context: Mapping[str, Any] | None = None) -> str | None:
        """``None`` if ``src -> dst`` is allowed in ``context``, else the reason it is not."""
        return self._match(src, dst, context)[1]

    def _match(
        self, src: str, dst: str, context: Mapping[str, Any] | None
    ) -> tuple[TransitionConfig | None, str | None]:
        """The rule that allows ``src -> dst``, or the reason no rule does.

        The rule is the first listed whose condition holds; None when no rule is needed.
        """
        for name in (src, dst):
            if name not in self.states:
                return None, f"state {name!r} is not defined (states: {', '.join(self.states)})"
        if src == dst or not self.rules:
            return None, None
        candidates = [r for r in self.rules if r.to == dst and r.from_ in (src, WILDCARD)]
        if not candidates:
            return None, f"no transition allows {src} -> {dst}"
        problems = []
        for rule in candidates:
            if rule.condition is None:
                return rule, None
            try:
                if sandbox.evaluate(rule.condition, dict(context or {})):
                    return rule, None
                problems.append(f"condition {rule.condition!r} is false")
            except Exception as exc:  # EvaluationError, UnsafeExpression: not allowed, say why
                text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                problems.append(
                    f"condition {rule.condition!r} failed: {type(exc).__name__}"
                    + (f": {text}" if text else "")
                )
        return None, f"{src} -> {dst} not allowed: " + "; ".join(problems)

    def can_transition(self, src: str, dst: str, context: Mapping[str, Any] | None = None) -> bool:
        """Whether ``src -> dst`` is allowed in ``context``."""
        return self.why_not(src, dst, context) is None

    def transition(
        self,
        src: str,
        dst: str,
        context: Mapping[str, Any] | None = None,
        *,
        trigger: str = "",
    ) -> dict[str, Any]:
        """The record of the move ``src -> dst``.

        Returns:
            ``{"from_state", "to_state", "trigger", "routine"}``; ``routine`` is the flag of the
            rule that allowed the move.

        Raises:
            TransitionError: The move is not allowed; the message says why.
        """
        rule, reason = self._match(src, dst, context)
        if reason is not None:
            raise TransitionError(reason)
        routine = bool(rule is not None and rule.routine)
        return {"from_state": src, "to_state": dst, "trigger": trigger, "routine": routine}
