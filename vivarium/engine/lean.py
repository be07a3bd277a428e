"""The lean per-agent path: one step of plain synchronous policies, each decision recorded.

The general path (``WorldEngine._commit`` with ``Decider.decide_sync``) pays per decision for
what most runs never use: context variables set and reset around every call (for LLM call
records and the outage mode), a ``Decision`` wrapper, checks for agent state, transitions and
fallbacks in the metadata. Here those are set up once per step, and a decision that needs none
of them (no LLM calls, empty metadata, a request for the right agent and step) goes straight
from ``decide`` to ``apply`` to the step's columns. Any other decision (a policy error, a call
record, metadata, a wrong agent) is handed to ``_commit`` as it was, so the rows are the same
text, byte for byte, whichever path made them.

The engine takes this path when it can tell, once per run, that nothing in it differs:
sequential scheduling, no async policy, no retries, no LLM-token quotas, ``on_llm_error``
``"stop"`` (the mode a decision's context already has by default).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vivarium.engine.deciding import Decision, _describe, _failure_reason, _fatal
from vivarium.gateways.base import (
    _occurrences,
    reset_on_llm_error,
    set_on_llm_error,
    start_collecting,
    stop_collecting,
)
from vivarium.trace.records import StepRecord, encode_object
from vivarium.trace.values import UnrecordableValue
from vivarium.types import ActionRequest, ActionResult

if TYPE_CHECKING:
    from vivarium.engine.engine import WorldEngine
    from vivarium.gateways.base import CallRecord


def lean_eligible(engine: WorldEngine) -> bool:
    """Whether every decision of this engine's runs can take the lean path (fixed per run)."""
    config = engine.config
    return (
        config.scheduling == "sequential"
        and config.agent_retries == 0
        and config.on_llm_error == "stop"
        and not engine.decider.any_async
        and not engine.world_capabilities.llm_quota
    )


def step_lean(engine: WorldEngine, t: int, order: list[int], record: StepRecord) -> None:
    """Decide, apply and record every agent of ``order`` at step ``t``, in that order.

    The same rows, in the same order, as ``_commit(decide_sync(...))`` for each agent.
    """
    calls, token = start_collecting()
    seen = _occurrences.get()
    mode = set_on_llm_error("stop")
    try:
        _decide_all(engine, t, order, record, calls, seen)
    finally:
        reset_on_llm_error(mode)
        stop_collecting(token)
    record.n_actions = len(record.agent_idx)


def _decide_all(
    engine: WorldEngine,
    t: int,
    order: list[int],
    record: StepRecord,
    calls: list[CallRecord],
    seen: dict[str, int] | None,
) -> None:
    run_id = engine.config.run_id
    agent_ids = engine.agent_ids
    policies = engine.policies
    stateful = engine._stateful
    states = engine.agent_states
    world = engine.world
    observe = world.observe
    apply = world.apply
    rows, metadata, fallback = record.agent_idx, record.metadata, record.fallback

    def pad() -> None:
        # A lean row's metadata (None) and fallback (0) are the same every time: written in
        # one go, before a row of the general path and at the end, not once per decision.
        missing = len(rows) - len(metadata)
        if missing:
            metadata.extend([None] * missing)
            fallback.extend([0] * missing)

    pending = engine.decider.pending

    def commit(idx: int, decision: Decision) -> None:
        pad()
        if decision.calls:  # what a stop later in the step discards (``interruptions``)
            pending.append((idx, decision.calls))
        engine._commit(idx, t, decision, record)

    # The step's columns, appended to directly (``StepRecord.add_action``, inlined).
    add_idx = rows.append
    add_action = record.action.append
    add_arguments = record.arguments.append
    add_reasoning = record.reasoning.append
    add_success = record.success.append
    add_result = record.result.append
    add_error = record.error.append
    for idx in order:
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
            commit(idx, Decision(None, _failure_reason([_describe(exc)]), calls[:]))
            continue
        if not isinstance(request, ActionRequest):
            reason = f"policy returned {type(request).__name__}, not ActionRequest"
            commit(idx, Decision(None, reason, calls[:]))
            continue
        if calls or request.metadata or request.agent_id != agent_id or request.time_step != t:
            commit(idx, Decision(request, None, calls[:]))
            continue
        try:  # recorded as the world receives them (as ``_commit`` does)
            arguments = encode_object(request.arguments)
        except UnrecordableValue as exc:
            raise exc.in_decision(
                agent_id, t, request.action_name, "the policy's arguments"
            ) from None
        try:
            result = apply(request)
        except Exception as exc:  # a world bug must not lose the run
            result = ActionResult.failed(f"world error: {type(exc).__name__}: {exc}")
        add_idx(idx)
        add_action(request.action_name)
        add_arguments(arguments)
        add_reasoning(request.reasoning)
        add_success(1 if result.success else 0)
        if result.result is None:
            add_result(None)
        else:
            try:
                add_result(encode_object(result.result))
            except UnrecordableValue as exc:
                part = "the world's result"
                raise exc.in_decision(agent_id, t, request.action_name, part) from None
        error = result.error
        add_error(error if error is None or type(error) is str else str(error))
    pad()
