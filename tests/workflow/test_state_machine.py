"""Transition rules: wildcard, conditions, no rules = anything, undefined states refused."""

from __future__ import annotations

import pytest

from vivarium.workflow import StateMachine, TransitionError

STATES = ["plan", "work", "review"]


def test_no_transitions_listed_allows_any_change() -> None:
    sm = StateMachine(STATES)
    assert sm.initial_state == "plan"
    assert all(sm.can_transition(a, b) for a in STATES for b in STATES)
    assert not sm.can_transition("plan", "nowhere")
    assert not sm.can_transition("nowhere", "plan")


def test_listed_rules_and_shorthand() -> None:
    sm = StateMachine(STATES, ["plan -> work", {"from": "work", "to": "review"}])
    assert sm.can_transition("plan", "work")
    assert sm.can_transition("work", "review")
    assert not sm.can_transition("review", "plan")
    assert not sm.can_transition("work", "plan")
    assert sm.can_transition("review", "review")  # staying is not a change
    assert sm.why_not("work", "plan") == "no transition allows work -> plan"


def test_wildcard_from() -> None:
    sm = StateMachine(STATES, [{"from": "*", "to": "plan"}])
    assert all(sm.can_transition(s, "plan") for s in STATES)
    assert not sm.can_transition("plan", "work")


def test_conditions_use_the_context() -> None:
    sm = StateMachine(
        STATES,
        [
            {"from": "work", "to": "review", "condition": "tick % 5 == 0"},
            {"from": "*", "to": "plan", "condition": "should_pivot and balance > 10"},
            {"from": "review", "to": "plan"},
        ],
    )
    assert sm.can_transition("work", "review", {"tick": 10})
    assert not sm.can_transition("work", "review", {"tick": 11})
    assert sm.can_transition("work", "plan", {"should_pivot": True, "balance": 50})
    assert not sm.can_transition("work", "plan", {"should_pivot": False, "balance": 50})
    # an unconditional rule for the same move wins over a false condition
    assert sm.can_transition("review", "plan", {"should_pivot": False, "balance": 0})
    # a condition that cannot be evaluated refuses, and says why
    assert not sm.can_transition("work", "review", {})
    reason = sm.why_not("work", "review", {})
    assert reason is not None and "failed" in reason and "tick" in reason
    assert "is false" in (sm.why_not("work", "review", {"tick": 3}) or "")


def test_transition_record_or_error() -> None:
    sm = StateMachine(STATES, ["plan -> work"])
    record = sm.transition("plan", "work", trigger="make_plan: done")
    assert record == {
        "from_state": "plan",
        "to_state": "work",
        "trigger": "make_plan: done",
        "routine": False,
    }
    with pytest.raises(TransitionError, match="no transition allows work -> plan"):
        sm.transition("work", "plan")
    with pytest.raises(TransitionError, match="state 'moon' is not defined"):
        sm.transition("plan", "moon")


def test_bad_construction() -> None:
    with pytest.raises(ValueError):
        StateMachine([])
    with pytest.raises(ValueError, match="initial state"):
        StateMachine(STATES, initial_state="moon")


def test_a_move_is_routine_when_the_rule_that_allowed_it_says_so() -> None:
    sm = StateMachine(
        STATES,
        [
            "plan -> work",
            {"from": "work", "to": "review", "routine": True},
            {"from": "review", "to": "plan", "condition": "replan"},
            {"from": "*", "to": "plan", "routine": True, "condition": "not replan"},
        ],
    )
    assert sm.transition("work", "review")["routine"] is True
    assert sm.transition("plan", "work")["routine"] is False
    # the same move, allowed by different rules: the rule whose condition held decides
    assert sm.transition("review", "plan", {"replan": True})["routine"] is False
    assert sm.transition("review", "plan", {"replan": False})["routine"] is True
    # with no rules listed, no move is routine
    assert StateMachine(STATES).transition("review", "plan")["routine"] is False
