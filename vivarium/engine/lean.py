"""The lean per-agent path: one step of plain synchronous policies, each decision recorded.

The general path (``WorldEngine._commit`` with ``Decider.decide_sync``) pays per decision for
what most runs never use: context variables set and reset around every call (for LLM call
records and the outage mode), a ``Decision`` wrapper, checks for agent state, transitions and
fallbacks in the metadata. Here those are set up once per step, and a decision that needs none
of them (no LLM calls, empty metadata) goes straight from ``decide`` to ``DecisionRows.act``.
Any other decision (a policy error, a call record, metadata) is handed to the engine's
``commit`` as it was. Both write through the one writer of rows (``vivarium.engine.rows``), so
the rows are the same text, byte for byte, whichever path made them.

This module knows the engine only by what ``step_lean`` is handed (no import of it: the engine
imports this module, never the other way round).

The engine takes this path when it can tell, once per run, that nothing in it differs:
sequential scheduling, no async policy, no retries, no LLM-token quotas, ``on_llm_error``
``"stop"`` (the mode a decision's context already has by default).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vivarium.engine.deciding import Decision, _describe, _failure_reason, _fatal
from vivarium.engine.rows import DecisionRows
from vivarium.gateways.base import (
    CallRecord,
    _occurrences,
    reset_on_llm_error,
    set_on_llm_error,
    start_collecting,
    stop_collecting,
)
from vivarium.policies.base import AgentPolicy
from vivarium.types import ActionRequest

Commit = Callable[[int, int, Decision, DecisionRows], None]
"""The engine's commit of one decision: (agent index, step, decision, the rows)."""


def lean_eligible(
    *, scheduling: str, retries: int, on_llm_error: str, any_async: bool, llm_quota: bool
) -> bool:
    """Whether every decision of a run can take the lean path (fixed per run).

    Args:
        scheduling: The run's scheduling (the lean path is sequential).
        retries: Retries after a policy error (the lean path makes one attempt).
        on_llm_error: The outage mode (the lean path's is ``"stop"``).
        any_async: Whether any policy is awaited.
        llm_quota: Whether the world bars agents over their LLM-token quota.
    """
    return (
        scheduling == "sequential"
        and retries == 0
        and on_llm_error == "stop"
        and not any_async
        and not llm_quota
    )


def step_lean(
    t: int,
    order: Sequence[int],
    rows: DecisionRows,
    *,
    run_id: str,
    agent_ids: Sequence[str],
    policies: Sequence[AgentPolicy],
    observe: Callable[[str, int], dict[str, Any]],
    states: Mapping[int, Any],
    stateful: Sequence[bool],
    pending: list[tuple[int, list[CallRecord]]],
    commit: Commit,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Decide, apply and record every agent of ``order`` at step ``t``, in that order.

    The same rows, in the same order, as ``commit(decide_sync(...))`` for each agent.

    Args:
        t: The step.
        order: Agent indices in commit order.
        rows: The writer of the step's rows.
        run_id: The run the decisions are for.
        agent_ids: Every agent's id, in agent index order.
        policies: Every agent's policy, in the same order.
        observe: The world's ``observe``.
        states: The agent states the engine keeps, by agent index.
        stateful: Per agent, whether its observation carries its agent state.
        pending: The step's decisions with call records (what a stop discards).
        commit: The engine's commit, for a decision that needs more than ``rows.act``.
        progress: Told how many decisions are in after each (``StepProgress``), if given.
    """
    calls, token = start_collecting()
    seen = _occurrences.get()
    mode = set_on_llm_error("stop")
    act = rows.act

    def hand_over(idx: int, decision: Decision) -> None:
        if decision.calls:  # what a stop later in the step discards (``interruptions``)
            pending.append((idx, decision.calls))
        commit(idx, t, decision, rows)

    try:
        for done, idx in enumerate(order, start=1):
            if progress is not None and done > 1:
                progress(done - 1)
            # Each decision starts with no call records and no request counts, as a fresh
            # ``start_collecting`` would give it (a world's own calls in ``apply`` are dropped).
            if calls:
                calls.clear()
            if seen:
                seen.clear()
            agent_id = agent_ids[idx]
            observation = observe(agent_id, t)
            if stateful[idx]:
                observation = {**observation, "agent_state": states.get(idx)}
            try:
                request = policies[idx].decide(
                    run_id=run_id, time_step=t, agent_id=agent_id, observation=observation
                )
            except Exception as exc:  # fail soft, record loud (as Decider.decide_sync)
                if (abort := _fatal(exc, agent_id, t)) is not None:
                    pending.append((idx, calls[:]))
                    raise abort from None
                hand_over(idx, Decision(None, _failure_reason([_describe(exc)]), calls[:]))
                continue
            if not isinstance(request, ActionRequest):
                reason = f"policy returned {type(request).__name__}, not ActionRequest"
                hand_over(idx, Decision(None, reason, calls[:]))
            elif calls or request.metadata:
                hand_over(idx, Decision(request, None, calls[:]))
            else:
                act(idx, request)
    finally:
        reset_on_llm_error(mode)
        stop_collecting(token)
